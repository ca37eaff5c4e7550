// The .wdelta container: writer, validating reader and parent_hash (formats/wdelta.h,
// docs/wdelta.md).
#include "formats/wdelta.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "core/bytes.h"
#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/mmap_file.h"
#include "formats/json_strict.h"

namespace blz::formats {

namespace {

constexpr uint64_t kPreamble = 15;  // magic + version + header length
constexpr uint64_t kTrailer = 32;   // SHA-256

bool IsKnownStrategy(std::string_view s) {
  return std::find(std::begin(kWdeltaStrategies), std::end(kWdeltaStrategies), s) !=
         std::end(kWdeltaStrategies);
}

// --- Python json.dumps(separators=(",", ":"), ensure_ascii=True) ------------------------------

void AppendHex4(std::string* out, uint32_t u) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\u");
  for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(u >> shift) & 0xF]);
}

// Decodes one UTF-8 sequence at s[*i] (nlohmann strings are valid UTF-8 when they came from
// its parser; strings built in code are checked here). false on invalid UTF-8.
bool NextCodePoint(std::string_view s, size_t* i, uint32_t* cp) {
  const auto b0 = static_cast<uint8_t>(s[*i]);
  int len = 0;
  uint32_t v = 0;
  if (b0 < 0x80) {
    *cp = b0;
    *i += 1;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    v = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    v = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    v = b0 & 0x07;
  } else {
    return false;
  }
  if (*i + len > s.size()) return false;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[*i + k]);
    if ((b & 0xC0) != 0x80) return false;
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *cp = v;
  *i += len;
  return true;
}

bool AppendPyString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    if (!NextCodePoint(s, &i, &cp)) return false;
    switch (cp) {
      case '"': out->append("\\\""); continue;
      case '\\': out->append("\\\\"); continue;
      case '\b': out->append("\\b"); continue;
      case '\f': out->append("\\f"); continue;
      case '\n': out->append("\\n"); continue;
      case '\r': out->append("\\r"); continue;
      case '\t': out->append("\\t"); continue;
      default: break;
    }
    if (cp >= 0x20 && cp <= 0x7E) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x10000) {
      AppendHex4(out, cp);
    } else {
      const uint32_t v = cp - 0x10000;
      AppendHex4(out, 0xD800 | (v >> 10));
      AppendHex4(out, 0xDC00 | (v & 0x3FF));
    }
  }
  out->push_back('"');
  return true;
}

}  // namespace

// Python's float repr: the shortest digits that round-trip (std::to_chars gives the same
// digits as Python's dtoa mode 0: shortest, nearest to the value), in fixed notation when the
// decimal exponent e satisfies -4 <= e < 16 ("0.0001", "1e-05", "1234567890123456.0",
// "1e+16"), with ".0" on integral values.
std::string PythonFloatRepr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::scientific);
  std::string sci(buf.data(), res.ptr);
  std::string out;
  size_t p = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    p = 1;
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = p; k < epos; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  const int exp = std::stoi(sci.substr(epos + 1));
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    } else {
      const auto int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_len);
        out.push_back('.');
        out += digits.substr(int_len);
      }
    }
  } else {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    out.push_back('e');
    out.push_back(exp < 0 ? '-' : '+');
    const std::string e = std::to_string(exp < 0 ? -exp : exp);
    if (e.size() < 2) out.push_back('0');
    out += e;
  }
  return out;
}

namespace {

// Serializes like Python json.dumps(v, separators=(",", ":")) (ensure_ascii, allow_nan off:
// blz never writes NaN or Infinity). false on a non-finite number or invalid UTF-8.
bool AppendPyJson(std::string* out, const nlohmann::ordered_json& v) {
  using V = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case V::null: out->append("null"); return true;
    case V::boolean: out->append(v.get<bool>() ? "true" : "false"); return true;
    case V::number_integer: out->append(std::to_string(v.get<int64_t>())); return true;
    case V::number_unsigned: out->append(std::to_string(v.get<uint64_t>())); return true;
    case V::number_float: {
      const double d = v.get<double>();
      if (!std::isfinite(d)) return false;
      out->append(PythonFloatRepr(d));
      return true;
    }
    case V::string: return AppendPyString(out, v.get_ref<const std::string&>());
    case V::array: {
      out->push_back('[');
      bool first = true;
      for (const auto& e : v) {
        if (!first) out->push_back(',');
        first = false;
        if (!AppendPyJson(out, e)) return false;
      }
      out->push_back(']');
      return true;
    }
    case V::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, value] : v.items()) {
        if (!first) out->push_back(',');
        first = false;
        if (!AppendPyString(out, key)) return false;
        out->push_back(':');
        if (!AppendPyJson(out, value)) return false;
      }
      out->push_back('}');
      return true;
    }
    default: return false;  // binary / discarded: not JSON
  }
}

}  // namespace

