#include "client/progress.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace blz::client {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

TEST(ProgressTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(12ull << 20), "12.0 MiB");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.00 GiB");
}

TEST(ProgressTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "0:00");
  EXPECT_EQ(FormatDuration(7), "0:07");
  EXPECT_EQ(FormatDuration(754), "12:34");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(99 * 3600 + 59 * 60 + 59), "99:59:59");
  EXPECT_EQ(FormatDuration(1ull << 40), "99:59:59+");
}

TEST(ProgressTest, ParseAndResolveModes) {
  EXPECT_EQ(*ParseProgressRequest("auto"), ProgressRequest::kAuto);
  EXPECT_EQ(*ParseProgressRequest("terminal"), ProgressRequest::kTerminal);
  EXPECT_EQ(*ParseProgressRequest("always"), ProgressRequest::kTerminal);
  EXPECT_EQ(*ParseProgressRequest("plain"), ProgressRequest::kPlain);
  EXPECT_EQ(*ParseProgressRequest("off"), ProgressRequest::kOff);
  Result<ProgressRequest> bad = ParseProgressRequest("fancy");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, terminal, plain, off"), std::string::npos);

  EXPECT_EQ(ResolveProgressMode(ProgressRequest::kAuto, true), ProgressMode::kTerminal);
  EXPECT_EQ(ResolveProgressMode(ProgressRequest::kAuto, false), ProgressMode::kSparse);
  // Never '\r' frames when the output is not a terminal.
  EXPECT_EQ(ResolveProgressMode(ProgressRequest::kTerminal, false), ProgressMode::kPlain);
  EXPECT_EQ(ResolveProgressMode(ProgressRequest::kTerminal, true), ProgressMode::kTerminal);
  EXPECT_EQ(ResolveProgressMode(ProgressRequest::kPlain, true), ProgressMode::kPlain);
  EXPECT_EQ(ResolveProgressMode(ProgressRequest::kOff, true), ProgressMode::kOff);
}

// A memory stream the meter writes to; text() is read after the meter is finished.
class MemOut {
 public:
  MemOut() { f_ = ::open_memstream(&buf_, &size_); }
  ~MemOut() {
    if (f_ != nullptr) std::fclose(f_);
    std::free(buf_);
  }
  std::FILE* file() { return f_; }
  std::string text() {
    std::fflush(f_);
    return std::string(buf_, size_);
  }

 private:
  char* buf_ = nullptr;
  size_t size_ = 0;
  std::FILE* f_ = nullptr;
};

// A clock the test moves by hand (atomic: a ticker thread reads it).
class FakeClock {
 public:
  ProgressMeter::Clock fn() {
    return [this] { return base_ + milliseconds(ms_.load()); };
  }
  void Advance(milliseconds d) { ms_ += d.count(); }

 private:
  const steady_clock::time_point base_ = steady_clock::now();
  std::atomic<int64_t> ms_{0};
};

// The frames of a terminal rendering: the text between '\r's, without the erase sequence.
std::vector<std::string> Frames(const std::string& out) {
  std::vector<std::string> frames;
  size_t pos = 0;
  while ((pos = out.find('\r', pos)) != std::string::npos) {
    size_t end = out.find_first_of("\r\n", pos + 1);
    std::string f = out.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
    const std::string erase = "\x1b[K";
    if (f.size() >= erase.size() && f.compare(f.size() - erase.size(), erase.size(), erase) == 0) {
      f.resize(f.size() - erase.size());
    }
    frames.push_back(f);
    pos = end == std::string::npos ? out.size() : end;
  }
  return frames;
}

std::vector<std::string> Lines(const std::string& out) {
  std::vector<std::string> lines;
  size_t start = 0, nl;
  while ((nl = out.find('\n', start)) != std::string::npos) {
    lines.push_back(out.substr(start, nl - start));
    start = nl + 1;
  }
  if (start < out.size()) lines.push_back(out.substr(start));
  return lines;
}

TEST(ProgressTest, DisabledMeterPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressMeter meter("pulling", /*enabled=*/false, f);
    meter.Callback()(10, 100);
    meter.Finish();
  }
  EXPECT_EQ(std::ftell(f), 0L);
  std::fclose(f);
}

