#include "formats/structural_hash.h"

#include <bit>
#include <algorithm>
#include <charconv>
#include <map>
#include <type_traits>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/digest.h"

namespace blz::formats {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Rust's String::from_utf8_lossy: each maximal invalid subsequence (a lead byte followed by as
// many continuation bytes as are still valid for it, or a lone bad byte) becomes one U+FFFD.
// Appends to `out`.
void AppendValidUtf8(std::string_view s, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    size_t run = i;
    while (run < n && p[run] < 0x80) ++run;  // ASCII run, copied in one go
    out->append(s.substr(i, run - i));
    i = run;
    if (i >= n) break;
    const unsigned char c = p[i];
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t len = 1;  // bytes of the (valid prefix of the) sequence consumed so far
    bool ok = need > 0;
    for (size_t k = 0; ok && k < need; ++k) {
      const unsigned char l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
      if (i + len >= n || p[i + len] < l || p[i + len] > h) {
        ok = false;
      } else {
        ++len;
      }
    }
    if (ok) {
      out->append(s.substr(i, len));
    } else {
      out->append("\xEF\xBF\xBD");
    }
    i += len;
  }
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendValidUtf8(s, &out);
  return out;
}

constexpr char kHexDigits[] = "0123456789abcdef";

void AppendU00(unsigned char c, std::string* out) {
  out->append("\\u00");
  out->push_back(kHexDigits[c >> 4]);
  out->push_back(kHexDigits[c & 15]);
}

// The two string escapes below differ only in which bytes they escape and how: one loop, two
// rule sets. Bytes that need no escape are copied in runs.
struct EscapeRules {
  bool escape_del;    // 0x7f as \u007f
  bool short_bf;      // \b and \f instead of \u0008 and \u000c
};
void AppendEscaped(std::string_view s, EscapeRules rules, std::string* out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t run = i;
    while (run < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[run]);
      if (c < 0x20 || c == '"' || c == '\\' || (rules.escape_del && c == 0x7f)) break;
      ++run;
    }
    out->append(s.substr(i, run - i));
    i = run;
    if (i >= s.size()) break;
    const unsigned char c = static_cast<unsigned char>(s[i++]);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b':
      case '\f':
        if (rules.short_bf) {
          out->append(c == '\b' ? "\\b" : "\\f");
        } else {
          AppendU00(c, out);
        }
        break;
      default: AppendU00(c, out);
    }
  }
}

// weight-inspect's own string escape (the first of the two levels): \" \\ \n \r \t, other ASCII
// control characters (0x00-0x1f, 0x7f) as \u00xx in lower case, everything else verbatim.
void AppendEscapedInner(std::string_view s, std::string* out) {
  AppendEscaped(s, {/*escape_del=*/true, /*short_bf=*/false}, out);
}

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// The u64 bits of an f32 widened to f64, as x86-64 / AArch64 (and so Rust's `as f64`) widen it:
// exact for finite values and infinities; a NaN keeps its sign and payload and becomes quiet.
uint64_t WidenF32Bits(uint32_t b) {
  const uint64_t sign = uint64_t(b >> 31) << 63;
  const uint32_t exp = (b >> 23) & 0xFF;
  const uint64_t mant = b & 0x7FFFFF;
  if (exp == 0xFF && mant != 0) {
    return sign | (uint64_t(0x7FF) << 52) | (uint64_t(1) << 51) | (mant << 29);
  }
  return std::bit_cast<uint64_t>(static_cast<double>(std::bit_cast<float>(b)));
}

// --- Output targets ----------------------------------------------------------------------
// Encoders write through an output with Put(std::string_view) and Put(char).

constexpr size_t kPieceBytes = 64 * 1024;  // streaming granularity

struct StringOut {
  std::string* s;
  void Put(std::string_view v) { s->append(v); }
  void Put(char c) { s->push_back(c); }
};

// The canonical JSON, written through Raw (verbatim) and Escaped (a JSON string's contents
// escaped exactly as serde_json escapes valid UTF-8: \" \\ \b \f \n \r \t, other bytes below
// 0x20 as \u00xx in lower case, everything else verbatim, including 0x7f, '/' and non-ASCII;
// byte by byte, so a string may be escaped piece by piece), into a string.
struct StringJson {
  std::string* s;
  void Raw(std::string_view v) { s->append(v); }
  void Escaped(std::string_view v) {
    AppendEscaped(v, {/*escape_del=*/false, /*short_bf=*/true}, s);
  }
};