std::string PythonJsonDumps(const nlohmann::ordered_json& value, bool* ok) {
  std::string out;
  *ok = AppendPyJson(&out, value);
  return out;
}

Result<uint64_t> WdeltaItemSize(std::string_view dtype) {
  if (dtype == "float16") return uint64_t{2};
  if (dtype == "float32" || dtype == "int32") return uint64_t{4};
  if (dtype == "int64") return uint64_t{8};
  if (dtype == "uint8") return uint64_t{1};
  return Status(Code::kUnsupported, "dtype '" + std::string(dtype) +
                                        "' is not one of float16, float32, uint8, int32, int64");
}

namespace {

// product(shape) x itemsize, kInvalidArgument on overflow.
Result<uint64_t> ArrayBytes(std::string_view dtype, const std::vector<uint64_t>& shape) {
  auto item = WdeltaItemSize(dtype);
  if (!item.ok()) return item.status();
  uint64_t n = *item;
  for (uint64_t d : shape) {
    if (!CheckedMul(n, d, &n)) {
      return Status(Code::kInvalidArgument, "array byte count overflows 64 bits");
    }
  }
  return n;
}

std::string RecordHead(const std::string& tensor, const std::string& field,
                       const WdeltaArray& a) {
  std::string h;
  AppendLE32(&h, static_cast<uint32_t>(tensor.size()));
  h += tensor;
  AppendLE32(&h, static_cast<uint32_t>(field.size()));
  h += field;
  AppendLE32(&h, static_cast<uint32_t>(a.dtype.size()));
  h += a.dtype;
  AppendLE32(&h, static_cast<uint32_t>(a.shape.size()));
  for (uint64_t d : a.shape) AppendLE64(&h, d);
  AppendLE64(&h, a.bytes.size());
  return h;
}

Status CheckArrayOut(const std::string& tensor, const std::string& field, const WdeltaArray& a) {
  const std::string where = "tensor '" + tensor + "' field '" + field + "'";
  if (tensor.size() > kWdeltaMaxNameBytes || field.size() > kWdeltaMaxFieldBytes) {
    return Status(Code::kInvalidArgument, where + ": name longer than the reader's cap");
  }
  if (a.shape.size() > kWdeltaMaxNdim) {
    return Status(Code::kInvalidArgument, where + ": more than 8 dimensions");
  }
  auto bytes = ArrayBytes(a.dtype, a.shape);
  if (!bytes.ok()) return Status(Code::kInvalidArgument, where + ": " + bytes.status().message());
  if (*bytes != a.bytes.size()) {
    return Status(Code::kInvalidArgument, where + ": " + std::to_string(a.bytes.size()) +
                                              " bytes, dtype x shape needs " +
                                              std::to_string(*bytes));
  }
  return Status::Ok();
}

}  // namespace