TEST(ProgressTest, EnabledMeterOnAFileIsPlainNeverFrames) {
  // The old bool API on something that is not a terminal: lines, no '\r'.
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressMeter meter("pulling", /*enabled=*/true, f);
    EXPECT_EQ(meter.mode(), ProgressMode::kPlain);
    meter.Update(50, 100);
    meter.Finish();
  }
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text.push_back(char(c));
  std::fclose(f);
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find("pulling"), std::string::npos) << text;
}

ProgressMeter::Options TerminalOptions(MemOut* out, FakeClock* clock, WidthFn width) {
  ProgressMeter::Options o;
  o.mode = ProgressMode::kTerminal;
  o.out = out->file();
  o.width = std::move(width);
  o.clock = clock->fn();
  return o;
}

TEST(ProgressTest, TerminalFramesNeverExceedTheWidth) {
  for (int width : {10, 20, 30, 40, 60, 80, 200}) {
    MemOut out;
    FakeClock clock;
    {
      ProgressMeter meter("pulling org/a-rather-long-model-name:some-tag (patch)",
                          TerminalOptions(&out, &clock, [width] { return width; }));
      const uint64_t total = 862ull << 20;
      for (uint64_t done = 0; done <= total; done += total / 20) {
        clock.Advance(milliseconds(700));
        meter.Update(done, total);
      }
      meter.Finish();
    }
    const std::string text = out.text();
    std::vector<std::string> frames = Frames(text);
    ASSERT_GE(frames.size(), 10u) << "width " << width;
    for (const std::string& f : frames) {
      EXPECT_LE(f.size(), size_t(width - 1)) << "width " << width << ": '" << f << "'";
      EXPECT_EQ(f.find('\n'), std::string::npos);
    }
    EXPECT_EQ(text.back(), '\n') << "the final frame ends the line";
  }
}

TEST(ProgressTest, NarrowTerminalTruncatesTheLabelFirst) {
  MemOut out;
  FakeClock clock;
  const std::string label = "pulling org/a-rather-long-model-name:some-tag (patch)";
  ProgressMeter meter(label, TerminalOptions(&out, &clock, [] { return 50; }));
  clock.Advance(seconds(2));
  meter.Update(100ull << 20, 400ull << 20);
  const std::string line = meter.RenderLine(50);
  EXPECT_LE(line.size(), 49u) << line;
  // The numbers survive; the label is cut and marked.
  EXPECT_NE(line.find("100.0 MiB / 400.0 MiB"), std::string::npos) << line;
  EXPECT_NE(line.find("25%"), std::string::npos) << line;
  EXPECT_NE(line.find("..."), std::string::npos) << line;
  EXPECT_EQ(line.rfind("pulling org/", 0), 0u) << line;
  // Wide enough: the whole label, the rate and the ETA.
  const std::string wide = meter.RenderLine(200);
  EXPECT_EQ(wide.rfind(label, 0), 0u) << wide;
  EXPECT_NE(wide.find("MiB/s"), std::string::npos) << wide;
  EXPECT_NE(wide.find("ETA 0:06"), std::string::npos) << wide;  // 300 MiB at 50 MiB/s
  meter.Finish();
}

TEST(ProgressTest, RateAndEta) {
  MemOut out;
  FakeClock clock;
  ProgressMeter meter("downloading", TerminalOptions(&out, &clock, [] { return 120; }));
  clock.Advance(seconds(10));
  meter.Update(10ull << 20, 100ull << 20);  // 1 MiB/s, 90 MiB to go
  const std::string line = meter.RenderLine(120);
  EXPECT_NE(line.find("1.00 MiB/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 1:30"), std::string::npos) << line;
  EXPECT_NE(line.find(" 10%"), std::string::npos) << line;
  meter.Finish();
}

TEST(ProgressTest, ResizeIsFollowed) {
  MemOut out;
  FakeClock clock;
  std::atomic<int> width{100};
  {
    ProgressMeter meter("pulling org/model:v2",
                        TerminalOptions(&out, &clock, [&width] { return width.load(); }));
    clock.Advance(seconds(2));
    meter.Update(1 << 20, 8 << 20);
    width = 20;  // the terminal got narrower
    clock.Advance(seconds(1));
    meter.Update(2 << 20, 8 << 20);
    meter.Finish();
  }
  std::vector<std::string> frames = Frames(out.text());
  ASSERT_GE(frames.size(), 3u);
  EXPECT_GT(frames.front().size(), 19u) << frames.front();
  for (size_t i = 1; i < frames.size(); ++i) EXPECT_LE(frames[i].size(), 19u) << frames[i];
}

