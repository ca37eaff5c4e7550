// Validation helpers for the decoders of patcher/lossy/ (bitdelta, lowrank): read a tensor's
// meta and records defensively, with errors naming the tensor and the field. Every check
// happens before anything is allocated or decoded.
#ifndef BLZ_PATCHER_LOSSY_PAYLOAD_CHECK_H_
#define BLZ_PATCHER_LOSSY_PAYLOAD_CHECK_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy {

// Product of `shape` (1 for rank 0), kInvalidArgument on overflow.
Result<uint64_t> ShapeElements(const std::vector<uint64_t>& shape);

// The meta's "strategy" must be `strategy` (kCorruption otherwise, or if meta is null).
Status CheckPayloadStrategy(const TensorPayload& p, std::string_view strategy);

// The meta's "shape": an array of unsigned integers whose product fits 64 bits
// (kCorruption otherwise).
Result<std::vector<uint64_t>> PayloadShape(const TensorPayload& p);
// PayloadShape for a matrix strategy (bitdelta, lowrank): the rank must be >= 2 as well.
Result<std::vector<uint64_t>> PayloadMatrixShape(const TensorPayload& p,
                                                 std::string_view strategy);

// An unsigned integer meta key (kCorruption when absent or of another type).
Result<uint64_t> PayloadUint(const TensorPayload& p, std::string_view key);
// A string meta key (kCorruption when absent or of another type).
Result<std::string> PayloadString(const TensorPayload& p, std::string_view key);

// The record of `field`, which must exist and have exactly `dtype` and `shape`, and
// product(shape) x itemsize(dtype) bytes (kCorruption naming tensor and field otherwise).
Result<formats::WdeltaArrayView> PayloadField(const TensorPayload& p, std::string_view field,
                                              std::string_view dtype,
                                              const std::vector<uint64_t>& shape);

// kInvalidArgument unless acc holds exactly `n` values.
Status CheckAccSize(const TensorPayload& p, size_t acc_size, uint64_t n);

// Copies little-endian float32 record bytes (any alignment) into `out` (resized).
void LoadFloats(ByteSpan bytes, std::vector<float>* out);
// Appends `values` as little-endian float32 bytes.
void AppendFloats(std::span<const float> values, std::vector<uint8_t>* out);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_PAYLOAD_CHECK_H_