Status WriteWdelta(const std::string& path, const WdeltaFileOut& file) {
  if (file.version < kWdeltaMinVersion || file.version > kWdeltaMaxVersion) {
    return Status(Code::kInvalidArgument,
                  "wdelta version " + std::to_string(file.version) + " is not 1 or 2");
  }
  if (!IsLowerHex(file.parent_hash, 64)) {
    return Status(Code::kInvalidArgument, "parent_hash is not 64 lower-case hex digits");
  }
  if (!IsKnownStrategy(file.strategy) && file.strategy != "auto") {
    return Status(Code::kInvalidArgument, "unknown top-level strategy '" + file.strategy + "'");
  }
  if (!file.extra.is_object()) {
    return Status(Code::kInvalidArgument, "extra header keys must be an object");
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["parent_hash"] = file.parent_hash;
  header["strategy"] = file.strategy;
  header["tensors"] = nlohmann::ordered_json::object();
  auto& tensors = header["tensors"];
  std::unordered_set<std::string> names;  // tensors' lookups are linear: O(n^2) for n tensors
  std::unordered_map<std::string, int> seen_records;
  for (const auto& t : file.tensors) {
    const std::string where = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second) return Status(Code::kInvalidArgument, where + " twice");
    if (!t.meta.is_object() || !t.meta.contains("strategy") || !t.meta.contains("shape") ||
        !t.meta.contains("dtype")) {
      return Status(Code::kInvalidArgument, where + ": meta lacks strategy, shape or dtype");
    }
    if (!t.meta["strategy"].is_string() ||
        !IsKnownStrategy(t.meta["strategy"].get_ref<const std::string&>())) {
      return Status(Code::kInvalidArgument, where + ": unknown strategy");
    }
    nlohmann::ordered_json obj = t.meta;
    for (const auto& [field, array] : t.fields) {
      if (obj.contains(field)) {
        return Status(Code::kInvalidArgument, where + ": field '" + field + "' is also a meta key");
      }
      if (Status s = CheckArrayOut(t.name, field, array); !s.ok()) return s;
      obj[field] = nlohmann::ordered_json{{"_ref", field}};
      seen_records[std::to_string(t.name.size()) + ":" + t.name + field] = 1;
    }
    AppendMember(&tensors, t.name, std::move(obj));
  }
  for (const auto& [key, value] : file.extra.items()) {
    if (header.contains(key)) {
      return Status(Code::kInvalidArgument, "extra header key '" + key + "' is reserved");
    }
    header[key] = value;
  }
  for (const auto& [id, array] : file.extra_records) {
    if (names.contains(id.first)) {
      return Status(Code::kInvalidArgument,
                    "extra record of tensor '" + id.first + "', which is in the header");
    }
    if (Status s = CheckArrayOut(id.first, id.second, array); !s.ok()) return s;
    if (!seen_records.emplace(std::to_string(id.first.size()) + ":" + id.first + id.second, 1)
             .second) {
      return Status(Code::kInvalidArgument,
                    "record ('" + id.first + "', '" + id.second + "') twice");
    }
  }
  bool ok = false;
  const std::string json = PythonJsonDumps(header, &ok);
  if (!ok) {
    return Status(Code::kInvalidArgument,
                  "header holds a non-finite number or a string that is not UTF-8");
  }
  if (json.size() > kWdeltaMaxHeaderBytes) {
    return Status(Code::kInvalidArgument, "header of " + std::to_string(json.size()) +
                                              " bytes exceeds the reader's cap");
  }

  auto out = AtomicFile::Create(path);
  if (!out.ok()) return out.status();
  Sha256 sha;
  auto append = [&](ByteSpan b) -> Status {
    sha.Update(b);
    return out->Append(b);
  };
  std::string pre(kWdeltaMagic);
  AppendLE32(&pre, file.version);
  AppendLE32(&pre, static_cast<uint32_t>(json.size()));
  pre += json;
  if (Status s = append(AsBytes(std::string_view(pre))); !s.ok()) return s;
  auto write_record = [&](const std::string& tensor, const std::string& field,
                          const WdeltaArray& a) -> Status {
    const std::string head = RecordHead(tensor, field, a);
    if (Status s = append(AsBytes(std::string_view(head))); !s.ok()) return s;
    return append(ByteSpan(a.bytes.data(), a.bytes.size()));
  };
  for (const auto& t : file.tensors) {
    for (const auto& [field, array] : t.fields) {
      if (Status s = write_record(t.name, field, array); !s.ok()) return s;
    }
  }
  for (const auto& [id, array] : file.extra_records) {
    if (Status s = write_record(id.first, id.second, array); !s.ok()) return s;
  }
  const Sha256Bytes digest = sha.Finish();
  if (Status s = out->Append(ByteSpan(digest.data(), digest.size())); !s.ok()) return s;
  return out->Commit();
}

// --- Reader ------------------------------------------------------------------------------------

struct WdeltaReader::Impl {
  struct Record {
    std::string dtype;
    std::vector<uint64_t> shape;
    uint64_t data_offset = 0;
    uint64_t nbytes = 0;
  };
  std::string path;
  MappedFile map;
  uint32_t version = 0;
  std::string parent_hash;
  std::string strategy;
  nlohmann::ordered_json header;
  std::vector<std::string> names;
  std::unordered_map<std::string, Record> records;       // RecordKey -> record
  std::unordered_map<std::string, uint64_t> tensor_bytes;  // tensor -> its records' bytes
  // tensor -> its header object (ordered_json's own find is a linear scan)
  std::unordered_map<std::string_view, const nlohmann::ordered_json*> metas;

