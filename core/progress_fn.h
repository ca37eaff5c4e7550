// The progress callback shared by the layers below client/ (formats, patcher): long operations
// take an optional ProgressCallback and call it with (units done, units total) as they go.
//
// Contract for implementers: calls come from the thread that called the operation, `done` never
// decreases, `total` is fixed for one operation (0 = unknown), and when the operation succeeds
// the last call has done == total. An empty callback costs nothing. The callback must not throw.
#ifndef BLZ_CORE_PROGRESS_FN_H_
#define BLZ_CORE_PROGRESS_FN_H_

#include <cstdint>
#include <functional>

namespace blz {

using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

}  // namespace blz

#endif  // BLZ_CORE_PROGRESS_FN_H_