TEST(ProgressTest, TerminalStaysQuietForShortPhases) {
  MemOut out;
  FakeClock clock;
  {
    ProgressMeter meter("verifying", TerminalOptions(&out, &clock, [] { return 80; }));
    clock.Advance(milliseconds(300));
    meter.Update(5, 10);
    meter.Update(10, 10);
    meter.Finish();
  }
  EXPECT_EQ(out.text(), "");
}

ProgressMeter::Options PlainOptions(MemOut* out, FakeClock* clock, ProgressMode mode) {
  ProgressMeter::Options o;
  o.mode = mode;
  o.out = out->file();
  o.clock = clock->fn();
  return o;
}

TEST(ProgressTest, PlainModeWritesLinesNeverCarriageReturns) {
  MemOut out;
  FakeClock clock;
  {
    ProgressMeter meter("downloading", PlainOptions(&out, &clock, ProgressMode::kPlain));
    // 60 s of updates every 100 ms: at most one line per kPlainInterval (5 s), plus the final.
    for (int i = 1; i <= 600; ++i) {
      clock.Advance(milliseconds(100));
      meter.Update(uint64_t(i) << 20, 600ull << 20);
    }
    meter.Finish();
  }
  const std::string text = out.text();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  std::vector<std::string> lines = Lines(text);
  EXPECT_GE(lines.size(), 10u) << text;
  EXPECT_LE(lines.size(), 13u) << text;
  for (const std::string& l : lines) EXPECT_EQ(l.rfind("downloading  ", 0), 0u) << l;
  EXPECT_NE(lines.back().find("600.0 MiB / 600.0 MiB  100%"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("in 1:00"), std::string::npos) << lines.back();
}

TEST(ProgressTest, PlainModeReportsEvenShortPhasesOnce) {
  MemOut out;
  FakeClock clock;
  {
    ProgressMeter meter("applying patch", PlainOptions(&out, &clock, ProgressMode::kPlain));
    meter.Update(1, 2);
    meter.Update(2, 2);
  }  // the destructor finishes
  std::vector<std::string> lines = Lines(out.text());
  ASSERT_EQ(lines.size(), 1u) << out.text();
  EXPECT_EQ(lines[0].rfind("applying patch  2 B / 2 B  100%", 0), 0u) << lines[0];
}

TEST(ProgressTest, SparseModeReportsOnlyPhasesThatTookASecond) {
  MemOut out;
  FakeClock clock;
  {
    ProgressMeter quick("verifying", PlainOptions(&out, &clock, ProgressMode::kSparse));
    quick.Update(10, 10);
  }
  EXPECT_EQ(out.text(), "");
  {
    ProgressMeter slow("applying patch", PlainOptions(&out, &clock, ProgressMode::kSparse));
    for (int i = 1; i <= 40; ++i) {
      clock.Advance(milliseconds(100));
      slow.Update(uint64_t(i), 40);
    }
  }
  std::vector<std::string> lines = Lines(out.text());
  ASSERT_EQ(lines.size(), 1u) << out.text();
  EXPECT_EQ(out.text().find('\r'), std::string::npos);
  EXPECT_EQ(lines[0].rfind("applying patch  40 B / 40 B  100%", 0), 0u) << lines[0];
}

TEST(ProgressTest, LabelsAreEscapedForTheTerminal) {
  MemOut out;
  FakeClock clock;
  {
    ProgressMeter meter("packing evil\r\x1b[2Jdir", PlainOptions(&out, &clock, ProgressMode::kPlain));
    meter.Update(1, 1);
  }
  const std::string text = out.text();
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
}

TEST(ProgressTest, WaitingMeterShowsElapsedTimeUntilBytesMove) {
  MemOut out;
  FakeClock clock;
  ProgressMeter::Options o = PlainOptions(&out, &clock, ProgressMode::kPlain);
  o.waiting = "registry is computing the patch";
  {
    ProgressMeter meter("pulling org/m:v2 (patch)", o);
    clock.Advance(seconds(6));
    meter.Tick();  // what the ticker does
    clock.Advance(seconds(6));
    meter.Tick();
    meter.Update(1 << 20, 4 << 20);
    EXPECT_EQ(meter.RenderLine(200).find("registry is computing"), std::string::npos);
    meter.Update(4 << 20, 4 << 20);
  }
  std::vector<std::string> lines = Lines(out.text());
  ASSERT_EQ(lines.size(), 3u) << out.text();
  EXPECT_EQ(lines[0], "pulling org/m:v2 (patch)  registry is computing the patch  0:06");
  EXPECT_EQ(lines[1], "pulling org/m:v2 (patch)  registry is computing the patch  0:12");
  EXPECT_NE(lines[2].find("4.00 MiB / 4.00 MiB  100%"), std::string::npos) << lines[2];
}

TEST(ProgressTest, TerminalWaitingMeterSpins) {
  MemOut out;
  FakeClock clock;
  ProgressMeter::Options o = TerminalOptions(&out, &clock, [] { return 80; });
  o.waiting = "registry is computing the patch";
  ProgressMeter meter("pulling", o);
  clock.Advance(seconds(2));
  const std::string a = meter.RenderLine(80);
  meter.Tick();
  const std::string b = meter.RenderLine(80);
  EXPECT_NE(a, b) << "the spinner moves";
  EXPECT_NE(a.find("registry is computing the patch  | 0:02"), std::string::npos) << a;
  meter.Finish();
}

// The ticker thread draws by itself while nothing arrives, and Finish joins it (run it under
// TSan / ASan: the state it shares with Update is behind the meter's mutex).
TEST(ProgressTest, TickerDrawsWhileWaitingAndIsJoined) {
  MemOut out;
  FakeClock clock;
  ProgressMeter::Options o = PlainOptions(&out, &clock, ProgressMode::kPlain);
  o.ticking = true;
  o.waiting = "waiting";
  {
    ProgressMeter meter("pulling", o);
    clock.Advance(seconds(6));
    // Wait (bounded) for the ticker to notice; not a timing assertion.
    const auto deadline = steady_clock::now() + seconds(30);
    while (meter.draws() == 0 && steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    EXPECT_EQ(meter.draws(), 1);
    meter.Update(5, 10);  // concurrent with the ticker
    meter.Update(10, 10);
    meter.Finish();
    meter.Finish();  // idempotent
  }
  std::vector<std::string> lines = Lines(out.text());
  ASSERT_EQ(lines.size(), 2u) << out.text();
  EXPECT_EQ(lines[0], "pulling  waiting  0:06");
  EXPECT_NE(lines[1].find("10 B / 10 B  100%"), std::string::npos) << lines[1];
}

TEST(ProgressTest, APhaseThatNeverStartedLeavesNoLine) {
  MemOut out;
  FakeClock clock;
  ProgressMeter::Options o = PlainOptions(&out, &clock, ProgressMode::kPlain);
  o.waiting = "waiting for the registry";
  { ProgressMeter meter("pulling (full patch)", o); }  // e.g. a 404 at once
  EXPECT_EQ(out.text(), "");
  {
    ProgressMeter meter("pulling (full patch)", o);
    clock.Advance(seconds(2));  // a wait worth reporting, even without bytes
  }
  EXPECT_EQ(out.text(), "pulling (full patch)  waiting for the registry  0:02\n");
}

TEST(ProgressTest, WorkMeterShowsPercentAndEtaNotBytes) {
  MemOut out;
  FakeClock clock;
  ProgressMeter::Options o = WorkMeterOptions(ProgressMode::kPlain);
  o.out = out.file();
  o.clock = clock.fn();
  {
    ProgressMeter meter("packing m", o);
    clock.Advance(seconds(6));
    meter.Update(300, 1000);  // 50/s, 700 to go: 14 s
    meter.Update(1000, 1000);
  }
  std::vector<std::string> lines = Lines(out.text());
  ASSERT_EQ(lines.size(), 2u) << out.text();
  EXPECT_EQ(lines[0], "packing m   30%  ETA 0:14");
  EXPECT_EQ(lines[1], "packing m  100%  in 0:06");
}

// A meter that is never updated or ticked and finishes at once leaves nothing, however made.
TEST(ProgressTest, OffModePrintsNothingEvenWithATicker) {
  MemOut out;
  FakeClock clock;
  ProgressMeter::Options o = PlainOptions(&out, &clock, ProgressMode::kOff);
  o.ticking = true;
  {
    ProgressMeter meter("pulling", o);
    clock.Advance(seconds(100));
    meter.Tick();
    meter.Update(1, 2);
  }
  EXPECT_EQ(out.text(), "");
}

}  // namespace
}  // namespace blz::client
