#include "formats/float_convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/checked.h"

namespace blz::formats {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

uint16_t LoadLE16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
void StoreLE16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

// Shifts `mant` right by `shift` (1..31) rounding to nearest, ties to even.
uint32_t ShiftRightRne(uint32_t mant, uint32_t shift) {
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  return (rem > half || (rem == half && (q & 1) != 0)) ? q + 1 : q;
}

Status SizeMismatch(const char* what, size_t in, size_t out) {
  return InvalidArgument(std::string(what) + ": input has " + std::to_string(in) +
                         " elements but output has " + std::to_string(out));
}

}  // namespace

// --- Single values --------------------------------------------------------------------------

float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return FromBits(sign | 0x7F800000 | mant << 13);  // Inf, NaN (payload kept)
  if (exp != 0) return FromBits(sign | (exp + 112) << 23 | mant << 13);
  if (mant == 0) return FromBits(sign);  // +-0
  // Subnormal: mant * 2^-24. Normalize: shift until the implicit bit (bit 10) is set.
  uint32_t e = 113;  // F32 biased exponent of 2^-14
  while ((mant & 0x400) == 0) {
    mant <<= 1;
    --e;
  }
  return FromBits(sign | e << 23 | (mant & 0x3FF) << 13);
}

uint16_t F32ToF16(float f) {
  const uint32_t x = Bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return uint16_t(sign | 0x7E00 | ((a >> 13) & 0x3FF));  // NaN -> quiet
  // 65520 (0x477FF000) is halfway between 65504 (max finite, odd mantissa) and 2^16: ties to
  // even round it up, so it and everything above (incl. Inf) become Inf.
  if (a >= 0x477FF000) return uint16_t(sign | 0x7C00);
  if (a < 0x38800000) {  // |f| < 2^-14: an F16 subnormal (or zero) after rounding
    const uint32_t e = a >> 23;
    if (e < 102) return sign;  // |f| < 2^-25: rounds to zero (2^-25 itself ties to even: 0)
    const uint32_t mant = (a & 0x7FFFFF) | 0x800000;
    // value = mant * 2^(e - 150); in units of 2^-24: mant * 2^(e - 126), a right shift.
    return uint16_t(sign | ShiftRightRne(mant, 126 - e));  // 0x400 becomes the smallest normal
  }
  // Normal: rebias the exponent, round the mantissa (a carry into the exponent is correct).
  const uint32_t h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3FF);
  const uint32_t rem = a & 0x1FFF;
  const uint32_t r = (rem > 0x1000 || (rem == 0x1000 && (h & 1) != 0)) ? h + 1 : h;
  return uint16_t(sign | r);
}

float BF16ToF32(uint16_t b) { return FromBits(uint32_t(b) << 16); }

uint16_t F32ToBF16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return uint16_t((x >> 16) | 0x0040);  // NaN -> quiet
  // Round to nearest even on the low 16 bits; a carry may reach the exponent (to Inf too).
  const uint32_t r = x + 0x7FFF + ((x >> 16) & 1);
  return uint16_t(r >> 16);
}

float F8E4M3ToF32(uint8_t v) {
  const bool neg = (v & 0x80) != 0;
  const uint32_t exp = (v >> 3) & 0xF;
  const uint32_t mant = v & 0x7;
  float r;
  if (exp == 0xF && mant == 0x7) {
    r = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    r = std::ldexp(float(mant), -9);  // mant/8 * 2^(1-7)
  } else {
    r = std::ldexp(float(8 + mant), int(exp) - 10);  // (1 + mant/8) * 2^(exp-7)
  }
  return neg ? -r : r;
}

float F8E5M2ToF32(uint8_t v) { return F16ToF32(uint16_t(uint16_t(v) << 8)); }

// --- Arrays ---------------------------------------------------------------------------------

