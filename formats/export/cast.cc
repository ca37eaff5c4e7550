#include "formats/export/cast.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/checked.h"

namespace blz::exporter {

using formats::GgmlType;
using formats::ValueType;

namespace {

struct CastInfo {
  CastType type;
  std::string_view name;
  ValueType value_type;
  GgmlType ggml_type;
};

constexpr std::array<CastInfo, 5> kCasts = {{
    {CastType::kF32, "f32", ValueType::kF32, GgmlType::kF32},
    {CastType::kF16, "f16", ValueType::kF16, GgmlType::kF16},
    {CastType::kBF16, "bf16", ValueType::kBF16, GgmlType::kBF16},
    {CastType::kQ8_0, "q8_0", ValueType::kQ8_0, GgmlType::kQ8_0},
    {CastType::kQ4_0, "q4_0", ValueType::kQ4_0, GgmlType::kQ4_0},
}};

const CastInfo& Info(CastType t) { return kCasts[static_cast<size_t>(t)]; }

void StoreLe16(uint16_t v, uint8_t* p) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

}  // namespace

std::string_view CastTypeName(CastType t) { return Info(t).name; }

Result<CastType> ParseCastType(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const CastInfo& c : kCasts) {
    if (lower == c.name) return c.type;
  }
  return InvalidArgument("unknown cast type '" + std::string(name) +
                         "' (known: f32, f16, bf16, q8_0, q4_0)");
}

ValueType ToValueType(CastType t) { return Info(t).value_type; }
GgmlType ToGgmlType(CastType t) { return Info(t).ggml_type; }

std::optional<CastType> CastTypeOf(ValueType t) {
  for (const CastInfo& c : kCasts) {
    if (c.value_type == t) return c.type;
  }
  return std::nullopt;
}

bool IsBlockQuantized(CastType t) { return t == CastType::kQ8_0 || t == CastType::kQ4_0; }
bool IsLossy(CastType t) { return t != CastType::kF32; }

Result<uint64_t> CastBytes(CastType t, uint64_t elements) {
  return formats::ValueBytes(ToValueType(t), elements);
}

void CastError::Merge(const CastError& other) {
  max_abs = std::max(max_abs, other.max_abs);
  sum_sq_err += other.sum_sq_err;
  sum_sq_ref += other.sum_sq_ref;
  elements += other.elements;
}

double CastError::RelativeL2() const {
  if (sum_sq_err == 0) return 0;
  if (sum_sq_ref == 0) return INFINITY;
  return std::sqrt(sum_sq_err / sum_sq_ref);
}

Status CastFloats(std::span<const float> in, CastType t, MutableByteSpan out, CastError* error) {
  BLZ_ASSIGN_OR_RETURN(uint64_t need, CastBytes(t, in.size()));
  if (out.size() != need) {
    return InvalidArgument("cast to " + std::string(CastTypeName(t)) + ": output is " +
                           std::to_string(out.size()) + " bytes, " + std::to_string(need) +
                           " needed");
  }
  switch (t) {
    case CastType::kF32:
      if (!in.empty()) std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
      break;
    case CastType::kF16:
      for (size_t i = 0; i < in.size(); ++i) StoreLe16(formats::F32ToF16(in[i]), &out[2 * i]);
      break;
    case CastType::kBF16:
      for (size_t i = 0; i < in.size(); ++i) StoreLe16(formats::F32ToBF16(in[i]), &out[2 * i]);
      break;
    case CastType::kQ8_0:
      BLZ_RETURN_IF_ERROR(formats::QuantizeQ8_0(in, out));
      break;
    case CastType::kQ4_0:
      BLZ_RETURN_IF_ERROR(formats::QuantizeQ4_0(in, out));
      break;
  }
  if (error == nullptr || t == CastType::kF32) return Status::Ok();
  // Decode what was written and compare, in blocks of 4 Ki values (bounded scratch).
  constexpr size_t kStep = 4096;
  std::vector<float> back(std::min(in.size(), kStep));
  for (size_t first = 0; first < in.size(); first += kStep) {
    size_t n = std::min(kStep, in.size() - first);
    BLZ_RETURN_IF_ERROR(formats::DecodeElements(ToValueType(t), ByteSpan(out.data(), out.size()),
                                                in.size(), first,
                                                std::span<float>(back.data(), n)));
    for (size_t i = 0; i < n; ++i) {
      double x = in[first + i];
      if (!std::isfinite(x)) continue;
      double d = double(back[i]) - x;
      error->max_abs = std::max(error->max_abs, std::fabs(d));
      error->sum_sq_err += d * d;
      error->sum_sq_ref += x * x;
      ++error->elements;
    }
  }
  return Status::Ok();
}

}  // namespace blz::exporter