  static std::string RecordKey(std::string_view tensor, std::string_view field) {
    std::string k = std::to_string(tensor.size());
    k.push_back(':');
    k.append(tensor);
    k.append(field);
    return k;
  }
};

namespace {

Status Corrupt(const std::string& path, uint64_t offset, const std::string& what) {
  return Status(Code::kCorruption, path + ": byte " + std::to_string(offset) + ": " + what);
}

// Reads a u32-length-prefixed string at *pos (bounded by `end` and `cap`).
Status ReadLenString(const std::string& path, const uint8_t* base, uint64_t* pos, uint64_t end,
                     uint64_t cap, const char* what, std::string* out) {
  if (end - *pos < 4) {
    return Corrupt(path, *pos, std::string("record truncated: no room for the ") + what +
                                   " length");
  }
  const uint32_t len = LoadLE32(base + *pos);
  if (len > cap) {
    return Corrupt(path, *pos, std::string("record ") + what + " length " + std::to_string(len) +
                                   " exceeds the cap of " + std::to_string(cap));
  }
  if (end - *pos - 4 < len) {
    return Corrupt(path, *pos, std::string("record truncated: ") + what + " of " +
                                   std::to_string(len) + " bytes runs past the records' end");
  }
  out->assign(reinterpret_cast<const char*>(base + *pos + 4), len);
  if (FindInvalidUtf8(*out).has_value()) {
    return Corrupt(path, *pos + 4, std::string("record ") + what + " is not UTF-8");
  }
  *pos += 4 + len;
  return Status::Ok();
}

}  // namespace