Status ConvertF16ToF32(std::span<const uint16_t> in, std::span<float> out) {
  if (in.size() != out.size()) return SizeMismatch("F16 -> F32", in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = F16ToF32(in[i]);
  return Status::Ok();
}

Status ConvertF32ToF16(std::span<const float> in, std::span<uint16_t> out) {
  if (in.size() != out.size()) return SizeMismatch("F32 -> F16", in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = F32ToF16(in[i]);
  return Status::Ok();
}

Status ConvertBF16ToF32(std::span<const uint16_t> in, std::span<float> out) {
  if (in.size() != out.size()) return SizeMismatch("BF16 -> F32", in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = BF16ToF32(in[i]);
  return Status::Ok();
}

Status ConvertF32ToBF16(std::span<const float> in, std::span<uint16_t> out) {
  if (in.size() != out.size()) return SizeMismatch("F32 -> BF16", in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = F32ToBF16(in[i]);
  return Status::Ok();
}

// --- ggml Q8_0 / Q4_0 -----------------------------------------------------------------------

namespace {

Status CheckBlocks(const char* what, size_t in_bytes, size_t block_bytes, size_t out_elements) {
  if (in_bytes % block_bytes != 0) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(in_bytes) +
                           " bytes is not a whole number of " + std::to_string(block_bytes) +
                           "-byte blocks");
  }
  if (out_elements != in_bytes / block_bytes * kGgmlBlockElements) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(in_bytes / block_bytes) +
                           " blocks need " +
                           std::to_string(in_bytes / block_bytes * kGgmlBlockElements) +
                           " output elements, got " + std::to_string(out_elements));
  }
  return Status::Ok();
}

Status CheckQuantizeInput(const char* what, std::span<const float> in, size_t out_bytes,
                          size_t block_bytes) {
  if (in.size() % kGgmlBlockElements != 0) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(in.size()) +
                           " elements is not a multiple of 32");
  }
  if (out_bytes != in.size() / kGgmlBlockElements * block_bytes) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(in.size() / 32) +
                           " blocks need " +
                           std::to_string(in.size() / kGgmlBlockElements * block_bytes) +
                           " output bytes, got " + std::to_string(out_bytes));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (!std::isfinite(in[i])) {
      return InvalidArgument(std::string(what) + ": element " + std::to_string(i) + " is " +
                             (std::isnan(in[i]) ? "NaN" : "infinite") +
                             "; only finite values can be quantized");
    }
  }
  return Status::Ok();
}

// Decodes `n` elements of whole blocks starting at block `block` (n <= 32 for the last one).
template <typename T>
void DequantQ8_0Blocks(const uint8_t* p, uint64_t first_block, size_t n, T* out) {
  const uint8_t* b = p + first_block * kQ8_0BlockBytes;
  for (size_t i = 0; i < n; i += kGgmlBlockElements, b += kQ8_0BlockBytes) {
    const float d = F16ToF32(LoadLE16(b));
    const size_t m = std::min(kGgmlBlockElements, n - i);
    for (size_t j = 0; j < m; ++j) out[i + j] = T(float(int8_t(b[2 + j])) * d);
  }
}

template <typename T>
void DequantQ4_0Blocks(const uint8_t* p, uint64_t first_block, size_t n, T* out) {
  const uint8_t* b = p + first_block * kQ4_0BlockBytes;
  for (size_t i = 0; i < n; i += kGgmlBlockElements, b += kQ4_0BlockBytes) {
    const float d = F16ToF32(LoadLE16(b));
    const size_t m = std::min(kGgmlBlockElements, n - i);
    for (size_t j = 0; j < m; ++j) {
      const uint8_t byte = b[2 + (j & 15)];
      const int q = (j < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
      out[i + j] = T(float(q) * d);
    }
  }
}

}  // namespace

Status DequantizeQ8_0(ByteSpan in, std::span<float> out) {
  BLZ_RETURN_IF_ERROR(CheckBlocks("Q8_0 dequantize", in.size(), kQ8_0BlockBytes, out.size()));
  DequantQ8_0Blocks(in.data(), 0, out.size(), out.data());
  return Status::Ok();
}

Status DequantizeQ4_0(ByteSpan in, std::span<float> out) {
  BLZ_RETURN_IF_ERROR(CheckBlocks("Q4_0 dequantize", in.size(), kQ4_0BlockBytes, out.size()));
  DequantQ4_0Blocks(in.data(), 0, out.size(), out.data());
  return Status::Ok();
}

