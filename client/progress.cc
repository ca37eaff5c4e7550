#include "client/progress.h"

#include <cinttypes>

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

ProgressMeter::ProgressMeter(std::string label, bool enabled, std::FILE* out)
    : label_(std::move(label)), enabled_(enabled), out_(out),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

ProgressMeter::~ProgressMeter() { Finish(); }

ProgressFn ProgressMeter::Callback() {
  return [this](uint64_t done, uint64_t total) { Update(done, total); };
}

void ProgressMeter::Update(uint64_t done, uint64_t total) {
  done_ = done;
  total_ = total;
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(1)) return;
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  Draw(false);
}

void ProgressMeter::Draw(bool final_line) {
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  uint64_t rate = secs > 0 ? uint64_t(double(done_) / secs) : 0;
  std::string line = label_ + "  " + FormatBytes(done_);
  if (total_ > 0) {
    line += " / " + FormatBytes(total_);
    char pct[16];
    std::snprintf(pct, sizeof pct, "  %3d%%", int(100.0 * double(done_) / double(total_)));
    line += pct;
  }
  line += "  " + FormatBytes(rate) + "/s";
  std::fprintf(out_, "\r%-78s", line.c_str());
  if (final_line) std::fputc('\n', out_);
  std::fflush(out_);
  drawn_ = true;
}

void ProgressMeter::Finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && drawn_) Draw(true);
}

}  // namespace blz::client
