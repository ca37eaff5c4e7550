// The progress callback shared by the layers below client/ (formats, patcher): long operations
// take an optional ProgressCallback and call it with (units done, units total) as they go.
//
// Contract for implementers: calls come from the thread that called the operation, `done` never
// decreases, `total` is fixed for one operation (0 = unknown), and when the operation succeeds
// the last call has done == total. An empty callback costs nothing. The callback must not throw.
#ifndef BLZ_CORE_PROGRESS_FN_H_
#define BLZ_CORE_PROGRESS_FN_H_

#include <atomic>
#include <cstdint>
#include <functional>

namespace blz {

using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

// Progress read by ANOTHER thread while an operation runs on a thread pool (e.g. a registry
// request polling a background computation). The operation sets `total` (its units, e.g.
// elements to read; 0 = unknown) before it starts working and adds to `done` as units finish
// (from any of its threads); done ends at total on success. Relaxed atomics: a reader sees a
// recent value, nothing more.
struct ProgressCounters {
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> total{0};
};

}  // namespace blz

#endif  // BLZ_CORE_PROGRESS_FN_H_