Status QuantizeQ8_0(std::span<const float> in, MutableByteSpan out) {
  BLZ_RETURN_IF_ERROR(CheckQuantizeInput("Q8_0 quantize", in, out.size(), kQ8_0BlockBytes));
  for (size_t blk = 0; blk < in.size() / kGgmlBlockElements; ++blk) {
    const float* x = in.data() + blk * kGgmlBlockElements;
    uint8_t* y = out.data() + blk * kQ8_0BlockBytes;
    float amax = 0.0f;
    for (size_t j = 0; j < kGgmlBlockElements; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreLE16(y, F32ToF16(d));
    for (size_t j = 0; j < kGgmlBlockElements; ++j) {
      const float q = std::roundf(x[j] * id);  // half away from zero, as C roundf
      // |q| <= 127 whenever id is finite; the clamp only matters when 1/d overflowed.
      const float c = std::isnan(q) ? 0.0f : std::clamp(q, -127.0f, 127.0f);
      y[2 + j] = uint8_t(int8_t(c));
    }
  }
  return Status::Ok();
}

Status QuantizeQ4_0(std::span<const float> in, MutableByteSpan out) {
  BLZ_RETURN_IF_ERROR(CheckQuantizeInput("Q4_0 quantize", in, out.size(), kQ4_0BlockBytes));
  for (size_t blk = 0; blk < in.size() / kGgmlBlockElements; ++blk) {
    const float* x = in.data() + blk * kGgmlBlockElements;
    uint8_t* y = out.data() + blk * kQ4_0BlockBytes;
    float amax = 0.0f;
    float max = 0.0f;
    for (size_t j = 0; j < kGgmlBlockElements; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreLE16(y, F32ToF16(d));
    auto code = [id](float v) -> uint8_t {
      const float t = v * id + 8.5f;
      // In ggml's defined range t is in [0, 16.5]: (int8_t) truncates, MIN caps at 15. The
      // clamp keeps an overflowed 1/d (Inf, NaN products) well defined.
      if (!(t >= 0.0f)) return 0;
      if (t >= 15.0f) return 15;
      return uint8_t(int8_t(t));
    };
    for (size_t j = 0; j < kGgmlBlockElements / 2; ++j) {
      y[2 + j] = uint8_t(code(x[j]) | code(x[j + kGgmlBlockElements / 2]) << 4);
    }
  }
  return Status::Ok();
}

// --- Decoding -------------------------------------------------------------------------------

std::string_view ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kF32: return "F32";
    case ValueType::kF16: return "F16";
    case ValueType::kBF16: return "BF16";
    case ValueType::kF64: return "F64";
    case ValueType::kF8_E4M3: return "F8_E4M3";
    case ValueType::kF8_E5M2: return "F8_E5M2";
    case ValueType::kBool: return "BOOL";
    case ValueType::kU8: return "U8";
    case ValueType::kI8: return "I8";
    case ValueType::kU16: return "U16";
    case ValueType::kI16: return "I16";
    case ValueType::kU32: return "U32";
    case ValueType::kI32: return "I32";
    case ValueType::kU64: return "U64";
    case ValueType::kI64: return "I64";
    case ValueType::kQ8_0: return "Q8_0";
    case ValueType::kQ4_0: return "Q4_0";
  }
  return "unknown";
}

ValueType ValueTypeOf(DType t) {
  switch (t) {
    case DType::kBool: return ValueType::kBool;
    case DType::kU8: return ValueType::kU8;
    case DType::kI8: return ValueType::kI8;
    case DType::kF8_E4M3: return ValueType::kF8_E4M3;
    case DType::kF8_E5M2: return ValueType::kF8_E5M2;
    case DType::kI16: return ValueType::kI16;
    case DType::kU16: return ValueType::kU16;
    case DType::kF16: return ValueType::kF16;
    case DType::kBF16: return ValueType::kBF16;
    case DType::kI32: return ValueType::kI32;
    case DType::kU32: return ValueType::kU32;
    case DType::kF32: return ValueType::kF32;
    case DType::kI64: return ValueType::kI64;
    case DType::kU64: return ValueType::kU64;
    case DType::kF64: return ValueType::kF64;
  }
  return ValueType::kU8;
}

std::optional<ValueType> ValueTypeOf(GgmlType t) {
  if (t == GgmlType::kQ8_0) return ValueType::kQ8_0;
  if (t == GgmlType::kQ4_0) return ValueType::kQ4_0;
  const std::optional<DType> d = GgmlToDType(t);
  if (!d) return std::nullopt;
  return ValueTypeOf(*d);
}

