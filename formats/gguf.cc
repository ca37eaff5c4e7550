#include "formats/gguf.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "core/checked.h"
#include "core/file_util.h"

namespace blz::formats {
namespace {

constexpr uint32_t kMaxValueType = 12;

bool IsScalar(GgufType t) { return t != GgufType::kString && t != GgufType::kArray; }

// Smallest encoding of a value of type `t`: the scalar itself, an empty string (its u64
// length) or an empty array (u32 element type + u64 count).
uint64_t MinValueBytes(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 12;
  return GgufScalarSize(t);
}

uint64_t LoadLE(const uint8_t* p, uint32_t size) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < size; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

void AppendLE(std::string* out, uint64_t v, uint32_t size) {
  for (uint32_t i = 0; i < size; ++i) out->push_back(static_cast<char>(uint8_t(v >> (8 * i))));
}

// A printable, bounded rendering of a key or name from the file for error messages.
std::string Quote(std::string_view s) {
  std::string out = "'";
  size_t n = std::min<size_t>(s.size(), 96);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (n < s.size()) out += "...";
  out += "'";
  return out;
}

std::string Hex32(uint32_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 7; i >= 0; --i) s += kHex[(v >> (4 * i)) & 15];
  return s;
}

bool IsRemovedGgmlType(uint32_t id) {
  return id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38);
}

// Reads the GGUF structures from a byte span, tracking the position for error messages.
// Messages do not include the source name; ParseGguf adds it.
class Parser {
 public:
  explicit Parser(ByteSpan bytes) : b_(bytes) {}

  uint64_t pos() const { return pos_; }
  // REQUIRES: n <= left().
  void Skip(uint64_t n) { pos_ += n; }
  uint64_t left() const { return b_.size() - pos_; }

  Status Fail(Code code, uint64_t at, std::string what) const {
    return Status(code, std::move(what) + " (at byte " + std::to_string(at) + ")");
  }

  Status Need(uint64_t n, std::string_view what) const {
    if (n <= left()) return Status::Ok();
    return Fail(Code::kCorruption, pos_,
                std::string(what) + ": needs " + std::to_string(n) +
                    " bytes but the file ends after " + std::to_string(left()));
  }

  Result<uint64_t> Fixed(uint32_t size, std::string_view what) {
    BLZ_RETURN_IF_ERROR(Need(size, what));
    uint64_t v = LoadLE(b_.data() + pos_, size);
    pos_ += size;
    return v;
  }
  Result<uint32_t> U32(std::string_view what) {
    BLZ_ASSIGN_OR_RETURN(uint64_t v, Fixed(4, what));
    return static_cast<uint32_t>(v);
  }
  Result<uint64_t> U64(std::string_view what) { return Fixed(8, what); }

