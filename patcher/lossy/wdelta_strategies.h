// The three strategies of the reference (deltatensors): sparse, quantized, int4 (+ outliers),
// in format versions 1 and 2. Encoding follows the reference's compress_* functions; decoding
// reproduces its decompress_add_ bit for bit (same float32 operations in the same order).
// Exact arithmetic, field dtypes and shapes: docs/wdelta.md. Input contract: payload.h.
#ifndef BLZ_PATCHER_LOSSY_WDELTA_STRATEGIES_H_
#define BLZ_PATCHER_LOSSY_WDELTA_STRATEGIES_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy {

// Every encoder: kInvalidArgument when d.size() != product(shape), when the tensor has no
// elements, or when a delta value is NaN or infinite (the reference would write garbage; the
// driver stores such tensors exact). Meta keys, in order, and fields: docs/wdelta.md.

// sparse: keep k = max(1, int(n * (1 - sparsity))) largest |d| (ties: lower index first, a
// deterministic choice among the reference's arbitrary ones); fields indices (int64, sorted)
// and values (float32). kInvalidArgument unless 0 <= sparsity < 1.
// Meta: strategy, shape, dtype ("float32"), sparsity.
Result<formats::WdeltaTensorOut> EncodeSparse(const std::string& name, std::span<const float> d,
                                              const std::vector<uint64_t>& shape,
                                              double sparsity);

// quantized: per row (rows = shape[0], a 1-D tensor is one row) sign bits (1 when d >= 0),
// MSB-first packed across rows, and fp16 scale = mean |row| (numpy's float32 mean: pairwise
// sums in chunks of 8192, see detail::NumpyMeanF32). Meta: strategy, shape, dtype, n_elements,
// n_cols; fields scales (float16 [rows]), packed_signs (uint8 [ceil(n/8)]).
Result<formats::WdeltaTensorOut> EncodeQuantized(const std::string& name,
                                                 std::span<const float> d,
                                                 const std::vector<uint64_t>& shape);

// int4 + outliers: count = min(n, max(1, int(n * outlier_fraction))) outliers (ties: lower
// index first) in fp16, one (scale, zero point) pair per tensor, nibbles high = even element.
// `version` 1 or 2 picks the layout: 1 as deltatensors 0.2 (only non-outliers packed,
// quantized against the unrounded float range, outlier_idx int64), 2 as 0.3 (all n packed,
// quantized against the stored fp16 scale / zero point, "int4_layout": 2, outlier_idx int32
// when n < 2^31). kInvalidArgument unless 0 <= outlier_fraction <= 1.
// Meta: strategy, shape, dtype, outlier_fraction, n_elements, n_outliers[, int4_layout];
// fields outlier_idx, outlier_vals (float16), scale (float16 [1]), zero_point (float16 [1]),
// packed (uint8).
Result<formats::WdeltaTensorOut> EncodeInt4(const std::string& name, std::span<const float> d,
                                            const std::vector<uint64_t>& shape,
                                            double outlier_fraction, uint32_t version);

// acc += decoded delta (see payload.h). kCorruption naming tensor and field when a record's
// dtype or length does not match the meta, or an index is out of range or not strictly
// increasing (the reference writes them sorted and unique); kUnsupported for an int4_layout
// other than 1 or 2; kInvalidArgument when acc.size() is not the tensor's element count.
// Accepted record dtypes: indices int32/int64; values, scales, outlier_vals, scale,
// zero_point float16/float32 (widened exactly); packed fields uint8. The int4 layout is the
// tensor's "int4_layout" (absent: 1), whatever the file version.
Status DecodeAddSparse(const TensorPayload& p, std::span<float> acc);
Status DecodeAddQuantized(const TensorPayload& p, std::span<float> acc);
Status DecodeAddInt4(const TensorPayload& p, std::span<float> acc);

// Exposed for tests: the numpy-exact building blocks.
namespace detail {
// numpy's float32 pairwise sum (n < 8: loop; <= 128: 8 accumulators; else split).
float PairwiseSumF32(const float* a, size_t n);
// np.mean of a contiguous float32 row (numpy 1.x..2.2: pairwise sums of 8192-element chunks).
float NumpyMeanF32(const float* a, size_t n);
// np.float16(python_float): binary64 -> binary16, one rounding, nearest even.
uint16_t DoubleToF16(double x);
// q / 15 * (scale * 15) + zero_point in float32 for q = 0..15.
std::array<float, 16> Int4Lut(float scale, float zero_point);
}  // namespace detail

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_WDELTA_STRATEGIES_H_