uint32_t ValueTypeBlockElements(ValueType t) {
  return (t == ValueType::kQ8_0 || t == ValueType::kQ4_0) ? uint32_t{kGgmlBlockElements} : 1;
}

uint32_t ValueTypeBlockBytes(ValueType t) {
  switch (t) {
    case ValueType::kF8_E4M3:
    case ValueType::kF8_E5M2:
    case ValueType::kBool:
    case ValueType::kU8:
    case ValueType::kI8: return 1;
    case ValueType::kF16:
    case ValueType::kBF16:
    case ValueType::kU16:
    case ValueType::kI16: return 2;
    case ValueType::kF32:
    case ValueType::kU32:
    case ValueType::kI32: return 4;
    case ValueType::kF64:
    case ValueType::kU64:
    case ValueType::kI64: return 8;
    case ValueType::kQ8_0: return kQ8_0BlockBytes;
    case ValueType::kQ4_0: return kQ4_0BlockBytes;
  }
  return 1;
}

Result<uint64_t> ValueBytes(ValueType t, uint64_t elements) {
  const uint64_t per = ValueTypeBlockElements(t);
  if (elements % per != 0) {
    return InvalidArgument(std::string(ValueTypeName(t)) + ": " + std::to_string(elements) +
                           " elements is not a multiple of the block size " +
                           std::to_string(per));
  }
  uint64_t bytes = 0;
  if (!CheckedMul(elements / per, ValueTypeBlockBytes(t), &bytes)) {
    return TooLarge(std::string(ValueTypeName(t)) + ": byte size of " +
                    std::to_string(elements) + " elements overflows");
  }
  return bytes;
}

