// The three strategies of the reference (deltatensors): sparse, quantized, int4 (+ outliers),
// in format versions 1 and 2. Encoding follows the reference's compress_* functions; decoding
// reproduces its decompress_add_ bit for bit (same float32 operations in the same order).
// Exact arithmetic, field dtypes and shapes: docs/wdelta.md. Input contract: payload.h.
#ifndef BLZ_PATCHER_LOSSY_WDELTA_STRATEGIES_H_
#define BLZ_PATCHER_LOSSY_WDELTA_STRATEGIES_H_

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy {

// sparse: keep k = max(1, int(n * (1 - sparsity))) largest |d| (ties: lower index first, a
// deterministic choice among the reference's arbitrary ones); fields indices (int64, sorted)
// and values (float32). kInvalidArgument unless 0 <= sparsity < 1.
Result<formats::WdeltaTensorOut> EncodeSparse(const std::string& name, std::span<const float> d,
                                              const std::vector<uint64_t>& shape,
                                              double sparsity);

// quantized: per row (rows = shape[0], a 1-D tensor is one row) sign bits (1 when d >= 0),
// MSB-first packed across rows, and fp16 scale = mean |row|.
Result<formats::WdeltaTensorOut> EncodeQuantized(const std::string& name,
                                                 std::span<const float> d,
                                                 const std::vector<uint64_t>& shape);

// int4 + outliers: count = max(1, int(n * outlier_fraction)) outliers in fp16, one (scale,
// zero point) pair per tensor, nibbles high = even element. `version` 1 or 2 picks the layout.
Result<formats::WdeltaTensorOut> EncodeInt4(const std::string& name, std::span<const float> d,
                                            const std::vector<uint64_t>& shape,
                                            double outlier_fraction, uint32_t version);

// acc += decoded delta (see payload.h). kCorruption naming tensor and field when a record's
// dtype, shape or length does not match the meta; kInvalidArgument when acc.size() is not
// the tensor's element count.
Status DecodeAddSparse(const TensorPayload& p, std::span<float> acc);
Status DecodeAddQuantized(const TensorPayload& p, std::span<float> acc);
Status DecodeAddInt4(const TensorPayload& p, std::span<float> acc);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_WDELTA_STRATEGIES_H_
