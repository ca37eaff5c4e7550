// Tensor element types shared by every format blz reads (safetensors names; GGUF maps to these
// where it can). Names are the safetensors spellings ("F32", "BF16", ...).
#ifndef BLZ_FORMATS_DTYPE_H_
#define BLZ_FORMATS_DTYPE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace blz::formats {

enum class DType : uint8_t {
  kBool, kU8, kI8, kF8_E4M3, kF8_E5M2, kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32, kI64, kU64, kF64,
};

// Element size in bytes (1, 2, 4 or 8).
uint32_t DTypeSize(DType t);
// "F32", "BF16", ...
std::string_view DTypeName(DType t);
// Parses a safetensors dtype name. Sub-byte and unknown types give kUnsupported.
Result<DType> ParseDType(std::string_view name);
// True for the floating-point types (F8*, F16, BF16, F32, F64).
bool IsFloat(DType t);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_DTYPE_H_
