#include "client/progress.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <memory>
#include <utility>
#include <vector>

#include "core/text.h"

namespace blz::client {

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string FormatDuration(uint64_t seconds) {
  constexpr uint64_t kMax = 99 * 3600 + 59 * 60 + 59;
  if (seconds > kMax) return "99:59:59+";
  char buf[32];
  const unsigned h = unsigned(seconds / 3600), m = unsigned(seconds / 60 % 60),
                 s = unsigned(seconds % 60);
  if (h > 0) {
    std::snprintf(buf, sizeof buf, "%u:%02u:%02u", h, m, s);
  } else {
    std::snprintf(buf, sizeof buf, "%u:%02u", m, s);
  }
  return buf;
}

Result<ProgressRequest> ParseProgressRequest(std::string_view text) {
  if (text == "auto") return ProgressRequest::kAuto;
  if (text == "terminal" || text == "always") return ProgressRequest::kTerminal;
  if (text == "plain") return ProgressRequest::kPlain;
  if (text == "off") return ProgressRequest::kOff;
  return InvalidArgument("--progress: '" + std::string(text) +
                         "' is not one of auto, terminal, plain, off");
}

ProgressMode ResolveProgressMode(ProgressRequest request, bool output_is_terminal) {
  switch (request) {
    case ProgressRequest::kOff:
      return ProgressMode::kOff;
    case ProgressRequest::kPlain:
      return ProgressMode::kPlain;
    case ProgressRequest::kTerminal:
      return output_is_terminal ? ProgressMode::kTerminal : ProgressMode::kPlain;
    case ProgressRequest::kAuto:
      break;
  }
  return output_is_terminal ? ProgressMode::kTerminal : ProgressMode::kSparse;
}

ProgressMode ResolveProgressMode(ProgressRequest request) {
  return ResolveProgressMode(request, ::isatty(STDERR_FILENO) == 1);
}

// ---------------------------------------------------------------------------------------------
// Terminal width.

namespace {

// Bumped by the SIGWINCH handler; lock-free, so safe to touch from a handler.
std::atomic<unsigned> g_winch_generation{0};
static_assert(std::atomic<unsigned>::is_always_lock_free);
struct sigaction g_previous_winch {};

void OnSigwinch(int sig, siginfo_t* info, void* context) {
  g_winch_generation.fetch_add(1, std::memory_order_relaxed);
  // Chain to a handler installed before ours (the previous action is set once, before ours).
  if (g_previous_winch.sa_flags & SA_SIGINFO) {
    if (g_previous_winch.sa_sigaction != nullptr) g_previous_winch.sa_sigaction(sig, info, context);
  } else if (g_previous_winch.sa_handler != SIG_DFL && g_previous_winch.sa_handler != SIG_IGN &&
             g_previous_winch.sa_handler != nullptr) {
    g_previous_winch.sa_handler(sig);
  }
}

void InstallSigwinchHandlerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigwinch;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGWINCH, &sa, &g_previous_winch);
  });
}

int ReadWidth(int fd) {
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return int(ws.ws_col);
  return 0;
}

}  // namespace

WidthFn TerminalWidth(int fd) {
  InstallSigwinchHandlerOnce();
  struct State {
    int fd;
    int width = 0;
    unsigned generation = 0;
    bool read = false;
  };
  auto state = std::make_shared<State>();
  state->fd = fd;
  // Called under the meter's mutex only.
  return [state]() {
    const unsigned g = g_winch_generation.load(std::memory_order_relaxed);
    if (!state->read || g != state->generation) {
      state->generation = g;
      state->width = ReadWidth(state->fd);
      state->read = true;
    }
    return state->width;
  };
}

// ---------------------------------------------------------------------------------------------
// The meter.

