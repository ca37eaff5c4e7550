// blz strategy "bitdelta" (BitDelta, arXiv 2402.10193, without scale distillation): for a
// weight matrix, one sign bit per element (1 when d >= 0) and ONE float32 scale
// alpha = mean |d| over the whole matrix. Decode: acc[i] += (bit ? alpha : -alpha).
// Packing, field names and arithmetic order: docs/wdelta.md "blz strategies".
// Expected error: E||d - decode(d)||^2 <= (1 - 2/pi) ||d||^2 for i.i.d. Laplace d.
#ifndef BLZ_PATCHER_LOSSY_BITDELTA_H_
#define BLZ_PATCHER_LOSSY_BITDELTA_H_

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy {

// kInvalidArgument for a tensor of rank < 2 (1-D tensors are never BitDelta'd: the driver
// keeps them exact or sparse and says so).
Result<formats::WdeltaTensorOut> EncodeBitDelta(const std::string& name, std::span<const float> d,
                                                const std::vector<uint64_t>& shape);
Status DecodeAddBitDelta(const TensorPayload& p, std::span<float> acc);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_BITDELTA_H_