// The same, fed to SHA-256 in pieces of about kPieceBytes: never holds the document.
class HashingJson {
 public:
  void Raw(std::string_view v) {
    buf_.append(v);
    if (buf_.size() >= kPieceBytes) Flush();
  }
  void Escaped(std::string_view v) {
    while (!v.empty()) {
      const std::string_view piece = v.substr(0, kPieceBytes);
      AppendEscaped(piece, {/*escape_del=*/false, /*short_bf=*/true}, &buf_);
      v.remove_prefix(piece.size());
      if (buf_.size() >= kPieceBytes) Flush();
    }
  }
  std::string FinishHex() {
    Flush();
    return sha_.FinishHex();
  }

 private:
  void Flush() {
    sha_.Update(buf_);
    buf_.clear();
  }
  Sha256 sha_;
  std::string buf_;
};

// Puts through a JSON output's Escaped: a value's encoding, escaped as it is produced.
template <typename Json>
struct EscapedOut {
  Json* j;
  void Put(std::string_view v) { j->Escaped(v); }
  void Put(char c) { j->Escaped(std::string_view(&c, 1)); }
};

// --- Value encoding ------------------------------------------------------------------------

template <typename T, typename Out>
void PutNumber(T v, Out& out) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.Put(std::string_view(buf, static_cast<size_t>(res.ptr - buf)));
}

// A scalar kind's encoding (REQUIRES: kind is not kString, kArray or kGgufArray).
template <typename Out>
void PutScalar(StructuralValue::Kind kind, uint64_t bits, Out& out) {
  using Kind = StructuralValue::Kind;
  switch (kind) {
    case Kind::kBool: out.Put(bits != 0 ? "true" : "false"); return;
    case Kind::kInt:
    case Kind::kUInt: PutNumber(static_cast<int64_t>(bits), out); return;
    case Kind::kF32:
      out.Put("f32:");
      PutNumber(WidenF32Bits(static_cast<uint32_t>(bits)), out);
      return;
    case Kind::kF64: PutNumber(bits, out); return;
    default: out.Put("null"); return;
  }
}

// '"' + the text made valid UTF-8 and escaped (weight-inspect's inner escape) + '"', escaped
// in pieces so a long string needs one piece of extra memory (plus its UTF-8 repair, if any).
template <typename Out>
void PutString(std::string_view s, Out& out) {
  out.Put('"');
  std::string valid;
  if (!IsAscii(s)) {
    valid = ToValidUtf8(s);
    s = valid;
  }
  std::string piece;
  while (!s.empty()) {
    piece.clear();
    AppendEscapedInner(s.substr(0, kPieceBytes), &piece);
    out.Put(piece);
    s.remove_prefix(std::min(s.size(), kPieceBytes));
  }
  out.Put('"');
}

// The GGUF adapter's kind for a scalar GGUF type (kNull for kString / kArray).
StructuralValue::Kind KindOfGgufScalar(GgufType t) {
  using Kind = StructuralValue::Kind;
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64: return Kind::kUInt;
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64: return Kind::kInt;
    case GgufType::kFloat32: return Kind::kF32;
    case GgufType::kFloat64: return Kind::kF64;
    case GgufType::kBool: return Kind::kBool;
    case GgufType::kString:
    case GgufType::kArray: break;
  }
  return Kind::kNull;
}

// The adapter's bits for a scalar: signed values sign-extended (two's complement in 64 bits).
uint64_t BitsOfGgufScalar(GgufType t, uint64_t bits) {
  switch (t) {
    case GgufType::kInt8: return static_cast<uint64_t>(int64_t{static_cast<int8_t>(bits)});
    case GgufType::kInt16: return static_cast<uint64_t>(int64_t{static_cast<int16_t>(bits)});
    case GgufType::kInt32: return static_cast<uint64_t>(int64_t{static_cast<int32_t>(bits)});
    default: return bits;
  }
}

// "[" + the elements of a GGUF array (file encoding in `raw`) + "]", element by element
// straight from `raw`. Stops at the first element that is not whole (malformed `raw`).
template <typename Out>
void PutGgufArray(GgufType et, uint64_t count, std::string_view raw, Out& out) {
  out.Put('[');
  const StructuralValue::Kind kind = KindOfGgufScalar(et);
  GgufItemView item;
  for (uint64_t i = 0; i < count && NextGgufItem(et, &raw, &item); ++i) {
    if (i > 0) out.Put(',');
    if (et == GgufType::kString) {
      PutString(item.str, out);
    } else if (et == GgufType::kArray) {
      PutGgufArray(item.element_type, item.count, item.raw, out);
    } else {
      PutScalar(kind, BitsOfGgufScalar(et, item.bits), out);
    }
  }
  out.Put(']');
}

