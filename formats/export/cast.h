// Element casts of an export: a run of float values (decoded from any tensor type blz reads,
// formats/float_convert.h) encoded as F32, F16, BF16, Q8_0 or Q4_0 bytes, with the cast error
// measured against the input.
//
// Bit-exactness (checked byte for byte against ../shared/golden/ggml-casts in tests):
//   F16  ggml_fp32_to_fp16_row / numpy astype(float16): round to nearest even;
//   BF16 ggml_fp32_to_bf16_row_ref / gguf-py: round to nearest even, NaN kept quiet with sign;
//   Q8_0 quantize_row_q8_0_ref, Q4_0 quantize_row_q4_0_ref (32-element blocks, fp16 scale).
// The rules are in formats/float_convert.h, which implements them.
//
// Byte order: the encoded bytes are little-endian (as GGUF and safetensors store them).
#ifndef BLZ_FORMATS_EXPORT_CAST_H_
#define BLZ_FORMATS_EXPORT_CAST_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/float_convert.h"
#include "formats/ggml_types.h"

namespace blz::exporter {

// The element types an export can write a floating-point tensor as.
enum class CastType : uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_0 };

// "f32", "f16", "bf16", "q8_0", "q4_0" (the spelling of --cast and of llama.cpp's --outtype).
std::string_view CastTypeName(CastType t);
// Parses a --cast value (case-insensitive). Error kInvalidArgument naming the known values.
Result<CastType> ParseCastType(std::string_view name);
// The decoder's element type for `t` (formats/float_convert.h).
formats::ValueType ToValueType(CastType t);
// The ggml tensor type for `t` (GGUF tensor info `type`).
formats::GgmlType ToGgmlType(CastType t);
// The cast type a tensor of element type `t` already has, nullopt for the others (integers,
// F64, F8).
std::optional<CastType> CastTypeOf(formats::ValueType t);
// True for the block-quantized types (Q8_0, Q4_0): rows must be a multiple of 32 elements.
bool IsBlockQuantized(CastType t);
// Bytes that `elements` values of type `t` take. Errors: kInvalidArgument when `elements` is not
// a multiple of 32 for a block-quantized type; kTooLarge on overflow.
Result<uint64_t> CastBytes(CastType t, uint64_t elements);
// True when a cast to `t` cannot reproduce every input exactly (F16, BF16, Q8_0, Q4_0).
bool IsLossy(CastType t);

// The error of a lossy cast, accumulated over chunks (in double): the largest |y - x|, and
// the relative L2 error sqrt(sum (y - x)^2 / sum x^2) where x is the input value and y the value
// the output decodes to. Non-finite inputs are not counted (F16/BF16 keep them; the quantized
// casts refuse them).
struct CastError {
  double max_abs = 0;
  double sum_sq_err = 0;
  double sum_sq_ref = 0;
  uint64_t elements = 0;  // values counted

  void Merge(const CastError& other);
  // 0 when both sums are 0; +Inf when only the reference sum is 0.
  double RelativeL2() const;
};

// Encodes `in` as type `t` into `out`, which must be exactly CastBytes(t, in.size()) long.
// When `error` is not null the output is decoded back and the error is added to it.
// Errors: kInvalidArgument (sizes; for Q8_0 / Q4_0 a NaN or infinite input, naming its index
// in `in`: ggml's result is undefined there).
Status CastFloats(std::span<const float> in, CastType t, MutableByteSpan out,
                  CastError* error = nullptr);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_CAST_H_
