#include "patcher/lossy/bitdelta.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "patcher/lossy/payload_check.h"

namespace blz::lossy {

Result<formats::WdeltaTensorOut> EncodeBitDelta(const std::string& name, std::span<const float> d,
                                                const std::vector<uint64_t>& shape) {
  const std::string where = "bitdelta: tensor '" + name + "'";
  if (shape.size() < 2) {
    return InvalidArgument(where + ": rank " + std::to_string(shape.size()) +
                           " (bitdelta takes matrices; 1-D tensors stay exact or sparse)");
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t n, ShapeElements(shape));
  if (n != d.size()) {
    return InvalidArgument(where + ": " + std::to_string(d.size()) +
                           " delta values for a shape of " + std::to_string(n) + " elements");
  }
  // One pass: sign bits MSB-first (element i -> byte i/8, bit 7 - i%8, as np.packbits) and
  // sum |d| in double, in ascending element order.
  std::vector<uint8_t> packed((n + 7) / 8, 0);
  double sum_abs = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const float v = d[i];
    if (!std::isfinite(v)) {
      return InvalidArgument(where + ": delta element " + std::to_string(i) +
                             " is not finite");
    }
    if (v >= 0.0f) packed[i >> 3] |= uint8_t(0x80u >> (i & 7));  // -0.0 >= 0 too
    sum_abs += std::fabs(double(v));
  }
  // alpha = mean |d|: the L2-optimal single scale for sign(d) (see bitdelta.h), rounded
  // once to the nearest float32. An empty matrix has alpha 0.
  const float alpha = n == 0 ? 0.0f : float(sum_abs / double(n));

  formats::WdeltaTensorOut out;
  out.name = name;
  out.meta = nlohmann::ordered_json::object();
  out.meta["strategy"] = "bitdelta";
  out.meta["shape"] = shape;
  out.meta["dtype"] = "float32";
  formats::WdeltaArray signs{"uint8", {uint64_t(packed.size())}, std::move(packed)};
  formats::WdeltaArray scale{"float32", {1}, {}};
  AppendFloats(std::span<const float>(&alpha, 1), &scale.bytes);
  out.fields.emplace_back("packed_signs", std::move(signs));
  out.fields.emplace_back("scale", std::move(scale));
  return out;
}

Status DecodeAddBitDelta(const TensorPayload& p, std::span<float> acc) {
  BLZ_RETURN_IF_ERROR(CheckPayloadStrategy(p, "bitdelta"));
  BLZ_ASSIGN_OR_RETURN(std::vector<uint64_t> shape, PayloadMatrixShape(p, "bitdelta"));
  const uint64_t n = *ShapeElements(shape);  // PayloadShape checked it fits
  BLZ_RETURN_IF_ERROR(CheckAccSize(p, acc.size(), n));
  BLZ_ASSIGN_OR_RETURN(formats::WdeltaArrayView signs,
                       PayloadField(p, "packed_signs", "uint8", {(n + 7) / 8}));
  BLZ_ASSIGN_OR_RETURN(formats::WdeltaArrayView scale, PayloadField(p, "scale", "float32", {1}));
  float alpha = 0;
  std::memcpy(&alpha, scale.bytes.data(), sizeof alpha);
  if (!std::isfinite(alpha)) {
    return Corruption("tensor '" + p.name + "' field 'scale': not a finite number");
  }
  const float minus_alpha = -alpha;
  const uint8_t* bits = signs.bytes.data();
  for (uint64_t i = 0; i < n; ++i) {
    const bool positive = (bits[i >> 3] >> (7 - (i & 7))) & 1u;
    acc[i] = acc[i] + (positive ? alpha : minus_alpha);
  }
  return Status::Ok();
}

}  // namespace blz::lossy
