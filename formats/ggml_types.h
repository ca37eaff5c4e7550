// ggml tensor types as they appear in GGUF tensor infos: the numeric id, ggml's name, the block
// size (elements per block) and the bytes per block. Follows ggml's ggml.h / ggml.c type traits
// (ggml-org/ggml d99724f). Ids 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) and
// 36-38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed from ggml and are not accepted;
// neither is any id >= 40.
//
// A tensor's rows (dimension ne0, the first and fastest-varying GGUF dimension) must be a
// multiple of the block size; its byte size is (ne0 / block_size) * type_size * ne1 * ne2 * ne3.
#ifndef BLZ_FORMATS_GGML_TYPES_H_
#define BLZ_FORMATS_GGML_TYPES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "formats/dtype.h"

namespace blz::formats {

// The numeric values are ggml's on-disk type ids (GGUF tensor info `type`, u32 LE).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // ggml's spelling: "f32", "q4_K", "iq2_xxs", "mxfp4", ...
  uint32_t block_size;    // elements per block (1 for the plain types)
  uint32_t type_size;     // bytes per block
};

// Every accepted type, in id order (32 entries).
std::span<const GgmlTypeInfo> AllGgmlTypes();

// The traits of type id `id`, or nullptr if `id` is unknown or removed.
const GgmlTypeInfo* FindGgmlType(uint32_t id);

// REQUIRES: `t` is one of the enumerators.
const GgmlTypeInfo& GgmlTypeTraits(GgmlType t);

// ggml's name ("q4_K") and weight-inspect's dtype spelling (the same, lower-cased: "q4_k").
std::string_view GgmlTypeName(GgmlType t);
std::string GgmlTypeLowerName(GgmlType t);

// True for the block-quantized types (block_size > 1).
bool IsQuantized(GgmlType t);

// The safetensors dtype of the plain types (F32, F16, BF16, F64, I8, I16, I32, I64);
// nullopt for quantized types.
std::optional<DType> GgmlToDType(GgmlType t);

// Bytes of a contiguous tensor of type `t` with GGUF dims `dims` (ne0 first, at most 4; an empty
// list is a scalar). Errors (kCorruption): a dim of 0 or > INT64_MAX, more than 4 dims, an
// element count or byte size that overflows int64, or ne0 not a multiple of the block size.
// Messages name the offending dimension; callers add the tensor name and byte offset.
Result<uint64_t> GgmlTensorBytes(GgmlType t, std::span<const uint64_t> dims);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_GGML_TYPES_H_
