// blz strategy "bitdelta" (BitDelta, arXiv 2402.10193, without scale distillation): for a
// weight matrix, one sign bit per element (1 when d >= 0, -0.0 included, as BitDelta's code
// does) and ONE float32 scale alpha = mean |d| over the whole tensor (summed in double in
// element order, rounded once to float32). Decode: acc[i] = acc[i] + (bit ? alpha : -alpha)
// in float32, i ascending. Bits are packed MSB-first, continuous over the tensor in C order
// (np.packbits, as the reference's "quantized"). Header meta, in this order:
// {"strategy":"bitdelta","shape":[...],"dtype":"float32"}; records "packed_signs" uint8
// [ceil(n/8)] (pad bits 0, ignored on read) and "scale" float32 [1]. docs/wdelta.md
// "blz strategies".
//
// Error. mean|d| is the scale that minimises ||d - alpha sign(d)||^2, and with it, exactly,
//   ||d - decode(d)||^2 = ||d||^2 - n alpha^2 = (1 - mean(|d|)^2 / mean(d^2)) ||d||^2.
// The ratio depends only on the shape of the value distribution: for i.i.d. Gaussian d it
// tends to 1 - 2/pi ~ 0.363 (BitDelta's figure), for uniform d to 1/4, and for Laplace d to
// 1 - 1/2 = 1/2: heavier tails than the Gaussian's do WORSE than 1 - 2/pi (see
// tests/patcher/lossy/bitdelta_test.cc).
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
// keeps them exact or sparse and says so), when d.size() is not the shape's element count,
// or when d holds NaN or +-Inf (the driver stores such a tensor exact).
Result<formats::WdeltaTensorOut> EncodeBitDelta(const std::string& name, std::span<const float> d,
                                                const std::vector<uint64_t>& shape);
// acc += decoded delta (payload.h). kCorruption naming tensor and field when the meta or a
// record does not match the layout above (or the scale is not finite); kInvalidArgument when
// acc.size() is not the tensor's element count. acc is untouched on error.
Status DecodeAddBitDelta(const TensorPayload& p, std::span<float> acc);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_BITDELTA_H_