Result<WdeltaReader> WdeltaReader::Open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  auto map = MappedFile::Open(path);
  if (!map.ok()) return map.status();
  impl->map = std::move(*map);
  const uint8_t* base = impl->map.data();
  const uint64_t size = impl->map.size();
  if (size < kPreamble + kTrailer) {
    return Corrupt(path, 0, "file of " + std::to_string(size) +
                                " bytes is shorter than a .wdelta preamble and checksum (47)");
  }
  if (std::memcmp(base, kWdeltaMagic.data(), kWdeltaMagic.size()) != 0) {
    return Corrupt(path, 0, "bad magic (not a .wdelta file)");
  }
  impl->version = LoadLE32(base + 7);
  if (impl->version < kWdeltaMinVersion || impl->version > kWdeltaMaxVersion) {
    return Status(Code::kUnsupported, path + ": byte 7: unsupported .wdelta version " +
                                          std::to_string(impl->version) + " (supported: 1, 2)");
  }
  const uint64_t header_len = LoadLE32(base + 11);
  const uint64_t content_end = size - kTrailer;
  if (header_len > kWdeltaMaxHeaderBytes) {
    return Corrupt(path, 11, "header length " + std::to_string(header_len) +
                                 " exceeds the cap of " + std::to_string(kWdeltaMaxHeaderBytes));
  }
  if (kPreamble + header_len > content_end) {
    return Corrupt(path, 11, "header length " + std::to_string(header_len) +
                                 " runs past the end of the file (" + std::to_string(size) +
                                 " bytes with the 32-byte checksum)");
  }
  const std::string_view text(reinterpret_cast<const char*>(base + kPreamble), header_len);
  {
    // Strict (no duplicate keys), in key order, in O(n log n): nlohmann's own ordered_json
    // parse looks every key up linearly, O(n^2) in the tensor count.
    auto strict = ParseJsonStrictOrdered(text, path + ": header", kPreamble);
    if (!strict.ok()) return strict.status();
    impl->header = std::move(*strict);
  }
  const auto& h = impl->header;
  if (!h.is_object()) return Corrupt(path, kPreamble, "header is not a JSON object");
  for (const char* key : {"parent_hash", "strategy"}) {
    if (!h.contains(key) || !h[key].is_string()) {
      return Corrupt(path, kPreamble, std::string("header lacks the string \"") + key + "\"");
    }
  }
  if (!h.contains("tensors") || !h["tensors"].is_object()) {
    return Corrupt(path, kPreamble, "header lacks the object \"tensors\"");
  }
  impl->parent_hash = h["parent_hash"].get<std::string>();
  impl->strategy = h["strategy"].get<std::string>();
  impl->names.reserve(h["tensors"].size());
  impl->metas.reserve(h["tensors"].size());
  for (const auto& [name, meta] : h["tensors"].get_ref<const nlohmann::ordered_json::object_t&>()) {
    if (!meta.is_object()) {
      return Corrupt(path, kPreamble, "header tensor '" + name + "' is not an object");
    }
    impl->names.push_back(name);
    impl->metas.emplace(name, &meta);  // the header is not modified after this
  }

  // Records.
  uint64_t pos = kPreamble + header_len;
  while (pos < content_end) {
    const uint64_t start = pos;
    std::string tensor;
    std::string field;
    Impl::Record rec;
    if (Status s = ReadLenString(path, base, &pos, content_end, kWdeltaMaxNameBytes,
                                 "tensor name", &tensor);
        !s.ok()) {
      return s;
    }
    if (Status s = ReadLenString(path, base, &pos, content_end, kWdeltaMaxFieldBytes,
                                 "field name", &field);
        !s.ok()) {
      return s;
    }
    const std::string where = "record ('" + tensor + "', '" + field + "')";
    if (Status s = ReadLenString(path, base, &pos, content_end, kWdeltaMaxDtypeBytes, "dtype",
                                 &rec.dtype);
        !s.ok()) {
      return s;
    }
    if (content_end - pos < 4) return Corrupt(path, pos, where + " truncated: no ndim");
    const uint32_t ndim = LoadLE32(base + pos);
    if (ndim > kWdeltaMaxNdim) {
      return Corrupt(path, pos, where + ": ndim " + std::to_string(ndim) + " exceeds " +
                                    std::to_string(kWdeltaMaxNdim));
    }
    pos += 4;
    if (content_end - pos < 8ull * ndim + 8) {
      return Corrupt(path, pos, where + " truncated: no room for its shape and byte count");
    }
    for (uint32_t i = 0; i < ndim; ++i) rec.shape.push_back(LoadLE64(base + pos + 8ull * i));
    pos += 8ull * ndim;
    rec.nbytes = LoadLE64(base + pos);
    const uint64_t nbytes_at = pos;
    pos += 8;
    if (rec.nbytes > content_end - pos) {
      return Corrupt(path, nbytes_at, where + ": " + std::to_string(rec.nbytes) +
                                          " data bytes run past the records' end (" +
                                          std::to_string(content_end - pos) + " bytes left)");
    }
    auto expect = ArrayBytes(rec.dtype, rec.shape);
    if (!expect.ok()) {
      return Status(expect.status().code() == Code::kUnsupported ? Code::kUnsupported
                                                                  : Code::kCorruption,
                    path + ": byte " + std::to_string(start) + ": " + where + ": " +
                        expect.status().message());
    }
    if (*expect != rec.nbytes) {
      return Corrupt(path, nbytes_at, where + ": " + std::to_string(rec.nbytes) +
                                          " bytes, but dtype " + rec.dtype + " x shape needs " +
                                          std::to_string(*expect));
    }
    rec.data_offset = pos;
    pos += rec.nbytes;
    if (!impl->records.emplace(Impl::RecordKey(tensor, field), std::move(rec)).second) {
      return Corrupt(path, start, where + " appears twice");
    }
    impl->tensor_bytes[tensor] += pos - start;
  }

  // Checksum.
  const Sha256Bytes actual = Sha256Of(ByteSpan(base, content_end));
  if (std::memcmp(actual.data(), base + content_end, kTrailer) != 0) {
    return Status(Code::kDigestMismatch,
                  path + ": byte " + std::to_string(content_end) +
                      ": SHA-256 checksum mismatch (the file is corrupted or truncated)");
  }

  // Semantics: strategies, meta shape / dtype, "_ref" records.
  if (!IsKnownStrategy(impl->strategy) && impl->strategy != "auto") {
    return Status(Code::kUnsupported,
                  path + ": byte " + std::to_string(kPreamble) + ": unknown strategy '" +
                      impl->strategy + "'");
  }
  for (const auto& [name, meta] : h["tensors"].get_ref<const nlohmann::ordered_json::object_t&>()) {
    const std::string where = path + ": byte " + std::to_string(kPreamble) + ": tensor '" +
                              name + "'";
    if (!meta.contains("strategy") || !meta["strategy"].is_string()) {
      return Status(Code::kCorruption, where + ": no string \"strategy\"");
    }
    if (!IsKnownStrategy(meta["strategy"].get_ref<const std::string&>())) {
      return Status(Code::kUnsupported,
                    where + ": unknown strategy '" + meta["strategy"].get<std::string>() + "'");
    }
    if (!meta.contains("shape") || !meta["shape"].is_array() ||
        meta["shape"].size() > kWdeltaMaxNdim) {
      return Status(Code::kCorruption, where + ": \"shape\" is not an array of at most 8 sizes");
    }
    for (const auto& d : meta["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return Status(Code::kCorruption, where + ": \"shape\" holds a non-size");
      }
    }
    if (!meta.contains("dtype") || !meta["dtype"].is_string()) {
      return Status(Code::kCorruption, where + ": no string \"dtype\"");
    }
    for (const auto& [key, value] : meta.items()) {
      if (!value.is_object() || !value.contains("_ref")) continue;
      if (!value["_ref"].is_string()) {
        return Status(Code::kCorruption, where + " field '" + key + "': \"_ref\" is not a string");
      }
      const auto& ref = value["_ref"].get_ref<const std::string&>();
      if (!impl->records.contains(Impl::RecordKey(name, ref))) {
        return Status(Code::kCorruption,
                      where + " field '" + key + "': no record ('" + name + "', '" + ref + "')");
      }
    }
  }
  WdeltaReader reader;
  reader.impl_ = std::move(impl);
  return reader;
}

