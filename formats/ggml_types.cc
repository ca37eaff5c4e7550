#include "formats/ggml_types.h"

#include <array>
#include <cctype>
#include <limits>

#include "core/checked.h"

namespace blz::formats {
namespace {

// Block sizes and bytes per block from ggml's block_* structs (QK_K = 256, QK4_0 = 32, ...).
constexpr std::array<GgmlTypeInfo, 32> kGgmlTypes = {{
    {GgmlType::kF32, "f32", 1, 4},
    {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kQ4_0, "q4_0", 32, 18},       // half d + 16 nibble bytes
    {GgmlType::kQ4_1, "q4_1", 32, 20},       // half d, m + 16
    {GgmlType::kQ5_0, "q5_0", 32, 22},       // half d + qh[4] + 16
    {GgmlType::kQ5_1, "q5_1", 32, 24},       // half d, m + qh[4] + 16
    {GgmlType::kQ8_0, "q8_0", 32, 34},       // half d + 32 int8
    {GgmlType::kQ8_1, "q8_1", 32, 36},       // half d, s + 32 int8
    {GgmlType::kQ2_K, "q2_K", 256, 84},      // scales[16] + qs[64] + half d, dmin
    {GgmlType::kQ3_K, "q3_K", 256, 110},     // hmask[32] + qs[64] + scales[12] + half d
    {GgmlType::kQ4_K, "q4_K", 256, 144},     // half d, dmin + scales[12] + qs[128]
    {GgmlType::kQ5_K, "q5_K", 256, 176},     // half d, dmin + scales[12] + qh[32] + qs[128]
    {GgmlType::kQ6_K, "q6_K", 256, 210},     // ql[128] + qh[64] + scales[16] + half d
    {GgmlType::kQ8_K, "q8_K", 256, 292},     // float d + qs[256] + int16 bsums[16]
    {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66},  // half d + u16 qs[32]
    {GgmlType::kIQ2_XS, "iq2_xs", 256, 74},    // half d + u16 qs[32] + scales[8]
    {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98},  // half d + qs[96]
    {GgmlType::kIQ1_S, "iq1_s", 256, 50},      // half d + qs[32] + u16 qh[8]
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},     // half d + qs[16]
    {GgmlType::kIQ3_S, "iq3_s", 256, 110},     // half d + qs[64] + qh[8] + signs[32] + scales[4]
    {GgmlType::kIQ2_S, "iq2_s", 256, 82},      // half d + qs[64] + qh[8] + scales[8]
    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},   // half d + u16 scales_h + scales_l[4] + qs[128]
    {GgmlType::kI8, "i8", 1, 1},
    {GgmlType::kI16, "i16", 1, 2},
    {GgmlType::kI32, "i32", 1, 4},
    {GgmlType::kI64, "i64", 1, 8},
    {GgmlType::kF64, "f64", 1, 8},
    {GgmlType::kIQ1_M, "iq1_m", 256, 56},      // qs[32] + qh[16] + scales[8]
    {GgmlType::kBF16, "bf16", 1, 2},
    {GgmlType::kTQ1_0, "tq1_0", 256, 54},      // qs[48] + qh[4] + half d
    {GgmlType::kTQ2_0, "tq2_0", 256, 66},      // qs[64] + half d
    {GgmlType::kMXFP4, "mxfp4", 32, 17},       // u8 e (E8M0) + qs[16]
}};

constexpr uint32_t kMaxId = 39;

// id -> index into kGgmlTypes, -1 for unknown / removed ids.
constexpr std::array<int8_t, kMaxId + 1> MakeIndex() {
  std::array<int8_t, kMaxId + 1> idx{};
  for (auto& i : idx) i = -1;
  for (size_t i = 0; i < kGgmlTypes.size(); ++i) {
    idx[static_cast<uint32_t>(kGgmlTypes[i].type)] = static_cast<int8_t>(i);
  }
  return idx;
}
constexpr std::array<int8_t, kMaxId + 1> kIndex = MakeIndex();

}  // namespace

std::span<const GgmlTypeInfo> AllGgmlTypes() { return kGgmlTypes; }

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  if (id > kMaxId || kIndex[id] < 0) return nullptr;
  return &kGgmlTypes[static_cast<size_t>(kIndex[id])];
}

const GgmlTypeInfo& GgmlTypeTraits(GgmlType t) {
  return *FindGgmlType(static_cast<uint32_t>(t));
}

std::string_view GgmlTypeName(GgmlType t) { return GgmlTypeTraits(t).name; }

std::string GgmlTypeLowerName(GgmlType t) {
  std::string s(GgmlTypeName(t));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool IsQuantized(GgmlType t) { return GgmlTypeTraits(t).block_size > 1; }

std::optional<DType> GgmlToDType(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    case GgmlType::kF64: return DType::kF64;
    case GgmlType::kI8: return DType::kI8;
    case GgmlType::kI16: return DType::kI16;
    case GgmlType::kI32: return DType::kI32;
    case GgmlType::kI64: return DType::kI64;
    default: return std::nullopt;
  }
}

Result<uint64_t> GgmlTensorBytes(GgmlType t, std::span<const uint64_t> dims) {
  constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (dims.size() > 4) {
    return Corruption(std::to_string(dims.size()) + " dimensions (ggml allows at most 4)");
  }
  const GgmlTypeInfo& info = GgmlTypeTraits(t);
  uint64_t elements = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) return Corruption("dimension " + std::to_string(i) + " is 0");
    if (dims[i] > kInt64Max) {
      return Corruption("dimension " + std::to_string(i) + " = " + std::to_string(dims[i]) +
                        " exceeds INT64_MAX");
    }
    if (!CheckedMul(elements, dims[i], &elements) || elements > kInt64Max) {
      return Corruption("element count overflows int64 at dimension " + std::to_string(i));
    }
  }
  const uint64_t ne0 = dims.empty() ? 1 : dims[0];
  if (ne0 % info.block_size != 0) {
    return Corruption("row length ne0 = " + std::to_string(ne0) + " is not a multiple of " +
                      std::string(info.name) + "'s block size " +
                      std::to_string(info.block_size));
  }
  uint64_t bytes = 0;
  if (!CheckedMul(elements / info.block_size, info.type_size, &bytes) || bytes > kInt64Max) {
    return Corruption("byte size overflows int64");
  }
  return bytes;
}

}  // namespace blz::formats