template <typename Out>
void EncodeInto(const StructuralValue& v, Out& out) {
  using Kind = StructuralValue::Kind;
  switch (v.kind) {
    case Kind::kString: PutString(v.str, out); return;
    case Kind::kArray:
      out.Put('[');
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i > 0) out.Put(',');
        EncodeInto(v.items[i], out);
      }
      out.Put(']');
      return;
    case Kind::kGgufArray: PutGgufArray(v.gguf_element_type, v.bits, v.str, out); return;
    default: PutScalar(v.kind, v.bits, out); return;
  }
}

// --- The canonical JSON document -----------------------------------------------------------

// The input sorted and deduplicated as Canonicalize does, without encoding any value.
struct SortedInput {
  std::string format;
  std::optional<uint32_t> gguf_version;
  std::map<std::string, const StructuralValue*> metadata;
  std::map<std::string, const StructuralTensor*> tensors;
};

SortedInput Sort(const StructuralInput& input) {
  SortedInput s;
  s.format = ToValidUtf8(input.format);
  s.gguf_version = input.gguf_version;
  for (const auto& [key, value] : input.metadata) s.metadata[ToValidUtf8(key)] = &value;
  for (const StructuralTensor& t : input.tensors) s.tensors[ToValidUtf8(t.name)] = &t;
  return s;
}

template <typename Json>
void PutJsonString(std::string_view s, Json& j) {
  j.Raw("\"");
  j.Escaped(s);
  j.Raw("\"");
}

// A metadata value as a JSON string: encoded (SortedInput) or already encoded (Canonical...).
template <typename Json>
void PutJsonValue(const StructuralValue* v, Json& j) {
  j.Raw("\"");
  EscapedOut<Json> out{&j};
  EncodeInto(*v, out);
  j.Raw("\"");
}
template <typename Json>
void PutJsonValue(const std::string& encoded, Json& j) {
  PutJsonString(encoded, j);
}

const StructuralTensor& Deref(const StructuralTensor& t) { return t; }
const StructuralTensor& Deref(const StructuralTensor* t) { return *t; }

// The document of docs/structural-hash.md: compact, fixed key order, serde_json escaping.
// Tensor names are the map keys (made valid UTF-8).
template <typename Meta, typename Tensors, typename Json>
void WriteCanonical(std::string_view format, const std::optional<uint32_t>& gguf_version,
                    const Meta& metadata, const Tensors& tensors, Json& j) {
  StringOut num_out{nullptr};
  std::string num;
  num_out.s = &num;
  j.Raw("{\"format\":");
  PutJsonString(format, j);
  if (gguf_version) {
    num.clear();
    PutNumber(*gguf_version, num_out);
    j.Raw(",\"gguf_version\":");
    j.Raw(num);
  }
  j.Raw(",\"metadata\":{");
  bool first = true;
  for (const auto& [k, v] : metadata) {
    if (!first) j.Raw(",");
    first = false;
    PutJsonString(k, j);
    j.Raw(":");
    PutJsonValue(v, j);
  }
  j.Raw("},\"tensors\":{");
  first = true;
  for (const auto& [name, tv] : tensors) {
    const StructuralTensor& t = Deref(tv);
    if (!first) j.Raw(",");
    first = false;
    PutJsonString(name, j);
    j.Raw(":{\"name\":");
    PutJsonString(name, j);
    j.Raw(",\"dtype\":");
    if (IsAscii(t.dtype)) {
      PutJsonString(t.dtype, j);
    } else {
      PutJsonString(ToValidUtf8(t.dtype), j);
    }
    j.Raw(",\"shape\":[");
    for (size_t i = 0; i < t.shape.size(); ++i) {
      num.clear();
      if (i > 0) num += ',';
      PutNumber(t.shape[i], num_out);
      j.Raw(num);
    }
    num.clear();
    PutNumber(t.byte_length, num_out);
    j.Raw("],\"byte_length\":");
    j.Raw(num);
    j.Raw("}");
  }
  j.Raw("}}");
}

