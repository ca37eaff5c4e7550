// Progress of long client phases (packing, uploading, waiting for the registry, downloading,
// applying, verifying, unpacking) on stderr, in one of these modes:
//
//   kOff       nothing (`--quiet`, `--progress=off`).
//   kTerminal  one line redrawn in place with '\r' at most 5 times a second, never wider than
//              the terminal's width - 1 columns (TIOCGWINSZ on the output's fd, read again after
//              SIGWINCH), the label truncated first when narrow. Phases over within a second
//              draw nothing; the others end with a final line and '\n'.
//              Only used when the output is a terminal: asked for on anything else, it is kPlain.
//   kPlain     `--progress=plain`, for CI logs: no '\r' ever; a line every kPlainInterval at
//              most while a phase runs, and one final line for every phase, however short.
//   kSparse    the default when stderr is not a terminal: no '\r'; a line every
//              kSparseInterval at most, and a final line only for phases that took a second or
//              more.
//
// A line shows the label, then for byte counts "12.3 MiB / 45.6 MiB  27%  8.1 MiB/s  ETA 0:04",
// and for phases without them (total 0 and nothing done yet, e.g. waiting for the registry to
// compute a patch) a spinner and the elapsed seconds. A meter made with `ticking` = true
// redraws by itself (from a ticker thread, joined by Finish / the destructor) while no update
// arrives, so a wait with no bytes moving still shows itself.
//
// Thread safety: Update / Callback / Finish may be called from any one thread while the ticker
// runs; the meter's state is guarded by a mutex. The only signal handler installed (SIGWINCH,
// by the terminal width provider, once per process, chained to any earlier handler) only sets
// an atomic flag.
#ifndef BLZ_CLIENT_PROGRESS_H_
#define BLZ_CLIENT_PROGRESS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "client/http_client.h"

namespace blz::client {

// "0 B", "1023 B", "1.5 KiB", "12.3 MiB", "2.00 GiB".
std::string FormatBytes(uint64_t bytes);
// A duration for an ETA or an elapsed time: "0:07", "12:34", "1:02:03"; "99:59:59+" beyond.
std::string FormatDuration(uint64_t seconds);

enum class ProgressMode { kOff, kTerminal, kPlain, kSparse };

// What the user asked for on the command line.
enum class ProgressRequest { kAuto, kTerminal, kPlain, kOff };

// "auto", "terminal", "plain", "off" (and "always", what a bare `--progress` means: kTerminal).
// Errors: kInvalidArgument naming the accepted values.
Result<ProgressRequest> ParseProgressRequest(std::string_view text);

// The mode for a request given whether the output is a terminal: kAuto is kTerminal on a
// terminal and kSparse elsewhere; kTerminal is kPlain when the output is not a terminal.
ProgressMode ResolveProgressMode(ProgressRequest request, bool output_is_terminal);
// The same for stderr (isatty(2)).
ProgressMode ResolveProgressMode(ProgressRequest request);

// The number of columns of the output, or 0 when unknown (then 80 is assumed).
using WidthFn = std::function<int()>;
// The width of the terminal on `fd` (TIOCGWINSZ), read once and again after each SIGWINCH.
WidthFn TerminalWidth(int fd);

class ProgressMeter {
 public:
  static constexpr std::chrono::milliseconds kTerminalInterval{200};
  static constexpr std::chrono::seconds kPlainInterval{5};
  static constexpr std::chrono::seconds kSparseInterval{30};
  // Phases shorter than this draw nothing in kTerminal and kSparse modes.
  static constexpr std::chrono::seconds kQuietBelow{1};

  // The clock the meter reads (injectable for tests).
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  struct Options {
    ProgressMode mode = ProgressMode::kOff;
    std::FILE* out = stderr;
    WidthFn width;         // nullptr: TerminalWidth(fileno(out)) in kTerminal mode
    bool ticking = false;  // redraw from a ticker thread while no update arrives
    // Shown after the label until the first Update(), with a spinner and the elapsed time
    // (e.g. "waiting for the registry to compute the patch").
    std::string waiting;
    // false: the counts are units of work, not bytes to show (e.g. Pack's copy-then-hash):
    // only the percentage and the ETA are shown.
    bool bytes = true;
    Clock clock;  // nullptr: steady_clock::now
  };

  ProgressMeter(std::string label, Options options);
  ProgressMeter(std::string label, ProgressMode mode, std::FILE* out = stderr);
  // Compatibility: enabled = kTerminal on a terminal, else kPlain; disabled = kOff.
  ProgressMeter(std::string label, bool enabled, std::FILE* out = stderr);
  ~ProgressMeter();
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  // (done, total; total 0 = unknown). Draws when the mode's interval has passed.
  void Update(uint64_t done, uint64_t total);
  // A callback that forwards to Update(); valid while the meter lives.
  ProgressFn Callback();
  // Changes the label (e.g. from "waiting for the registry" to "downloading").
  void SetLabel(std::string label);
  // Stops the ticker and prints the final line when the mode wants one. Idempotent.
  void Finish();

  // Draws if the mode's interval has passed since the last line (what the ticker calls).
  void Tick();

  ProgressMode mode() const { return mode_; }
  // Lines (or frames) written so far.
  int draws() const;

  // One line of at most `width` - 1 columns (width <= 0: 80): what would be drawn now.
  // Exposed for tests.
  std::string RenderLine(int width) const;

 private:
  std::string RenderLocked(int width, bool final_line) const;
  void DrawLocked(bool final_line);
  void MaybeDrawLocked();
  void TickerLoop();
  std::chrono::steady_clock::time_point Now() const;

  const ProgressMode mode_;
  std::FILE* const out_;
  WidthFn width_;
  Clock clock_;
  const std::string waiting_;
  const bool bytes_;
  const std::chrono::steady_clock::time_point start_;

  mutable std::mutex mu_;
  std::string label_;
  int draws_ = 0;
  std::chrono::steady_clock::time_point last_draw_;
  uint64_t done_ = 0;
  uint64_t total_ = 0;
  bool updated_ = false;  // any Update() seen
  bool drawn_ = false;
  bool finished_ = false;
  int frames_ = 0;  // spinner position

  std::condition_variable cv_;
  bool stop_ = false;
  std::thread ticker_;
};

// Options for a meter of a phase counted in units of work rather than bytes (percent, ETA).
ProgressMeter::Options WorkMeterOptions(ProgressMode mode);

// Options for a meter whose phase starts with a wait (for the registry's answer): until the first
// Update() it shows `waiting`, a spinner and the elapsed time, redrawn by a ticker thread.
ProgressMeter::Options WaitingMeterOptions(ProgressMode mode, std::string waiting);

}  // namespace blz::client

#endif  // BLZ_CLIENT_PROGRESS_H_