namespace {

constexpr int kDefaultWidth = 80;
constexpr const char kSpinner[] = "|/-\\";

ProgressMeter::Options ModeOptions(ProgressMode mode, std::FILE* out) {
  ProgressMeter::Options o;
  o.mode = mode;
  o.out = out;
  return o;
}

ProgressMode CompatMode(bool enabled, std::FILE* out) {
  if (!enabled) return ProgressMode::kOff;
  const int fd = out != nullptr ? ::fileno(out) : -1;
  return fd >= 0 && ::isatty(fd) == 1 ? ProgressMode::kTerminal : ProgressMode::kPlain;
}

// Joins the parts that fit in `budget` columns, dropping optional ones from the end first.
std::string Fit(const std::string& label, const std::vector<std::string>& parts, size_t budget) {
  // parts[0] is essential, the later ones are dropped first when space is short.
  std::vector<std::string> kept = parts;
  auto stats_len = [&] {
    size_t n = 0;
    for (const std::string& p : kept) n += 2 + p.size();
    return n;
  };
  constexpr size_t kMinLabel = 12;  // below this, stats go before the label shrinks more
  while (kept.size() > 1 && stats_len() + std::min(label.size(), kMinLabel) > budget) {
    kept.pop_back();
  }
  std::string stats;
  for (const std::string& p : kept) stats += "  " + p;
  std::string line;
  if (label.size() + stats.size() <= budget) {
    line = label + stats;
  } else if (stats.size() + 4 <= budget) {
    // Truncate the label first: keep its start, mark the cut.
    line = label.substr(0, budget - stats.size() - 3) + "..." + stats;
  } else {
    line = label + stats;
  }
  if (line.size() > budget) line.resize(budget);  // the last resort: a hard cut
  return line;
}

}  // namespace

ProgressMeter::ProgressMeter(std::string label, Options options)
    : mode_(options.mode),
      out_(options.out),
      width_(std::move(options.width)),
      clock_(std::move(options.clock)),
      waiting_(EscapeForTerminal(options.waiting)),
      bytes_(options.bytes),
      start_(Now()),
      label_(EscapeForTerminal(label)),
      last_draw_(start_) {
  if (mode_ == ProgressMode::kTerminal && !width_ && out_ != nullptr && ::fileno(out_) >= 0) {
    width_ = TerminalWidth(::fileno(out_));
  }
  if (options.ticking && mode_ != ProgressMode::kOff) {
    ticker_ = std::thread([this] { TickerLoop(); });
  }
}

ProgressMeter::ProgressMeter(std::string label, ProgressMode mode, std::FILE* out)
    : ProgressMeter(std::move(label), ModeOptions(mode, out)) {}

ProgressMeter::ProgressMeter(std::string label, bool enabled, std::FILE* out)
    : ProgressMeter(std::move(label), ModeOptions(CompatMode(enabled, out), out)) {}

ProgressMeter::~ProgressMeter() { Finish(); }

std::chrono::steady_clock::time_point ProgressMeter::Now() const {
  return clock_ ? clock_() : std::chrono::steady_clock::now();
}

ProgressFn ProgressMeter::Callback() {
  return [this](uint64_t done, uint64_t total) { Update(done, total); };
}

void ProgressMeter::SetLabel(std::string label) {
  std::lock_guard<std::mutex> lock(mu_);
  label_ = EscapeForTerminal(label);
}

int ProgressMeter::draws() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draws_;
}

void ProgressMeter::Update(uint64_t done, uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = done;
  total_ = total;
  updated_ = true;
  MaybeDrawLocked();
}

void ProgressMeter::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  MaybeDrawLocked();
}

void ProgressMeter::MaybeDrawLocked() {
  if (mode_ == ProgressMode::kOff || finished_) return;
  const auto now = Now();
  std::chrono::steady_clock::duration interval = kTerminalInterval;
  switch (mode_) {
    case ProgressMode::kTerminal:
      if (now - start_ < kQuietBelow) return;
      interval = kTerminalInterval;
      break;
    case ProgressMode::kPlain:
      interval = kPlainInterval;
      break;
    case ProgressMode::kSparse:
      interval = kSparseInterval;
      break;
    case ProgressMode::kOff:
      return;
  }
  // The first line of the line-per-update modes also waits one interval: short phases print
  // only their final line.
  const bool first_frame = mode_ == ProgressMode::kTerminal && !drawn_;
  if (!first_frame && now - last_draw_ < interval) return;
  last_draw_ = now;
  DrawLocked(false);
}