namespace {

template <typename T>
void DecodePlain(ValueType t, const uint8_t* p, size_t n, T* out) {
  switch (t) {
    case ValueType::kF32:
      for (size_t i = 0; i < n; ++i) out[i] = T(FromBits(LoadLE32(p + 4 * i)));
      return;
    case ValueType::kF16:
      for (size_t i = 0; i < n; ++i) out[i] = T(F16ToF32(LoadLE16(p + 2 * i)));
      return;
    case ValueType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = T(BF16ToF32(LoadLE16(p + 2 * i)));
      return;
    case ValueType::kF64:
      for (size_t i = 0; i < n; ++i) out[i] = T(std::bit_cast<double>(LoadLE64(p + 8 * i)));
      return;
    case ValueType::kF8_E4M3:
      for (size_t i = 0; i < n; ++i) out[i] = T(F8E4M3ToF32(p[i]));
      return;
    case ValueType::kF8_E5M2:
      for (size_t i = 0; i < n; ++i) out[i] = T(F8E5M2ToF32(p[i]));
      return;
    case ValueType::kBool:
    case ValueType::kU8:
      for (size_t i = 0; i < n; ++i) out[i] = T(p[i]);
      return;
    case ValueType::kI8:
      for (size_t i = 0; i < n; ++i) out[i] = T(int8_t(p[i]));
      return;
    case ValueType::kU16:
      for (size_t i = 0; i < n; ++i) out[i] = T(LoadLE16(p + 2 * i));
      return;
    case ValueType::kI16:
      for (size_t i = 0; i < n; ++i) out[i] = T(int16_t(LoadLE16(p + 2 * i)));
      return;
    case ValueType::kU32:
      for (size_t i = 0; i < n; ++i) out[i] = T(LoadLE32(p + 4 * i));
      return;
    case ValueType::kI32:
      for (size_t i = 0; i < n; ++i) out[i] = T(int32_t(LoadLE32(p + 4 * i)));
      return;
    case ValueType::kU64:
      for (size_t i = 0; i < n; ++i) out[i] = T(LoadLE64(p + 8 * i));
      return;
    case ValueType::kI64:
      for (size_t i = 0; i < n; ++i) out[i] = T(int64_t(LoadLE64(p + 8 * i)));
      return;
    case ValueType::kQ8_0:
    case ValueType::kQ4_0:
      return;  // handled by the caller
  }
}

template <typename T>
Status DecodeImpl(ValueType t, ByteSpan data, uint64_t elements, uint64_t first,
                  std::span<T> out) {
  BLZ_ASSIGN_OR_RETURN(const uint64_t bytes, ValueBytes(t, elements));
  if (data.size() != bytes) {
    return InvalidArgument(std::string(ValueTypeName(t)) + " tensor of " +
                           std::to_string(elements) + " elements needs " +
                           std::to_string(bytes) + " bytes, got " + std::to_string(data.size()));
  }
  uint64_t end = 0;
  if (!CheckedAdd(first, out.size(), &end) || end > elements) {
    return InvalidArgument("element range [" + std::to_string(first) + ", +" +
                           std::to_string(out.size()) + ") is past the end of a tensor of " +
                           std::to_string(elements) + " elements");
  }
  const uint32_t per = ValueTypeBlockElements(t);
  if (per > 1) {
    if (first % per != 0) {
      return InvalidArgument(std::string(ValueTypeName(t)) + ": decoding must start at a block "
                             "boundary (element " + std::to_string(first) + ")");
    }
    if (t == ValueType::kQ8_0) {
      DequantQ8_0Blocks(data.data(), first / per, out.size(), out.data());
    } else {
      DequantQ4_0Blocks(data.data(), first / per, out.size(), out.data());
    }
    return Status::Ok();
  }
  DecodePlain(t, data.data() + first * ValueTypeBlockBytes(t), out.size(), out.data());
  return Status::Ok();
}

template <typename T>
Status VisitImpl(ValueType t, ByteSpan data, uint64_t elements, uint64_t begin, uint64_t end,
                 const std::function<Status(uint64_t, std::span<const T>)>& visit,
                 size_t chunk_elements) {
  if (begin > end || end > elements) {
    return InvalidArgument("element range [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") is not inside a tensor of " +
                           std::to_string(elements) + " elements");
  }
  size_t chunk = chunk_elements / kGgmlBlockElements * kGgmlBlockElements;
  if (chunk == 0) chunk = kGgmlBlockElements;
  std::vector<T> buf(size_t(std::min<uint64_t>(chunk, end - begin)));
  for (uint64_t at = begin; at < end;) {
    const size_t n = size_t(std::min<uint64_t>(chunk, end - at));
    const std::span<T> out(buf.data(), n);
    BLZ_RETURN_IF_ERROR(DecodeImpl<T>(t, data, elements, at, out));
    BLZ_RETURN_IF_ERROR(visit(at, std::span<const T>(out)));
    at += n;
  }
  // An empty range still validates the tensor bytes.
  if (begin == end) BLZ_RETURN_IF_ERROR(DecodeImpl<T>(t, data, elements, begin, std::span<T>()));
  return Status::Ok();
}

}  // namespace

Status DecodeElements(ValueType t, ByteSpan data, uint64_t elements, uint64_t first,
                      std::span<float> out) {
  return DecodeImpl<float>(t, data, elements, first, out);
}

Status DecodeElements(ValueType t, ByteSpan data, uint64_t elements, uint64_t first,
                      std::span<double> out) {
  return DecodeImpl<double>(t, data, elements, first, out);
}

Status VisitAsFloat(ValueType t, ByteSpan data, uint64_t elements, uint64_t begin, uint64_t end,
                    const FloatChunkVisitor& visit, size_t chunk_elements) {
  return VisitImpl<float>(t, data, elements, begin, end, visit, chunk_elements);
}

Status VisitAsDouble(ValueType t, ByteSpan data, uint64_t elements, uint64_t begin,
                     uint64_t end, const DoubleChunkVisitor& visit, size_t chunk_elements) {
  return VisitImpl<double>(t, data, elements, begin, end, visit, chunk_elements);
}

Result<std::vector<float>> DecodeToFloat(ValueType t, ByteSpan data, uint64_t elements,
                                         uint64_t max_elements) {
  if (elements > max_elements) {
    return TooLarge(std::to_string(elements) + " elements exceed the cap of " +
                    std::to_string(max_elements) + " for decoding a whole tensor");
  }
  std::vector<float> out(static_cast<size_t>(elements));
  BLZ_RETURN_IF_ERROR(DecodeImpl<float>(t, data, elements, 0, std::span<float>(out)));
  return out;
}

}  // namespace blz::formats
