// Numeric conversions of tensor elements: IEEE half (F16) and bfloat16 (BF16) to and from
// binary32 (F32), ggml's Q8_0 and Q4_0 block formats (dequantization and ggml's reference
// quantizers), and a chunked decoder that reads any supported element type as float or double
// without materializing a whole tensor.
//
// Byte order: every encoded value (tensor bytes, the fp16 scale of a ggml block) is
// little-endian, as in safetensors and GGUF files; typed spans (uint16_t, float) are in host
// order. Tensor bytes may sit at any address (no alignment is assumed).
//
// Conversions (IEEE 754-2008, binary16 / bfloat16 as the upper half of binary32):
//   - F16 -> F32 and BF16 -> F32 are exact. NaN payloads and sign are copied (a signaling NaN
//     stays signaling in the F32 bit pattern); no floating-point unit or flag is involved.
//   - F32 -> F16 and F32 -> BF16 round to nearest, ties to even, and keep the sign (-0 -> -0).
//     Subnormal results are produced (never flushed to zero) and F32 subnormals are rounded like
//     any other value. A finite value that rounds beyond the largest finite value becomes
//     infinity (F16: |x| >= 65520 -> Inf; BF16: |x| >= 0x7F7F8000 as F32 bits -> Inf);
//     Inf -> Inf. NaN -> a quiet NaN with the same sign whose payload keeps the top bits of
//     the F32 payload (F16: sign | 0x7E00 | payload >> 13; BF16: sign | 0x7FC0 | payload >> 16).
//     Consequence: for every non-NaN bit pattern h, F32ToF16(F16ToF32(h)) == h (same for BF16);
//     quiet NaNs round-trip exactly, signaling NaNs come back quieted.
//
// ggml blocks (ggml-org/ggml d99724f, src/ggml-quants.c *_ref functions; 32 weights a block):
//   Q8_0  34 bytes: fp16 d (2 bytes LE), then 32 x int8 q.       value j = q[j] * d
//   Q4_0  18 bytes: fp16 d (2 bytes LE), then 16 bytes: element j (0..15) in the low nibble
//         and element j+16 in the high nibble of byte j; q unsigned 0..15. value = (q - 8) * d
// In both, d is converted to F32 first and the product is computed in F32, as ggml does.
#ifndef BLZ_FORMATS_FLOAT_CONVERT_H_
#define BLZ_FORMATS_FLOAT_CONVERT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/dtype.h"
#include "formats/ggml_types.h"