  // A gguf_string: u64 length (<= cap, <= bytes left) + bytes. The view points into the input.
  Result<std::string_view> Str(std::string_view what, uint64_t cap) {
    const uint64_t at = pos_;
    BLZ_ASSIGN_OR_RETURN(uint64_t len, U64(what));
    if (len > cap) {
      return Fail(Code::kTooLarge, at,
                  std::string(what) + ": string length " + std::to_string(len) +
                      " exceeds the cap of " + std::to_string(cap) + " bytes");
    }
    if (len > left()) {
      return Fail(Code::kCorruption, at,
                  std::string(what) + ": string length " + std::to_string(len) +
                      " runs past the end of the file (" + std::to_string(left()) +
                      " bytes left)");
    }
    std::string_view s(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  Result<GgufType> Type(std::string_view what) {
    const uint64_t at = pos_;
    BLZ_ASSIGN_OR_RETURN(uint32_t t, U32(what));
    if (t > kMaxValueType) {
      return Fail(Code::kCorruption, at, "unknown value type " + std::to_string(t));
    }
    return static_cast<GgufType>(t);
  }

  // Reads a value of type `t`. `depth` counts the arrays enclosing this value.
  Status Value(GgufType t, uint32_t depth, GgufValue* out) {
    out->type = t;
    if (IsScalar(t)) {
      const uint64_t at = pos_;
      BLZ_ASSIGN_OR_RETURN(out->bits, Fixed(GgufScalarSize(t), GgufTypeName(t)));
      if (t == GgufType::kBool && out->bits > 1) {
        return Fail(Code::kCorruption, at,
                    "bool value " + std::to_string(out->bits) + " is neither 0 nor 1");
      }
      return Status::Ok();
    }
    if (t == GgufType::kString) {
      BLZ_ASSIGN_OR_RETURN(std::string_view s, Str("string value", kMaxGgufStringBytes));
      out->str.assign(s);
      return Status::Ok();
    }
    // Array: validated element by element, kept as one copy of its elements' bytes.
    uint64_t begin = 0;
    BLZ_RETURN_IF_ERROR(Array(depth, &out->element_type, &out->count, &begin));
    out->raw.assign(reinterpret_cast<const char*>(b_.data() + begin), pos_ - begin);
    return Status::Ok();
  }

  // Reads and checks an array's element type, count and elements (`depth` arrays enclose
  // it), storing nothing per element: `*elements_begin` receives the offset of its first
  // element; the elements end at pos().
  Status Array(uint32_t depth, GgufType* element_type, uint64_t* count,
               uint64_t* elements_begin) {
    const uint64_t at = pos_;
    BLZ_ASSIGN_OR_RETURN(const GgufType et, Type("array element type"));
    BLZ_ASSIGN_OR_RETURN(const uint64_t n, U64("array count"));
    *element_type = et;
    *count = n;
    *elements_begin = pos_;
    if (n > kMaxGgufArrayElements) {
      return Fail(Code::kTooLarge, at,
                  "array of " + std::to_string(n) + " elements exceeds the cap of " +
                      std::to_string(kMaxGgufArrayElements));
    }
    if (et == GgufType::kArray && depth + 1 >= kMaxGgufArrayDepth) {
      return Fail(Code::kTooLarge, at,
                  "arrays nested deeper than " + std::to_string(kMaxGgufArrayDepth) + " levels");
    }
    uint64_t min_bytes = 0;
    if (!CheckedMul(n, MinValueBytes(et), &min_bytes) || min_bytes > left()) {
      return Fail(Code::kCorruption, at,
                  "array of " + std::to_string(n) + " " + std::string(GgufTypeName(et)) +
                      " elements runs past the end of the file (" + std::to_string(left()) +
                      " bytes left)");
    }
    if (IsScalar(et)) {
      const uint8_t* p = b_.data() + pos_;
      if (et == GgufType::kBool) {
        for (uint64_t i = 0; i < n; ++i) {
          if (p[i] > 1) {
            return Fail(Code::kCorruption, pos_ + i,
                        "array element " + std::to_string(i) + ": bool value " +
                            std::to_string(p[i]) + " is neither 0 nor 1");
          }
        }
      }
      pos_ += min_bytes;
      return Status::Ok();
    }
    for (uint64_t i = 0; i < n; ++i) {
      Status st;
      if (et == GgufType::kString) {
        st = Str("string", kMaxGgufStringBytes).status();
      } else {
        GgufType nested_type;
        uint64_t nested_count = 0, nested_begin = 0;
        st = Array(depth + 1, &nested_type, &nested_count, &nested_begin);
      }
      if (!st.ok()) return st.WithContext("array element " + std::to_string(i));
    }
    return Status::Ok();
  }

  // Every byte of [begin, end) must be zero.
  Status CheckZero(uint64_t begin, uint64_t end, std::string_view where) const {
    for (uint64_t i = begin; i < end; ++i) {
      if (b_[i] != 0) {
        return Fail(Code::kCorruption, i,
                    "non-zero padding byte " + std::to_string(b_[i]) + " " + std::string(where));
      }
    }
    return Status::Ok();
  }

 private:
  ByteSpan b_;
  uint64_t pos_ = 0;
};

Status ParseImpl(ByteSpan bytes, GgufMode mode, GgufFile* f) {
  Parser p(bytes);
  f->file_size = bytes.size();
  GgufHeader& h = f->header;

  // Magic.
  if (bytes.size() < 4) {
    return p.Fail(Code::kCorruption, 0,
                  "file of " + std::to_string(bytes.size()) + " bytes is too short for a GGUF "
                  "magic");
  }
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    if (std::memcmp(bytes.data(), "FUGG", 4) == 0) {
      return p.Fail(Code::kUnsupported, 0,
                    "magic reads 'FUGG': a byte-swapped (big-endian) GGUF file; only "
                    "little-endian GGUF is supported");
    }
    std::string m(reinterpret_cast<const char*>(bytes.data()), 4);
    return p.Fail(Code::kCorruption, 0, "bad magic " + Quote(m) + " (expected 'GGUF')");
  }
  p.Skip(4);  // the magic

  // Version.
  BLZ_ASSIGN_OR_RETURN(h.version, p.U32("version"));
  if (h.version == 0) return p.Fail(Code::kCorruption, 4, "GGUF version 0 is invalid");
  if (h.version == 1) {
    return p.Fail(Code::kUnsupported, 4,
                  "GGUF version 1 is not supported (only versions 2 and 3 are)");
  }
  if ((h.version & 0xFFFFu) == 0) {
    const uint32_t swapped = __builtin_bswap32(h.version);
    return p.Fail(Code::kUnsupported, 4,
                  "version field is " + Hex32(h.version) +
                      ": this is a byte-swapped (big-endian) GGUF file (version " +
                      std::to_string(swapped) +
                      " written big-endian); only little-endian GGUF is supported");
  }
  if (h.version > 3) {
    return p.Fail(Code::kUnsupported, 4,
                  "GGUF version " + std::to_string(h.version) +
                      " is not supported (only versions 2 and 3 are)");
  }

  // Counts.
  BLZ_ASSIGN_OR_RETURN(uint64_t n_tensors, p.U64("tensor_count"));
  BLZ_ASSIGN_OR_RETURN(uint64_t n_kv, p.U64("kv_count"));
  if (n_tensors > kMaxGgufTensors) {
    return p.Fail(Code::kTooLarge, 8,
                  "tensor_count " + std::to_string(n_tensors) + " exceeds the cap of " +
                      std::to_string(kMaxGgufTensors));
  }
  if (n_kv > kMaxGgufKvs) {
    return p.Fail(Code::kTooLarge, 16,
                  "kv_count " + std::to_string(n_kv) + " exceeds the cap of " +
                      std::to_string(kMaxGgufKvs));
  }
  // Smallest kv: 8 (key length) + 1 (non-empty key) + 4 (type) + 1 (u8 value).
  // Smallest tensor info: 8 + 1 (name) + 4 (n_dims = 0) + 4 (type) + 8 (offset).
  const uint64_t min_bytes = n_kv * 14 + n_tensors * 25;
  if (min_bytes > p.left()) {
    return p.Fail(Code::kCorruption, 8,
                  "tensor_count " + std::to_string(n_tensors) + " and kv_count " +
                      std::to_string(n_kv) + " need at least " + std::to_string(min_bytes) +
                      " bytes but the file ends after " + std::to_string(p.left()));
  }

  // Metadata.
  f->alignment = kGgufDefaultAlignment;
  h.metadata.resize(n_kv);
  std::unordered_set<std::string_view> keys;
  keys.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = p.pos();
    auto key = p.Str("key of kv " + std::to_string(i), kMaxGgufKeyBytes);
    if (!key.ok()) return key.status();
    if (key->empty()) return p.Fail(Code::kCorruption, at, "kv " + std::to_string(i) + ": empty key");
    if (!keys.insert(*key).second) {
      return p.Fail(Code::kCorruption, at, "duplicate key " + Quote(*key));
    }
    GgufKv& kv = h.metadata[i];
    kv.key.assign(*key);
    auto type = p.Type("value type");
    if (!type.ok()) return type.status().WithContext("key " + Quote(kv.key));
    Status st = p.Value(*type, 0, &kv.value);
    if (!st.ok()) return st.WithContext("key " + Quote(kv.key));
    if (kv.key == "general.alignment") {
      if (kv.value.type != GgufType::kUint32) {
        return p.Fail(Code::kCorruption, at,
                      "general.alignment must be uint32, got " +
                          std::string(GgufTypeName(kv.value.type)));
      }
      if (kv.value.bits == 0 || !std::has_single_bit(kv.value.bits)) {
        return p.Fail(Code::kCorruption, at,
                      "general.alignment " + std::to_string(kv.value.bits) +
                          " is not a non-zero power of two");
      }
      f->alignment = kv.value.bits;
    }
  }

