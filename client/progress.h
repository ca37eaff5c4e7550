// Transfer progress on a terminal: "pulling model.blz  12.3 MiB / 45.6 MiB  27%  8.1 MiB/s".
// Nothing is printed for transfers that finish within a second, or when disabled (the CLI
// enables it when stderr is a terminal or --progress is given).
#ifndef BLZ_CLIENT_PROGRESS_H_
#define BLZ_CLIENT_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "client/http_client.h"

namespace blz::client {

// "0 B", "1023 B", "1.5 KiB", "12.3 MiB", "2.00 GiB".
std::string FormatBytes(uint64_t bytes);

class ProgressMeter {
 public:
  ProgressMeter(std::string label, bool enabled, std::FILE* out = stderr);
  ~ProgressMeter();
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  // (bytes done, bytes total; 0 = unknown). Redraws at most 5 times a second.
  void Update(uint64_t done, uint64_t total);
  // A callback that forwards to Update(); valid while the meter lives.
  ProgressFn Callback();
  // Ends the line if anything was drawn. Idempotent.
  void Finish();

 private:
  void Draw(bool final_line);

  std::string label_;
  bool enabled_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  uint64_t done_ = 0;
  uint64_t total_ = 0;
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace blz::client

#endif  // BLZ_CLIENT_PROGRESS_H_
