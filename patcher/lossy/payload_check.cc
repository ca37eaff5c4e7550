#include "patcher/lossy/payload_check.h"

#include <bit>
#include <cstring>

#include "core/checked.h"

namespace blz::lossy {

static_assert(std::endian::native == std::endian::little,
              "record bytes are little-endian float32, copied as is");

namespace {

std::string Where(const TensorPayload& p) { return "tensor '" + p.name + "'"; }

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// A JSON number that is a non-negative integer (parsed files give unsigned, values built in
// memory may be signed).
bool AsUint(const nlohmann::ordered_json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

Result<uint64_t> ShapeElements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t dim : shape) {
    if (!CheckedMul(n, dim, &n)) {
      return InvalidArgument("element count of the shape overflows 64 bits");
    }
  }
  return n;
}

Status CheckPayloadStrategy(const TensorPayload& p, std::string_view strategy) {
  if (p.meta == nullptr || !p.meta->is_object()) {
    return Corruption(Where(p) + ": no header object");
  }
  auto it = p.meta->find("strategy");
  if (it == p.meta->end() || !it->is_string() || it->get<std::string>() != strategy) {
    return Corruption(Where(p) + ": \"strategy\" is not \"" + std::string(strategy) + "\"");
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> PayloadShape(const TensorPayload& p) {
  auto it = p.meta->find("shape");
  if (it == p.meta->end() || !it->is_array()) {
    return Corruption(Where(p) + ": \"shape\" is missing or not an array");
  }
  std::vector<uint64_t> shape;
  for (const auto& dim : *it) {
    uint64_t v = 0;
    if (!AsUint(dim, &v)) {
      return Corruption(Where(p) + ": \"shape\" holds a value that is not an unsigned integer");
    }
    shape.push_back(v);
  }
  if (!ShapeElements(shape).ok()) {
    return Corruption(Where(p) + ": \"shape\" " + ShapeText(shape) + " overflows 64 bits");
  }
  return shape;
}

Result<std::vector<uint64_t>> PayloadMatrixShape(const TensorPayload& p,
                                                 std::string_view strategy) {
  BLZ_ASSIGN_OR_RETURN(std::vector<uint64_t> shape, PayloadShape(p));
  if (shape.size() < 2) {
    return Corruption("tensor '" + p.name + "': " + std::string(strategy) +
                      " \"shape\" has rank " + std::to_string(shape.size()) +
                      ", expected >= 2");
  }
  return shape;
}

Result<uint64_t> PayloadUint(const TensorPayload& p, std::string_view key) {
  auto it = p.meta->find(key);
  uint64_t v = 0;
  if (it == p.meta->end() || !AsUint(*it, &v)) {
    return Corruption(Where(p) + ": \"" + std::string(key) +
                      "\" is missing or not an unsigned integer");
  }
  return v;
}

Result<std::string> PayloadString(const TensorPayload& p, std::string_view key) {
  auto it = p.meta->find(key);
  if (it == p.meta->end() || !it->is_string()) {
    return Corruption(Where(p) + ": \"" + std::string(key) + "\" is missing or not a string");
  }
  return it->get<std::string>();
}

Result<formats::WdeltaArrayView> PayloadField(const TensorPayload& p, std::string_view field,
                                              std::string_view dtype,
                                              const std::vector<uint64_t>& shape) {
  const std::string where = Where(p) + " field '" + std::string(field) + "'";
  auto it = p.fields.find(field);
  if (it == p.fields.end()) return Corruption(where + ": record missing");
  const formats::WdeltaArrayView& v = it->second;
  if (v.dtype != dtype) {
    return Corruption(where + ": dtype " + v.dtype + ", expected " + std::string(dtype));
  }
  if (v.shape != shape) {
    return Corruption(where + ": shape " + ShapeText(v.shape) + ", expected " +
                      ShapeText(shape));
  }
  auto count = ShapeElements(shape);
  auto item = formats::WdeltaItemSize(dtype);
  uint64_t bytes = 0;
  if (!count.ok() || !item.ok() || !CheckedMul(*count, *item, &bytes)) {
    return Corruption(where + ": byte count overflows 64 bits");
  }
  if (v.bytes.size() != bytes) {
    return Corruption(where + ": " + std::to_string(v.bytes.size()) + " bytes, expected " +
                      std::to_string(bytes));
  }
  return v;
}

Status CheckAccSize(const TensorPayload& p, size_t acc_size, uint64_t n) {
  if (acc_size != n) {
    return InvalidArgument(Where(p) + ": " + std::to_string(acc_size) +
                           " base values for a delta of " + std::to_string(n) + " elements");
  }
  return Status::Ok();
}

void LoadFloats(ByteSpan bytes, std::vector<float>* out) {
  out->resize(bytes.size() / sizeof(float));
  if (!out->empty()) std::memcpy(out->data(), bytes.data(), out->size() * sizeof(float));
}

void AppendFloats(std::span<const float> values, std::vector<uint8_t>* out) {
  const size_t at = out->size();
  out->resize(at + values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(out->data() + at, values.data(), values.size_bytes());
}

}  // namespace blz::lossy