  // Tensor infos.
  h.tensors.resize(n_tensors);
  std::unordered_set<std::string_view> names;
  names.reserve(n_tensors);
  uint64_t expected_offset = 0;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = p.pos();
    const std::string idx = "tensor #" + std::to_string(i);
    auto name = p.Str(idx + " name", kMaxGgufTensorNameBytes);
    if (!name.ok()) return name.status();
    if (name->empty()) return p.Fail(Code::kCorruption, at, idx + ": empty tensor name");
    if (!names.insert(*name).second) {
      return p.Fail(Code::kCorruption, at, "duplicate tensor name " + Quote(*name));
    }
    GgufTensorInfo& t = h.tensors[i];
    t.name.assign(*name);
    const std::string ctx = "tensor " + Quote(t.name);
    const uint64_t dims_at = p.pos();
    BLZ_ASSIGN_OR_RETURN(uint32_t n_dims, p.U32(ctx + " n_dims"));
    if (n_dims > kMaxGgufDims) {
      return p.Fail(Code::kCorruption, dims_at,
                    ctx + ": " + std::to_string(n_dims) + " dimensions (at most " +
                        std::to_string(kMaxGgufDims) + ")");
    }
    t.dims.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      BLZ_ASSIGN_OR_RETURN(t.dims[d], p.U64(ctx + " dims"));
    }
    const uint64_t type_at = p.pos();
    BLZ_ASSIGN_OR_RETURN(uint32_t type_id, p.U32(ctx + " type"));
    const GgmlTypeInfo* info = FindGgmlType(type_id);
    if (info == nullptr) {
      return p.Fail(Code::kUnsupported, type_at,
                    ctx + ": " + (IsRemovedGgmlType(type_id) ? "removed" : "unknown") +
                        " ggml type id " + std::to_string(type_id));
    }
    t.type = info->type;
    auto bytes_or = GgmlTensorBytes(t.type, t.dims);
    if (!bytes_or.ok()) {
      return p.Fail(Code::kCorruption, dims_at, ctx + ": " + bytes_or.status().message());
    }
    t.n_bytes = *bytes_or;
    const uint64_t offset_at = p.pos();
    BLZ_ASSIGN_OR_RETURN(t.offset, p.U64(ctx + " offset"));
    if (t.offset != expected_offset) {
      return p.Fail(Code::kCorruption, offset_at,
                    ctx + ": offset " + std::to_string(t.offset) + ", expected " +
                        std::to_string(expected_offset) +
                        " (the running sum of the preceding tensors' sizes padded to " +
                        std::to_string(f->alignment) + ")");
    }
    uint64_t padded = 0;
    if (!CheckedAlignUp(t.n_bytes, f->alignment, &padded) ||
        !CheckedAdd(expected_offset, padded, &expected_offset)) {
      return p.Fail(Code::kCorruption, offset_at, ctx + ": data section size overflows");
    }
  }
  f->header_bytes = p.pos();
  f->data_bytes = expected_offset;
  if (!CheckedAlignUp(f->header_bytes, f->alignment, &f->data_start)) {
    return p.Fail(Code::kCorruption, f->header_bytes, "data section start overflows");
  }
  uint64_t padded_end_at = 0;
  if (!CheckedAdd(f->data_start, f->data_bytes, &padded_end_at)) {
    return p.Fail(Code::kCorruption, f->header_bytes, "data section end overflows");
  }
  if (mode == GgufMode::kHeaderOnly) return Status::Ok();

  // Data section (kFull).
  const uint64_t size = bytes.size();
  if (h.tensors.empty()) {
    if (size == f->header_bytes) {
      f->padded_end = f->header_bytes == f->data_start;
    } else if (size == f->data_start) {
      BLZ_RETURN_IF_ERROR(p.CheckZero(f->header_bytes, f->data_start, "after the header"));
      f->padded_end = true;
    } else {
      return p.Fail(Code::kCorruption, f->header_bytes,
                    "a GGUF file without tensors must end at byte " +
                        std::to_string(f->header_bytes) + " or " +
                        std::to_string(f->data_start) + " (after the header's padding), but " +
                        "the file has " + std::to_string(size) + " bytes");
    }
    f->data_checked = true;
    return Status::Ok();
  }
  const GgufTensorInfo& last = h.tensors.back();
  const uint64_t unpadded_end = f->data_start + last.offset + last.n_bytes;  // <= padded_end_at
  if (size < unpadded_end) {
    for (size_t i = 0; i < h.tensors.size(); ++i) {
      const uint64_t begin = f->TensorBegin(i);
      const uint64_t end = begin + h.tensors[i].n_bytes;
      if (end > size) {
        return p.Fail(Code::kCorruption, begin,
                      "data truncated: tensor " + Quote(h.tensors[i].name) + " needs bytes [" +
                          std::to_string(begin) + ", " + std::to_string(end) +
                          ") but the file has only " + std::to_string(size) + " bytes");
      }
    }
  }
  if (size != unpadded_end && size != padded_end_at) {
    if (size < padded_end_at) {
      return p.Fail(Code::kCorruption, unpadded_end,
                    "the file ends inside the padding after the last tensor (" +
                        std::to_string(size) + " bytes; expected " +
                        std::to_string(unpadded_end) + " or " + std::to_string(padded_end_at) +
                        ")");
    }
    return p.Fail(Code::kCorruption, padded_end_at,
                  std::to_string(size - padded_end_at) +
                      " trailing bytes after the end of the GGUF data section");
  }
  BLZ_RETURN_IF_ERROR(p.CheckZero(f->header_bytes, f->data_start, "after the header"));
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const uint64_t end = f->TensorBegin(i) + h.tensors[i].n_bytes;
    const uint64_t next = i + 1 < h.tensors.size() ? f->TensorBegin(i + 1) : size;
    BLZ_RETURN_IF_ERROR(
        p.CheckZero(end, next, "after tensor " + Quote(h.tensors[i].name)));
  }
  f->padded_end = size == padded_end_at;
  f->data_checked = true;
  return Status::Ok();
}

