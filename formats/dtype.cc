#include "formats/dtype.h"

#include <array>

namespace blz::formats {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  uint32_t size;
  bool is_float;
};

constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {DType::kBool, "BOOL", 1, false},     {DType::kU8, "U8", 1, false},
    {DType::kI8, "I8", 1, false},         {DType::kF8_E4M3, "F8_E4M3", 1, true},
    {DType::kF8_E5M2, "F8_E5M2", 1, true}, {DType::kI16, "I16", 2, false},
    {DType::kU16, "U16", 2, false},       {DType::kF16, "F16", 2, true},
    {DType::kBF16, "BF16", 2, true},      {DType::kI32, "I32", 4, false},
    {DType::kU32, "U32", 4, false},       {DType::kF32, "F32", 4, true},
    {DType::kI64, "I64", 8, false},       {DType::kU64, "U64", 8, false},
    {DType::kF64, "F64", 8, true},
}};

const DTypeInfo& Info(DType t) { return kDTypes[static_cast<size_t>(t)]; }

}  // namespace

uint32_t DTypeSize(DType t) { return Info(t).size; }
std::string_view DTypeName(DType t) { return Info(t).name; }
bool IsFloat(DType t) { return Info(t).is_float; }

Result<DType> ParseDType(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.type;
  }
  return Unsupported("unknown or unsupported dtype '" + std::string(name.substr(0, 64)) + "'");
}

}  // namespace blz::formats