const std::string& WdeltaReader::path() const { return impl_->path; }
uint32_t WdeltaReader::version() const { return impl_->version; }
const std::string& WdeltaReader::parent_hash() const { return impl_->parent_hash; }
const std::string& WdeltaReader::strategy() const { return impl_->strategy; }
const nlohmann::ordered_json& WdeltaReader::header() const { return impl_->header; }
const std::vector<std::string>& WdeltaReader::names() const { return impl_->names; }
uint64_t WdeltaReader::file_size() const { return impl_->map.size(); }

Result<const nlohmann::ordered_json*> WdeltaReader::Meta(std::string_view name) const {
  auto it = impl_->metas.find(name);
  if (it == impl_->metas.end()) {
    return Status(Code::kNotFound, impl_->path + ": no tensor '" + std::string(name) + "'");
  }
  return it->second;
}

Result<WdeltaArrayView> WdeltaReader::Field(std::string_view tensor, std::string_view field) const {
  auto it = impl_->records.find(Impl::RecordKey(tensor, field));
  if (it == impl_->records.end()) {
    return Status(Code::kNotFound, impl_->path + ": no record ('" + std::string(tensor) + "', '" +
                                       std::string(field) + "')");
  }
  const auto& r = it->second;
  return WdeltaArrayView{r.dtype, r.shape,
                         ByteSpan(impl_->map.data() + r.data_offset, r.nbytes)};
}

uint64_t WdeltaReader::TensorBytes(std::string_view tensor) const {
  auto it = impl_->tensor_bytes.find(std::string(tensor));
  return it == impl_->tensor_bytes.end() ? 0 : it->second;
}

// --- parent_hash -------------------------------------------------------------------------------

Result<std::string> WdeltaParentHash(const ModelTensors& base,
                                     const std::vector<std::string>& names) {
  std::unordered_map<std::string_view, const ValueTensor*> by_name;
  for (const auto& t : base.tensors()) by_name.emplace(t.name, &t);
  Sha256 sha;
  for (const auto& name : names) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return Status(Code::kNotFound, base.path() + ": the base has no tensor '" + name + "'");
    }
    sha.Update(std::string_view(name));
    sha.Update(it->second->data);
  }
  return sha.FinishHex();
}

std::vector<std::string> WdeltaSortedOrder(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());  // byte order == Python's code point order for UTF-8
  return names;
}

std::vector<std::string> WdeltaLegacyOrder(const ModelTensors& base,
                                           const std::vector<std::string>& names) {
  std::unordered_map<std::string_view, const std::string*> file_of;
  for (const auto& t : base.tensors()) file_of.emplace(t.name, &t.file);
  // Groups in order of each file's first appearance in `names`; names sorted within a group.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const auto& name : names) {
    auto it = file_of.find(name);
    const std::string file = it == file_of.end() ? std::string() : *it->second;
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& p) { return p.first == file; });
    if (g == groups.end()) {
      groups.emplace_back(file, std::vector<std::string>{});
      g = groups.end() - 1;
    }
    g->second.push_back(name);
  }
  std::vector<std::string> out;
  out.reserve(names.size());
  for (auto& [file, members] : groups) {
    std::sort(members.begin(), members.end());
    for (auto& m : members) out.push_back(std::move(m));
  }
  return out;
}

}  // namespace blz::formats