// --- Encoding -------------------------------------------------------------------------------

void AppendString(std::string* out, std::string_view s) {
  AppendLE64(out, s.size());
  out->append(s);
}

Status EncodeValue(const GgufValue& v, std::string* out) {
  if (static_cast<uint32_t>(v.type) > kMaxValueType) {
    return InvalidArgument("unknown value type " + std::to_string(static_cast<uint32_t>(v.type)));
  }
  if (IsScalar(v.type)) {
    AppendLE(out, v.bits, GgufScalarSize(v.type));
    return Status::Ok();
  }
  if (v.type == GgufType::kString) {
    AppendString(out, v.str);
    return Status::Ok();
  }
  const GgufType et = v.element_type;
  if (static_cast<uint32_t>(et) > kMaxValueType) {
    return InvalidArgument("unknown array element type " +
                           std::to_string(static_cast<uint32_t>(et)));
  }
  // `raw` must hold exactly `count` elements (their contents are checked by the parse-back).
  bool matches = false;
  if (IsScalar(et)) {
    uint64_t n = 0;
    matches = CheckedMul(v.count, GgufScalarSize(et), &n) && n == v.raw.size();
  } else {
    std::string_view rest = v.raw;
    GgufItemView item;
    uint64_t held = 0;
    while (held < v.count && NextGgufItem(et, &rest, &item)) ++held;
    matches = held == v.count && rest.empty();
  }
  if (!matches) {
    return InvalidArgument("array count " + std::to_string(v.count) +
                           " does not match its elements");
  }
  AppendLE32(out, static_cast<uint32_t>(et));
  AppendLE64(out, v.count);
  out->append(v.raw);
  return Status::Ok();
}