std::string ProgressMeter::RenderLine(int width) const {
  std::lock_guard<std::mutex> lock(mu_);
  return RenderLocked(width, false);
}

std::string ProgressMeter::RenderLocked(int width, bool final_line) const {
  if (width <= 0) width = kDefaultWidth;
  const size_t budget = size_t(width > 1 ? width - 1 : 1);
  const auto elapsed = Now() - start_;
  const double secs = std::chrono::duration<double>(elapsed).count();
  const uint64_t whole_secs = uint64_t(secs);
  std::vector<std::string> parts;
  if (!updated_ || (done_ == 0 && total_ == 0)) {
    // Nothing countable yet: what we wait for, a spinner and the time spent.
    std::string what = !waiting_.empty() && !updated_ ? waiting_ : std::string();
    if (final_line) {
      parts.push_back(what.empty() ? "done" : what);
      parts.push_back(FormatDuration(whole_secs));
    } else {
      std::string spin;
      if (mode_ == ProgressMode::kTerminal) spin = std::string(1, kSpinner[frames_ % 4]) + " ";
      parts.push_back(spin + FormatDuration(whole_secs));
      if (!what.empty()) parts.insert(parts.begin(), what);
    }
    return Fit(label_, parts, budget);
  }
  const uint64_t rate = secs > 0.05 ? uint64_t(double(done_) / secs) : 0;
  if (bytes_ || total_ == 0) {
    std::string amount = FormatBytes(done_);
    if (total_ > 0) amount += " / " + FormatBytes(total_);
    parts.push_back(amount);
  }
  if (total_ > 0) {
    char pct[16];
    const uint64_t p = done_ >= total_ ? 100 : uint64_t(100.0 * double(done_) / double(total_));
    std::snprintf(pct, sizeof pct, "%3" PRIu64 "%%", p);
    parts.push_back(pct);
  }
  if (rate > 0 && bytes_) parts.push_back(FormatBytes(rate) + "/s");
  if (final_line) {
    parts.push_back("in " + FormatDuration(whole_secs));
  } else if (total_ > 0 && rate > 0 && done_ < total_) {
    parts.push_back("ETA " + FormatDuration((total_ - done_ + rate - 1) / rate));
  }
  return Fit(label_, parts, budget);
}

void ProgressMeter::DrawLocked(bool final_line) {
  if (out_ == nullptr) return;
  if (mode_ == ProgressMode::kTerminal) {
    const int width = width_ ? width_() : 0;
    const std::string line = RenderLocked(width, final_line);
    // '\r', the line, then "erase to the end of the line" for what a longer frame left.
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
    if (final_line) std::fputc('\n', out_);
  } else {
    // No width limit is known for a log: the default line length keeps it readable.
    const int width = width_ ? width_() : 1 << 12;
    std::fprintf(out_, "%s\n", RenderLocked(width, final_line).c_str());
  }
  std::fflush(out_);
  drawn_ = true;
  ++frames_;
  ++draws_;
}

void ProgressMeter::TickerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; });
    if (stop_) break;
    MaybeDrawLocked();
  }
}

void ProgressMeter::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  // A phase that never started (no update, nothing drawn, over at once: e.g. a patch the
  // registry does not serve) leaves no line in any mode.
  if (!updated_ && !drawn_ && Now() - start_ < kQuietBelow) return;
  switch (mode_) {
    case ProgressMode::kOff:
      return;
    case ProgressMode::kPlain:
      DrawLocked(true);
      return;
    case ProgressMode::kTerminal:
    case ProgressMode::kSparse:
      if (drawn_ || Now() - start_ >= kQuietBelow) DrawLocked(true);
      return;
  }
}

ProgressMeter::Options WorkMeterOptions(ProgressMode mode) {
  ProgressMeter::Options o;
  o.mode = mode;
  o.bytes = false;
  return o;
}

ProgressMeter::Options WaitingMeterOptions(ProgressMode mode, std::string waiting) {
  ProgressMeter::Options o;
  o.mode = mode;
  o.ticking = true;
  o.waiting = std::move(waiting);
  return o;
}

}  // namespace blz::client