std::string Dump(const OrderedJson& j, int indent) {
  // Inputs are valid UTF-8 already; `replace` only guarantees dump() never throws.
  return j.dump(indent, ' ', false, OrderedJson::error_handler_t::replace);
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string VersionText(const std::optional<uint32_t>& v) {
  return v ? std::to_string(*v) : std::string("none");
}

std::string HashOf(const CanonicalStructure& c) {
  HashingJson j;
  WriteCanonical(c.format, c.gguf_version, c.metadata, c.tensors, j);
  return j.FinishHex();
}

std::string HashOf(const SortedInput& s) {
  HashingJson j;
  WriteCanonical(s.format, s.gguf_version, s.metadata, s.tensors, j);
  return j.FinishHex();
}

}  // namespace

StructuralValue StructuralValue::F32(float v) {
  return Scalar(Kind::kF32, std::bit_cast<uint32_t>(v));
}
StructuralValue StructuralValue::F64(double v) {
  return Scalar(Kind::kF64, std::bit_cast<uint64_t>(v));
}
StructuralValue StructuralValue::String(std::string v) {
  StructuralValue out;
  out.kind = Kind::kString;
  out.str = std::move(v);
  return out;
}
StructuralValue StructuralValue::Array(std::vector<StructuralValue> items) {
  StructuralValue out;
  out.kind = Kind::kArray;
  out.items = std::move(items);
  return out;
}

StructuralValue StructuralValue::GgufArray(GgufValue array) {
  StructuralValue out;
  out.kind = Kind::kGgufArray;
  out.gguf_element_type = array.element_type;
  out.bits = array.count;
  out.str = std::move(array.raw);
  return out;
}

std::string EncodeStructuralValue(const StructuralValue& v) {
  std::string s;
  StringOut out{&s};
  EncodeInto(v, out);
  return s;
}

CanonicalStructure Canonicalize(const StructuralInput& input) {
  CanonicalStructure c;
  c.format = ToValidUtf8(input.format);
  c.gguf_version = input.gguf_version;
  for (const auto& [key, value] : input.metadata) {
    c.metadata[ToValidUtf8(key)] = EncodeStructuralValue(value);
  }
  for (const StructuralTensor& t : input.tensors) {
    StructuralTensor ct = t;
    ct.name = ToValidUtf8(t.name);
    ct.dtype = ToValidUtf8(t.dtype);
    std::string key = ct.name;
    c.tensors[std::move(key)] = std::move(ct);
  }
  return c;
}

std::string CanonicalJson(const CanonicalStructure& c) {
  // Written by hand rather than through nlohmann::json so the bytes are pinned here (serde_json's
  // compact form), independent of a JSON library's escaping choices.
  std::string out;
  StringJson j{&out};
  WriteCanonical(c.format, c.gguf_version, c.metadata, c.tensors, j);
  return out;
}

std::string CanonicalJson(const StructuralInput& input) {
  const SortedInput sorted = Sort(input);
  std::string out;
  StringJson j{&out};
  WriteCanonical(sorted.format, sorted.gguf_version, sorted.metadata, sorted.tensors, j);
  return out;
}

std::string StructuralHash(const StructuralInput& input) { return HashOf(Sort(input)); }

std::string StructuralId(std::string_view format, std::optional<uint32_t> gguf_version,
                         std::string_view structural_hash) {
  std::string id = "wi:";
  id += format;
  id += ':';
  id += std::to_string(gguf_version.value_or(0));
  id += ':';
  id += structural_hash.substr(0, 8);
  return id;
}

StructuralIdentity Identify(const StructuralInput& input) {
  const SortedInput c = Sort(input);
  StructuralIdentity id;
  id.format = c.format;
  id.gguf_version = c.gguf_version;
  id.structural_hash = HashOf(c);
  id.tensor_count = c.tensors.size();
  id.metadata_count = c.metadata.size();
  id.id = StructuralId(id.format, id.gguf_version, id.structural_hash);
  return id;
}

std::string IdentityText(const StructuralIdentity& identity) {
  std::string upper = identity.format;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::string s;
  s += "Structural identity\n";
  s += "──────────────────\n";
  s += "ID:        " + identity.id + "\n";
  s += "Stable:    yes (machine independent)\n";
  s += "Includes:  header, tensor names, shapes, dtypes\n";
  s += "Excludes:  raw weight bytes\n";
  s += "\n";
  s += "format: " + upper + "\n";
  s += "structural_hash: " + identity.structural_hash + "\n";
  s += "tensor_count: " + std::to_string(identity.tensor_count) + "\n";
  s += "metadata_count: " + std::to_string(identity.metadata_count) + "\n";
  return s;
}