// Encodes the header and parses it back (header-only), returning both.
Status EncodeAndCheck(const GgufHeader& h, std::string* out, GgufFile* parsed) {
  out->clear();
  out->append("GGUF");
  AppendLE32(out, h.version);
  AppendLE64(out, h.tensors.size());
  AppendLE64(out, h.metadata.size());
  for (const GgufKv& kv : h.metadata) {
    AppendString(out, kv.key);
    AppendLE32(out, static_cast<uint32_t>(kv.value.type));
    Status st = EncodeValue(kv.value, out);
    if (!st.ok()) return st.WithContext("key " + Quote(kv.key));
  }
  for (const GgufTensorInfo& t : h.tensors) {
    AppendString(out, t.name);
    AppendLE32(out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) AppendLE64(out, d);
    AppendLE32(out, static_cast<uint32_t>(t.type));
    AppendLE64(out, t.offset);
  }
  Status st = ParseImpl(AsBytes(*out), GgufMode::kHeaderOnly, parsed);
  if (!st.ok()) {
    return InvalidArgument("refusing to write a GGUF header the reader rejects: " +
                           st.ToString());
  }
  return Status::Ok();
}

Status WriteZeros(uint64_t n, const GgufSink& sink) {
  static constexpr std::array<uint8_t, 4096> kZeros{};
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, kZeros.size());
    BLZ_RETURN_IF_ERROR(sink(ByteSpan(kZeros.data(), k)));
    n -= k;
  }
  return Status::Ok();
}

}  // namespace

