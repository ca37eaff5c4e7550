// GGUF metadata values (formats/gguf.h): type names and sizes, the GgufValue factories and
// accessors, and the bounds-checked walk over an array's in-file element encoding. The file
// reader and writer are in gguf.cc.
#include <algorithm>
#include <bit>

#include "core/checked.h"
#include "formats/gguf.h"

namespace blz::formats {
namespace {

constexpr uint32_t kMaxValueType = 12;

bool IsScalar(GgufType t) { return t != GgufType::kString && t != GgufType::kArray; }

uint64_t LoadLE(const char* p, uint32_t size) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < size; ++i) v |= uint64_t(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

void AppendLE(std::string* out, uint64_t v, uint32_t size) {
  for (uint32_t i = 0; i < size; ++i) out->push_back(static_cast<char>(uint8_t(v >> (8 * i))));
}

GgufValue Scalar(GgufType t, uint64_t bits) {
  GgufValue v;
  v.type = t;
  v.bits = bits;
  return v;
}

// Advances `*rest` past `count` elements of type `et`. `levels` bounds the arrays that may
// still nest inside them (recursion depth). False (with `*rest` in an unspecified position)
// if the bytes do not hold them.
bool SkipElements(GgufType et, uint64_t count, std::string_view* rest, uint32_t levels) {
  if (static_cast<uint32_t>(et) > kMaxValueType) return false;
  if (IsScalar(et)) {
    uint64_t n = 0;
    if (!CheckedMul(count, GgufScalarSize(et), &n) || n > rest->size()) return false;
    rest->remove_prefix(n);
    return true;
  }
  // Each string or array element takes at least 8 bytes: the loop is bounded by the input.
  if (count > rest->size() / 8) return false;
  for (uint64_t i = 0; i < count; ++i) {
    if (et == GgufType::kString) {
      if (rest->size() < 8) return false;
      const uint64_t len = LoadLE(rest->data(), 8);
      if (len > rest->size() - 8) return false;
      rest->remove_prefix(8 + len);
      continue;
    }
    if (levels == 0 || rest->size() < 12) return false;
    const uint32_t nested = static_cast<uint32_t>(LoadLE(rest->data(), 4));
    const uint64_t n = LoadLE(rest->data() + 4, 8);
    rest->remove_prefix(12);
    if (!SkipElements(static_cast<GgufType>(nested), n, rest, levels - 1)) return false;
  }
  return true;
}

// Arrays nested in the elements of an array of type `et` (0 if they are not arrays), or
// kMaxGgufArrayDepth + 1 if malformed or deeper.
uint32_t ElementDepth(GgufType et, std::string_view raw, uint64_t count, uint32_t levels) {
  if (et != GgufType::kArray) return 0;
  constexpr uint32_t kBad = kMaxGgufArrayDepth + 1;
  if (levels == 0) return kBad;
  uint32_t d = 0;
  GgufItemView item;
  for (uint64_t i = 0; i < count; ++i) {
    if (!NextGgufItem(et, &raw, &item)) return kBad;
    d = std::max(d, 1 + ElementDepth(item.element_type, item.raw, item.count, levels - 1));
    if (d >= kBad) return kBad;
  }
  return d;
}

}  // namespace

bool NextGgufItem(GgufType element_type, std::string_view* rest, GgufItemView* out) {
  const std::string_view in = *rest;
  if (static_cast<uint32_t>(element_type) > kMaxValueType) return false;
  GgufItemView v;
  v.type = element_type;
  if (IsScalar(element_type)) {
    const uint32_t size = GgufScalarSize(element_type);
    if (in.size() < size) return false;
    v.bits = LoadLE(in.data(), size);
    rest->remove_prefix(size);
  } else if (element_type == GgufType::kString) {
    if (in.size() < 8) return false;
    const uint64_t len = LoadLE(in.data(), 8);
    if (len > in.size() - 8) return false;
    v.str = in.substr(8, len);
    rest->remove_prefix(8 + len);
  } else {
    if (in.size() < 12) return false;
    v.element_type = static_cast<GgufType>(LoadLE(in.data(), 4));
    v.count = LoadLE(in.data() + 4, 8);
    std::string_view body = in.substr(12);
    if (!SkipElements(v.element_type, v.count, &body, kMaxGgufArrayDepth)) return false;
    v.raw = in.substr(12, in.size() - 12 - body.size());
    *rest = body;
  }
  *out = v;
  return true;
}

uint32_t GgufArrayDepth(const GgufValue& v) {
  if (v.type != GgufType::kArray) return 0;
  return std::min<uint32_t>(kMaxGgufArrayDepth + 1,
                            1 + ElementDepth(v.element_type, v.raw, v.count,
                                             kMaxGgufArrayDepth));
}

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

uint32_t GgufScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

GgufValue GgufValue::U8(uint8_t v) { return Scalar(GgufType::kUint8, v); }
GgufValue GgufValue::I8(int8_t v) { return Scalar(GgufType::kInt8, static_cast<uint8_t>(v)); }
GgufValue GgufValue::U16(uint16_t v) { return Scalar(GgufType::kUint16, v); }
GgufValue GgufValue::I16(int16_t v) {
  return Scalar(GgufType::kInt16, static_cast<uint16_t>(v));
}
GgufValue GgufValue::U32(uint32_t v) { return Scalar(GgufType::kUint32, v); }
GgufValue GgufValue::I32(int32_t v) {
  return Scalar(GgufType::kInt32, static_cast<uint32_t>(v));
}
GgufValue GgufValue::F32(float v) {
  return Scalar(GgufType::kFloat32, std::bit_cast<uint32_t>(v));
}
GgufValue GgufValue::Bool(bool v) { return Scalar(GgufType::kBool, v ? 1 : 0); }
GgufValue GgufValue::String(std::string v) {
  GgufValue out;
  out.type = GgufType::kString;
  out.str = std::move(v);
  return out;
}
GgufValue GgufValue::U64(uint64_t v) { return Scalar(GgufType::kUint64, v); }
GgufValue GgufValue::I64(int64_t v) {
  return Scalar(GgufType::kInt64, static_cast<uint64_t>(v));
}
GgufValue GgufValue::F64(double v) {
  return Scalar(GgufType::kFloat64, std::bit_cast<uint64_t>(v));
}

Result<GgufValue> GgufValue::Array(GgufType element_type, std::span<const GgufValue> items) {
  if (static_cast<uint32_t>(element_type) > kMaxValueType) {
    return InvalidArgument("unknown array element type");
  }
  GgufValue out;
  out.type = GgufType::kArray;
  out.element_type = element_type;
  out.count = items.size();
  uint32_t depth = 1;
  for (size_t i = 0; i < items.size(); ++i) {
    const GgufValue& it = items[i];
    if (it.type != element_type) {
      return InvalidArgument("array item " + std::to_string(i) + " is " +
                             std::string(GgufTypeName(it.type)) + ", not " +
                             std::string(GgufTypeName(element_type)));
    }
    if (IsScalar(element_type)) {
      AppendLE(&out.raw, it.bits, GgufScalarSize(element_type));
    } else if (element_type == GgufType::kString) {
      AppendLE(&out.raw, it.str.size(), 8);
      out.raw += it.str;
    } else {
      depth = std::max(depth, 1 + GgufArrayDepth(it));
      if (depth > kMaxGgufArrayDepth) break;
      AppendLE(&out.raw, static_cast<uint32_t>(it.element_type), 4);
      AppendLE(&out.raw, it.count, 8);
      out.raw += it.raw;
    }
  }
  if (depth > kMaxGgufArrayDepth) {
    return InvalidArgument("arrays nested deeper than " + std::to_string(kMaxGgufArrayDepth) +
                           " levels");
  }
  return out;
}

GgufValue GgufValue::Item(uint64_t i) const {
  if (IsScalar(element_type)) {
    const uint32_t size = GgufScalarSize(element_type);
    if (i >= count || i >= raw.size() / size) return GgufValue();
    return Scalar(element_type, LoadLE(raw.data() + i * size, size));
  }
  std::string_view rest = raw;
  GgufItemView item;
  for (uint64_t k = 0; k <= i; ++k) {
    if (k >= count || !NextGgufItem(element_type, &rest, &item)) return GgufValue();
  }
  if (element_type == GgufType::kString) return String(std::string(item.str));
  GgufValue out;
  out.type = GgufType::kArray;
  out.element_type = item.element_type;
  out.count = item.count;
  out.raw.assign(item.raw);
  return out;
}

std::optional<int64_t> GgufValue::AsInt() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64: return static_cast<int64_t>(bits);
    case GgufType::kInt8: return static_cast<int8_t>(bits);
    case GgufType::kInt16: return static_cast<int16_t>(bits);
    case GgufType::kInt32: return static_cast<int32_t>(bits);
    case GgufType::kInt64: return static_cast<int64_t>(bits);
    default: return std::nullopt;
  }
}

std::optional<uint64_t> GgufValue::AsUInt() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64: return bits;
    default: return std::nullopt;
  }
}

std::optional<double> GgufValue::AsFloat() const {
  if (type == GgufType::kFloat32) {
    return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  if (type == GgufType::kFloat64) return std::bit_cast<double>(bits);
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (type != GgufType::kBool) return std::nullopt;
  return bits != 0;
}

const GgufValue* FindGgufValue(const GgufHeader& header, std::string_view key) {
  for (const GgufKv& kv : header.metadata) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

}  // namespace blz::formats