namespace blz::formats {

// --- Single values --------------------------------------------------------------------------

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float BF16ToF32(uint16_t b);
uint16_t F32ToBF16(float f);

// 8-bit floats as safetensors names them (the OCP / ml_dtypes "fn" and IEEE-like variants):
//   F8_E4M3 (float8_e4m3fn): bias 7, no infinities, S.1111.111 is NaN, max 448.
//   F8_E5M2: the upper byte of an F16 (bias 15, with Inf and NaN).
// Both decode exactly.
float F8E4M3ToF32(uint8_t v);
float F8E5M2ToF32(uint8_t v);

// --- Arrays ---------------------------------------------------------------------------------
// Element-wise versions of the above. Errors: kInvalidArgument when out.size() != in.size().

Status ConvertF16ToF32(std::span<const uint16_t> in, std::span<float> out);
Status ConvertF32ToF16(std::span<const float> in, std::span<uint16_t> out);
Status ConvertBF16ToF32(std::span<const uint16_t> in, std::span<float> out);
Status ConvertF32ToBF16(std::span<const float> in, std::span<uint16_t> out);

// --- ggml Q8_0 / Q4_0 -----------------------------------------------------------------------

inline constexpr size_t kGgmlBlockElements = 32;  // QK8_0 == QK4_0 == 32
inline constexpr size_t kQ8_0BlockBytes = 34;
inline constexpr size_t kQ4_0BlockBytes = 18;

// Dequantizes whole blocks: `in` holds n blocks (n * 34 or n * 18 bytes), `out` n * 32 floats.
// Errors: kInvalidArgument when in.size() is not a whole number of blocks or out.size() is
// not 32 floats per block.
Status DequantizeQ8_0(ByteSpan in, std::span<float> out);
Status DequantizeQ4_0(ByteSpan in, std::span<float> out);

// ggml's reference quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref, no importance
// matrix), bit-exact for finite input:
//   Q8_0: amax = max |x|; d = amax / 127; id = d != 0 ? 1/d : 0; q = roundf(x * id) (half away
//         from zero); d is stored as fp16 (RNE) while q used the F32 id.
//   Q4_0: max = the signed value of largest |x| (the first one on ties); d = max / -8;
//         id = d != 0 ? 1/d : 0; q = MIN(15, (int8_t)(x * id + 8.5f)); d stored as fp16.
// Where ggml's C is undefined (1/d overflows to Inf because d < ~2.9e-39: such a block's fp16 d
// is 0, so it dequantizes to zeros anyway) the code is clamped to the valid range (Q8_0:
// -127..127, Q4_0: 0..15).
// `in` holds n * 32 floats, `out` n * 34 (Q8_0) or n * 18 (Q4_0) bytes. Errors:
// kInvalidArgument for a size that is not whole blocks or mismatched buffers, and for a NaN or
// infinite input (ggml's result is undefined there); the message gives the element index.
Status QuantizeQ8_0(std::span<const float> in, MutableByteSpan out);
Status QuantizeQ4_0(std::span<const float> in, MutableByteSpan out);

// --- Decoding any supported tensor type -----------------------------------------------------

// Element encodings the decoder reads. Integers and Bool decode to their numeric value (I64 /
// U64 values beyond 2^53 (double) or 2^24 (float) are rounded to nearest); floats widen exactly
// to double; F64 narrows to float with RNE (overflow to +-Inf) only in the float decoder.
enum class ValueType : uint8_t {
  kF32, kF16, kBF16, kF64, kF8_E4M3, kF8_E5M2,
  kBool, kU8, kI8, kU16, kI16, kU32, kI32, kU64, kI64,
  kQ8_0, kQ4_0,
};

// "F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2", "BOOL", "U8", ..., "I64", "Q8_0", "Q4_0".
std::string_view ValueTypeName(ValueType t);
// The encoding of a safetensors dtype (every DType is supported).
ValueType ValueTypeOf(DType t);
// The encoding of a ggml type: F32, F16, BF16, F64, I8, I16, I32, I64, Q8_0, Q4_0; nullopt for
// the other (quantized) types.
std::optional<ValueType> ValueTypeOf(GgmlType t);
// Elements per block: 32 for Q8_0 / Q4_0, 1 otherwise.
uint32_t ValueTypeBlockElements(ValueType t);
// Bytes per block: 34 / 18 for Q8_0 / Q4_0, the element size otherwise.
uint32_t ValueTypeBlockBytes(ValueType t);
// Bytes that `elements` elements occupy. Errors: kInvalidArgument when `elements` is not a
// multiple of the block size; kTooLarge on overflow.
Result<uint64_t> ValueBytes(ValueType t, uint64_t elements);

// Decodes elements [first, first + out.size()) of a tensor whose bytes are `data` (the whole
// tensor, exactly ValueBytes(t, elements) long) into `out`. For Q8_0 / Q4_0, `first` must be a
// multiple of 32 (out.size() need not be). Errors (kInvalidArgument): bad data length, range
// past the end, misaligned block range.
Status DecodeElements(ValueType t, ByteSpan data, uint64_t elements, uint64_t first,
                      std::span<float> out);
Status DecodeElements(ValueType t, ByteSpan data, uint64_t elements, uint64_t first,
                      std::span<double> out);

// Default chunk length of the visitors: 64 Ki elements (a multiple of 32).
inline constexpr size_t kDecodeChunkElements = 64 * 1024;

// Called once per chunk, in order: `first` is the index of values[0] in the tensor. Returning a
// non-OK status stops the visit and is returned by the visitor function.
using FloatChunkVisitor = std::function<Status(uint64_t first, std::span<const float> values)>;
using DoubleChunkVisitor = std::function<Status(uint64_t first, std::span<const double> values)>;

// Decodes elements [begin, end) of the tensor in chunks of at most `chunk_elements` (rounded
// down to a multiple of 32, at least 32) and calls `visit` for each, reusing one buffer: memory
// is O(chunk_elements), whatever the tensor size. A whole tensor is begin = 0, end = elements.
// For Q8_0 / Q4_0, `begin` must be a multiple of 32. Errors: those of DecodeElements, then
// the visitor's.
Status VisitAsFloat(ValueType t, ByteSpan data, uint64_t elements, uint64_t begin, uint64_t end,
                    const FloatChunkVisitor& visit, size_t chunk_elements = kDecodeChunkElements);
Status VisitAsDouble(ValueType t, ByteSpan data, uint64_t elements, uint64_t begin,
                     uint64_t end, const DoubleChunkVisitor& visit,
                     size_t chunk_elements = kDecodeChunkElements);

// The whole tensor as floats (materializes elements * 4 bytes: for small tensors and tests;
// refuses more than `max_elements` with kTooLarge).
Result<std::vector<float>> DecodeToFloat(ValueType t, ByteSpan data, uint64_t elements,
                                         uint64_t max_elements = uint64_t{1} << 28);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_FLOAT_CONVERT_H_