std::string IdentityJson(const StructuralIdentity& identity) {
  OrderedJson j = OrderedJson::object();
  j["schema"] = 1;
  j["format"] = identity.format;
  j["structural_hash"] = identity.structural_hash;
  j["tensor_count"] = identity.tensor_count;
  j["metadata_count"] = identity.metadata_count;
  return Dump(j, 2) + "\n";
}

StructuralDiff DiffStructures(const StructuralInput& old_input,
                              const StructuralInput& new_input) {
  const CanonicalStructure a = Canonicalize(old_input);
  const CanonicalStructure b = Canonicalize(new_input);
  StructuralDiff d;
  d.format_old = a.format;
  d.format_new = b.format;
  d.gguf_version_old = a.gguf_version;
  d.gguf_version_new = b.gguf_version;
  d.hash_old = HashOf(a);
  d.hash_new = HashOf(b);
  d.format_equal = a.format == b.format;
  d.hash_equal = d.hash_old == d.hash_new;
  d.tensor_count_equal = a.tensors.size() == b.tensors.size();
  d.metadata_count_equal = a.metadata.size() == b.metadata.size();
  for (const auto& [k, v] : a.metadata) {
    auto it = b.metadata.find(k);
    if (it == b.metadata.end()) {
      d.metadata_removed.push_back(k);
    } else if (it->second != v) {
      d.metadata_changed.push_back({k, v, it->second});
    }
  }
  for (const auto& [k, v] : b.metadata) {
    if (!a.metadata.contains(k)) d.metadata_added.push_back(k);
  }
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end()) {
      d.tensors_removed.push_back(name);
    } else if (!(it->second == t)) {
      const StructuralTensor& n = it->second;
      d.tensor_changes.push_back(
          {name, t.dtype, n.dtype, t.shape, n.shape, t.byte_length, n.byte_length});
    }
  }
  for (const auto& [name, t] : b.tensors) {
    if (!a.tensors.contains(name)) d.tensors_added.push_back(name);
  }
  return d;
}

std::string DiffJson(const StructuralDiff& diff) {
  OrderedJson j = OrderedJson::object();
  j["schema"] = 1;
  j["format_equal"] = diff.format_equal;
  j["hash_equal"] = diff.hash_equal;
  j["tensor_count_equal"] = diff.tensor_count_equal;
  j["metadata_count_equal"] = diff.metadata_count_equal;
  j["metadata_added"] = diff.metadata_added;
  j["metadata_removed"] = diff.metadata_removed;
  OrderedJson changed = OrderedJson::array();
  for (const MetadataChange& m : diff.metadata_changed) {
    OrderedJson mj = OrderedJson::object();
    mj["key"] = m.key;
    mj["old_value"] = m.old_value;
    mj["new_value"] = m.new_value;
    changed.push_back(std::move(mj));
  }
  j["metadata_changed"] = std::move(changed);
  j["tensors_added"] = diff.tensors_added;
  j["tensors_removed"] = diff.tensors_removed;
  OrderedJson tc = OrderedJson::array();
  for (const TensorChange& t : diff.tensor_changes) {
    OrderedJson tj = OrderedJson::object();
    tj["name"] = t.name;
    tj["dtype_old"] = t.dtype_old;
    tj["dtype_new"] = t.dtype_new;
    tj["shape_old"] = t.shape_old;
    tj["shape_new"] = t.shape_new;
    tj["byte_length_old"] = t.byte_length_old;
    tj["byte_length_new"] = t.byte_length_new;
    tc.push_back(std::move(tj));
  }
  j["tensor_changes"] = std::move(tc);
  return Dump(j, 2) + "\n";
}