Result<GgufFile> ParseGguf(ByteSpan bytes, GgufMode mode, std::string_view source) {
  GgufFile f;
  Status st = ParseImpl(bytes, mode, &f);
  if (!st.ok()) return st.WithContext(source);
  return f;
}

Result<GgufReader> GgufReader::Open(const std::string& path, GgufMode mode) {
  GgufReader r;
  BLZ_ASSIGN_OR_RETURN(r.map_, MappedFile::Open(path));
  BLZ_ASSIGN_OR_RETURN(r.file_, ParseGguf(r.map_.bytes(), mode, path));
  return r;
}

ByteSpan GgufReader::TensorData(size_t i) const {
  const uint64_t begin = file_.TensorBegin(i);
  const uint64_t n = file_.header.tensors[i].n_bytes;
  if (begin > map_.size() || n > map_.size() - begin) return {};  // header-only, truncated
  return map_.bytes().subspan(begin, n);
}

Status AssignGgufOffsets(GgufHeader* header) {
  uint64_t alignment = kGgufDefaultAlignment;
  if (const GgufValue* a = FindGgufValue(*header, "general.alignment")) {
    if (a->type != GgufType::kUint32 || a->bits == 0 || !std::has_single_bit(a->bits)) {
      return InvalidArgument("general.alignment must be a uint32 non-zero power of two");
    }
    alignment = a->bits;
  }
  uint64_t offset = 0;
  for (GgufTensorInfo& t : header->tensors) {
    auto bytes = GgmlTensorBytes(t.type, t.dims);
    if (!bytes.ok()) {
      return InvalidArgument("tensor " + Quote(t.name) + ": " + bytes.status().message());
    }
    t.n_bytes = *bytes;
    t.offset = offset;
    uint64_t padded = 0;
    if (!CheckedAlignUp(t.n_bytes, alignment, &padded) ||
        !CheckedAdd(offset, padded, &offset)) {
      return InvalidArgument("tensor " + Quote(t.name) + ": data section size overflows");
    }
  }
  return Status::Ok();
}

Result<std::string> EncodeGgufHeader(const GgufHeader& header) {
  std::string out;
  GgufFile parsed;
  BLZ_RETURN_IF_ERROR(EncodeAndCheck(header, &out, &parsed));
  return out;
}

Status WriteGguf(const GgufHeader& header, std::span<const ByteSpan> tensor_data,
                 const GgufWriteOptions& options, const GgufSink& sink) {
  std::string head;
  GgufFile f;
  BLZ_RETURN_IF_ERROR(EncodeAndCheck(header, &head, &f));
  const auto& tensors = f.header.tensors;
  if (tensor_data.size() != tensors.size()) {
    return InvalidArgument("GGUF writer: " + std::to_string(tensor_data.size()) +
                           " tensor data spans for " + std::to_string(tensors.size()) +
                           " tensors");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensor_data[i].size() != tensors[i].n_bytes) {
      return InvalidArgument("GGUF writer: tensor " + Quote(tensors[i].name) + " has " +
                             std::to_string(tensor_data[i].size()) + " bytes of data, expected " +
                             std::to_string(tensors[i].n_bytes));
    }
  }
  BLZ_RETURN_IF_ERROR(sink(AsBytes(head)));
  if (!tensors.empty() || options.pad_end) {
    BLZ_RETURN_IF_ERROR(WriteZeros(f.data_start - f.header_bytes, sink));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    BLZ_RETURN_IF_ERROR(sink(tensor_data[i]));
    const uint64_t end = tensors[i].offset + tensors[i].n_bytes;
    const uint64_t next = i + 1 < tensors.size() ? tensors[i + 1].offset : f.data_bytes;
    if (i + 1 < tensors.size() || options.pad_end) {
      BLZ_RETURN_IF_ERROR(WriteZeros(next - end, sink));
    }
  }
  return Status::Ok();
}

Status WriteGgufFile(const std::string& path, const GgufHeader& header,
                     std::span<const ByteSpan> tensor_data, const GgufWriteOptions& options) {
  BLZ_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  BLZ_RETURN_IF_ERROR(WriteGguf(header, tensor_data, options,
                                [&file](ByteSpan b) { return file.Append(b); }));
  return file.Commit(/*no_replace=*/true);
}

}  // namespace blz::formats