std::string DiffText(const StructuralDiff& diff, bool verbose) {
  std::string s;
  if (diff.identical()) {
    s += "IDENTICAL\n";
    s += "--------------------\n";
    s += "No structural differences found.\n";
    s += "Structural ID:    unchanged\n";
    return s;
  }
  const size_t n_meta =
      diff.metadata_added.size() + diff.metadata_removed.size() + diff.metadata_changed.size();
  s += "DIFFERENT\n";
  s += "--------------------\n";
  if (!diff.format_equal) {
    s += "Format:           " + diff.format_old + " -> " + diff.format_new + "\n";
  }
  if (diff.gguf_version_old != diff.gguf_version_new) {
    s += "GGUF version:     " + VersionText(diff.gguf_version_old) + " -> " +
         VersionText(diff.gguf_version_new) + "\n";
  }
  s += "Added tensors:    " + std::to_string(diff.tensors_added.size()) + "\n";
  s += "Removed tensors: " + std::to_string(diff.tensors_removed.size()) + "\n";
  s += "Modified tensors: " + std::to_string(diff.tensor_changes.size()) + "\n";
  if (n_meta > 0) s += "Metadata changes: " + std::to_string(n_meta) + "\n";
  s += "Structural ID:    changed\n";
  if (!verbose) return s;
  if (!diff.tensor_changes.empty()) {
    s += "\nTensor changes\n─────────────\n";
    for (const TensorChange& t : diff.tensor_changes) {
      s += "  " + t.name + "\n";
      if (t.dtype_old != t.dtype_new) {
        s += "    dtype: " + t.dtype_old + " -> " + t.dtype_new + "\n";
      }
      if (t.shape_old != t.shape_new) {
        s += "    shape: " + ShapeText(t.shape_old) + " -> " + ShapeText(t.shape_new) + "\n";
      }
      if (t.byte_length_old != t.byte_length_new) {
        s += "    byte_length: " + std::to_string(t.byte_length_old) + " -> " +
             std::to_string(t.byte_length_new) + "\n";
      }
    }
  }
  if (!diff.tensors_added.empty() || !diff.tensors_removed.empty()) {
    s += "\nAdded / removed tensors\n───────────────────────\n";
    for (const std::string& n : diff.tensors_added) s += "  + " + n + "\n";
    for (const std::string& n : diff.tensors_removed) s += "  - " + n + "\n";
  }
  if (n_meta > 0) {
    s += "\nMetadata changes\n────────────────\n";
    for (const std::string& k : diff.metadata_added) s += "  + " + k + "\n";
    for (const std::string& k : diff.metadata_removed) s += "  - " + k + "\n";
    for (const MetadataChange& m : diff.metadata_changed) {
      s += "  ~ " + m.key + ": " + m.old_value + " -> " + m.new_value + "\n";
    }
  }
  return s;
}

namespace {

StructuralValue FromGgufScalar(GgufType t, uint64_t bits) {
  StructuralValue v;
  v.kind = KindOfGgufScalar(t);
  v.bits = v.kind == StructuralValue::Kind::kNull ? 0 : BitsOfGgufScalar(t, bits);
  return v;
}

// `V` is GgufValue& (the value's buffers copied) or GgufValue&& (moved).
template <typename V>
StructuralValue FromGguf(V&& v) {
  if (v.type == GgufType::kString) return StructuralValue::String(std::forward<V>(v).str);
  if (v.type == GgufType::kArray) return StructuralValue::GgufArray(std::forward<V>(v));
  return FromGgufScalar(v.type, v.bits);
}

template <typename H>
StructuralInput FromGgufHeader(H&& header) {
  StructuralInput in;
  in.format = "gguf";
  in.gguf_version = header.version;
  in.metadata.reserve(header.metadata.size());
  for (auto& kv : header.metadata) {
    if constexpr (std::is_lvalue_reference_v<H>) {
      in.metadata.emplace_back(kv.key, FromGguf(kv.value));
    } else {
      in.metadata.emplace_back(kv.key, FromGguf(std::move(kv.value)));
    }
  }
  in.tensors.reserve(header.tensors.size());
  for (const GgufTensorInfo& t : header.tensors) {
    StructuralTensor st;
    st.name = t.name;
    st.dtype = GgmlTypeLowerName(t.type);
    st.shape = t.dims;
    if (!IsQuantized(t.type)) {
      auto bytes = GgmlTensorBytes(t.type, t.dims);
      st.byte_length = bytes.ok() ? *bytes : 0;  // weight-inspect: 0 on overflow
    }
    in.tensors.push_back(std::move(st));
  }
  return in;
}

}  // namespace

StructuralInput StructuralInputFromGguf(const GgufHeader& header) {
  return FromGgufHeader(header);
}

StructuralInput StructuralInputFromGguf(GgufHeader&& header) {
  return FromGgufHeader(std::move(header));
}

}  // namespace blz::formats
