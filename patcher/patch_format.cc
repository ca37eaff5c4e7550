// The .blzpatch container header. Interface: patcher/patch_format.h; spec: docs/patch-format.md.
#include "patcher/patch_format.h"

#include <cstring>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/digest.h"

namespace blz::patcher::internal {
namespace {

using Json = nlohmann::json;
using Kind = formats::ArchivePiece::Kind;

// ---- writing --------------------------------------------------------------------------------

void AppendU64(std::string* out, uint64_t v) { out->append(std::to_string(v)); }

void AppendChunks(std::string* out, const std::vector<PatchChunk>& chunks) {
  out->push_back('[');
  for (size_t i = 0; i < chunks.size(); ++i) {
    const PatchChunk& c = chunks[i];
    if (i > 0) out->push_back(',');
    out->push_back('[');
    AppendU64(out, uint64_t(c.codec));
    out->push_back(',');
    AppendU64(out, c.offset);
    out->push_back(',');
    AppendU64(out, c.length);
    out->push_back(',');
    AppendU64(out, c.size);
    out->append(",\"");
    out->append(Hex64(c.xxh3));
    out->append("\"]");
  }
  out->push_back(']');
}

// A JSON string literal exactly as nlohmann::json::dump writes it (so that parsing and
// re-serializing a canonical header gives the same bytes).
Result<std::string> JsonString(const std::string& s) {
  try {
    return Json(s).dump(-1, ' ', false, Json::error_handler_t::strict);
  } catch (const Json::exception& e) {
    return InvalidArgument("string is not valid UTF-8: " + std::string(e.what()));
  }
}

// ---- reading --------------------------------------------------------------------------------

class HeaderReader {
 public:
  explicit HeaderReader(std::string_view what) : what_(what) {}

  Status Bad(const std::string& field, const std::string& msg) const {
    return Corruption(std::string(what_) + ": header (at byte offset 24): field '" + field +
                      "': " + msg);
  }

  // Checks that `v` is an object with exactly `keys`.
  Status ExpectObject(const Json& v, const std::string& field,
                      std::initializer_list<const char*> keys) const {
    if (!v.is_object()) return Bad(field, "not an object");
    for (const char* k : keys) {
      if (!v.contains(k)) return Bad(field, std::string("missing key '") + k + "'");
    }
    if (v.size() != keys.size()) {
      for (const auto& [k, unused] : v.items()) {
        bool known = false;
        for (const char* want : keys) known = known || k == want;
        if (!known) return Bad(field, "unexpected key '" + k.substr(0, 64) + "'");
      }
    }
    return Status::Ok();
  }

  Result<uint64_t> U64(const Json& v, const std::string& field) const {
    if (!v.is_number_unsigned()) return Bad(field, "not a non-negative integer");
    return v.get<uint64_t>();
  }

  Result<uint32_t> U32(const Json& v, const std::string& field) const {
    BLZ_ASSIGN_OR_RETURN(uint64_t x, U64(v, field));
    if (x > UINT32_MAX) return Bad(field, std::to_string(x) + " is larger than 2^32-1");
    return uint32_t(x);
  }

  Result<std::string> String(const Json& v, const std::string& field) const {
    if (!v.is_string()) return Bad(field, "not a string");
    return v.get<std::string>();
  }

  Result<std::string> Digest(const Json& v, const std::string& field) const {
    BLZ_ASSIGN_OR_RETURN(std::string s, String(v, field));
    if (!ParseDigest(s).ok()) {
      return Bad(field, "'" + s.substr(0, 80) + "' is not of the form sha256:<64 lower-case hex>");
    }
    return s;
  }

  // A chunk list covering a span: every chunk kChunkBytes except the last (1..kChunkBytes).
  // `payload_pos` is the running payload offset (advanced here); `total` receives the sum of
  // the chunk sizes.
  Result<std::vector<PatchChunk>> Chunks(const Json& v, const std::string& field,
                                         uint64_t* payload_pos, uint64_t* total) const {
    if (!v.is_array()) return Bad(field, "not an array");
    std::vector<PatchChunk> out;
    out.reserve(v.size());
    *total = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string f = field + "[" + std::to_string(i) + "]";
      const Json& c = v[i];
      if (!c.is_array() || c.size() != 5) {
        return Bad(f, "not an array [codec, offset, length, size, xxh3]");
      }
      PatchChunk chunk;
      BLZ_ASSIGN_OR_RETURN(uint64_t codec_id, U64(c[0], f + "[0] (codec)"));
      if (codec_id > 255) return Bad(f + "[0] (codec)", "unknown codec id " + std::to_string(codec_id));
      Result<Codec> codec = CodecFromId(uint8_t(codec_id));
      if (!codec.ok()) return Bad(f + "[0] (codec)", codec.status().message());
      chunk.codec = *codec;
      BLZ_ASSIGN_OR_RETURN(chunk.offset, U64(c[1], f + "[1] (offset)"));
      BLZ_ASSIGN_OR_RETURN(chunk.length, U64(c[2], f + "[2] (length)"));
      BLZ_ASSIGN_OR_RETURN(chunk.size, U64(c[3], f + "[3] (size)"));
      BLZ_ASSIGN_OR_RETURN(std::string hex, String(c[4], f + "[4] (xxh3)"));
      if (!IsLowerHex(hex, 16)) return Bad(f + "[4] (xxh3)", "not 16 lower-case hex digits");
      BLZ_ASSIGN_OR_RETURN(chunk.xxh3, ParseHex64(hex));
      if (chunk.size == 0 || chunk.size > kChunkBytes) {
        return Bad(f + "[3] (size)", std::to_string(chunk.size) + " is not in 1.." +
                                         std::to_string(kChunkBytes));
      }
      if (i + 1 < v.size() && chunk.size != kChunkBytes) {
        return Bad(f + "[3] (size)", "only the last chunk of a list may be shorter than " +
                                         std::to_string(kChunkBytes) + " bytes");
      }
      if (chunk.codec == Codec::kIdentical && chunk.length != 0) {
        return Bad(f + "[2] (length)", "an identical chunk has no payload");
      }
      if (chunk.offset != *payload_pos) {
        return Bad(f + "[1] (offset)", "payload offset " + std::to_string(chunk.offset) +
                                           " != " + std::to_string(*payload_pos) +
                                           " (payloads are stored back to back in order)");
      }
      if (!CheckedAdd(*payload_pos, chunk.length, payload_pos)) {
        return Bad(f + "[2] (length)", "payload offset overflows");
      }
      if (!CheckedAdd(*total, chunk.size, total)) return Bad(f + "[3] (size)", "sizes overflow");
      out.push_back(chunk);
    }
    return out;
  }

 private:
  std::string_view what_;
};

}  // namespace

Result<std::string> SerializePatchHeader(const PatchHeader& h) {
  std::string out;
  std::string s;
  if (h.has_base) {
    out.append("{\"base\":{\"digest\":");
    BLZ_ASSIGN_OR_RETURN(s, JsonString(h.base_digest));
    out.append(s);
    out.append(",\"size\":");
    AppendU64(&out, h.base_size);
    out.append("},\"target\":{\"digest\":");
  } else {
    out.append("{\"base\":null,\"target\":{\"digest\":");
  }
  BLZ_ASSIGN_OR_RETURN(s, JsonString(h.target_digest));
  out.append(s);
  out.append(",\"size\":");
  AppendU64(&out, h.target_size);
  out.append("},\"prefix\":{\"length\":");
  AppendU64(&out, h.prefix_length);
  out.append(",\"chunks\":");
  AppendChunks(&out, h.prefix_chunks);
  out.append("},\"pieces\":[");
  for (size_t i = 0; i < h.pieces.size(); ++i) {
    const PatchPiece& p = h.pieces[i];
    if (i > 0) out.push_back(',');
    out.append(p.kind == Kind::kRaw ? "{\"kind\":\"raw\",\"index\":" : "{\"kind\":\"tensor\",\"index\":");
    AppendU64(&out, p.index);
    out.append(",\"base\":");
    if (p.base.has_value()) {
      AppendU64(&out, *p.base);
    } else {
      out.append("null");
    }
    out.append(",\"chunks\":");
    AppendChunks(&out, p.chunks);
    out.push_back('}');
  }
  out.append("],\"removed\":[");
  for (size_t i = 0; i < h.removed.size(); ++i) {
    if (i > 0) out.push_back(',');
    BLZ_ASSIGN_OR_RETURN(s, JsonString(h.removed[i]));
    out.append(s);
  }
  out.append("]}");
  return out;
}

std::string EncodePatchFixedHeader(uint64_t json_length, uint32_t version) {
  std::string out(kPatchMagic, sizeof(kPatchMagic));
  AppendLE32(&out, version);
  AppendLE32(&out, 0);
  AppendLE64(&out, json_length);
  return out;
}

Result<uint64_t> ParsePatchFixedHeader(ByteSpan head, uint64_t file_size, std::string_view what,
                                       uint32_t* version_out) {
  std::string w(what);
  if (head.size() < kPatchFixedBytes || file_size < kPatchFixedBytes) {
    return Corruption(w + ": truncated: " + std::to_string(std::min<uint64_t>(head.size(), file_size)) +
                      " bytes, a patch starts with a 24-byte fixed header");
  }
  if (std::memcmp(head.data(), kPatchMagic, sizeof(kPatchMagic)) != 0) {
    return Corruption(w + ": bad magic at byte offset 0 (not a .blzpatch file)");
  }
  uint32_t version = LoadLE32(head.data() + 8);
  if (version < kMinPatchVersion || version > kPatchVersion) {
    return Unsupported(w + ": patch format version " + std::to_string(version) +
                       " at byte offset 8 (this build reads versions " +
                       std::to_string(kMinPatchVersion) + " to " + std::to_string(kPatchVersion) +
                       ")");
  }
  if (version_out != nullptr) *version_out = version;
  uint32_t flags = LoadLE32(head.data() + 12);
  if (flags != 0) {
    return Unsupported(w + ": unknown flags 0x" + Hex64(flags).substr(8) + " at byte offset 12");
  }
  uint64_t n = LoadLE64(head.data() + 16);
  if (n > kMaxPatchHeaderBytes) {
    return TooLarge(w + ": header length " + std::to_string(n) + " at byte offset 16 exceeds the cap of " +
                    std::to_string(kMaxPatchHeaderBytes));
  }
  if (n == 0) return Corruption(w + ": header length 0 at byte offset 16");
  if (n > file_size - kPatchFixedBytes) {
    return Corruption(w + ": truncated: header length " + std::to_string(n) +
                      " at byte offset 16 runs past the end of the file (" +
                      std::to_string(file_size) + " bytes)");
  }
  return n;
}

Result<PatchHeader> ParsePatch(ByteSpan head, uint64_t file_size, std::string_view what) {
  uint32_t version = 0;
  BLZ_ASSIGN_OR_RETURN(uint64_t n, ParsePatchFixedHeader(head, file_size, what, &version));
  std::string w(what);
  if (head.size() < kPatchFixedBytes + n) {
    return Internal(w + ": ParsePatch given " + std::to_string(head.size()) + " bytes, needs " +
                    std::to_string(kPatchFixedBytes + n));
  }
  std::string_view text = AsChars(head.subspan(kPatchFixedBytes, n));
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return Corruption(w + ": header is not valid JSON near byte offset " +
                      std::to_string(kPatchFixedBytes + (e.byte > 0 ? e.byte - 1 : 0)) + ": " +
                      e.what());
  } catch (const Json::exception& e) {
    return Corruption(w + ": header is not valid JSON: " + e.what());
  }

  HeaderReader r(what);
  PatchHeader h;
  h.version = version;
  h.payload_start = kPatchFixedBytes + n;
  BLZ_RETURN_IF_ERROR(r.ExpectObject(j, "(root)", {"base", "target", "prefix", "pieces", "removed"}));
  if (j["base"].is_null()) {
    // A full patch (no base): version 2 and later.
    if (version < 2) {
      return r.Bad("base", "null (a full patch) needs patch format version 2, the file says " +
                               std::to_string(version));
    }
    h.has_base = false;
  } else {
    BLZ_RETURN_IF_ERROR(r.ExpectObject(j["base"], "base", {"digest", "size"}));
    BLZ_ASSIGN_OR_RETURN(h.base_digest, r.Digest(j["base"]["digest"], "base.digest"));
    BLZ_ASSIGN_OR_RETURN(h.base_size, r.U64(j["base"]["size"], "base.size"));
  }
  BLZ_RETURN_IF_ERROR(r.ExpectObject(j["target"], "target", {"digest", "size"}));
  BLZ_ASSIGN_OR_RETURN(h.target_digest, r.Digest(j["target"]["digest"], "target.digest"));
  BLZ_ASSIGN_OR_RETURN(h.target_size, r.U64(j["target"]["size"], "target.size"));

  uint64_t payload_pos = 0;
  const Json& prefix = j["prefix"];
  BLZ_RETURN_IF_ERROR(r.ExpectObject(prefix, "prefix", {"length", "chunks"}));
  BLZ_ASSIGN_OR_RETURN(h.prefix_length, r.U64(prefix["length"], "prefix.length"));
  if (h.prefix_length == 0 || h.prefix_length > kMaxPrefixBytes ||
      h.prefix_length > h.target_size) {
    return r.Bad("prefix.length", std::to_string(h.prefix_length) +
                                      " is not in 1..min(" + std::to_string(kMaxPrefixBytes) +
                                      ", target.size)");
  }
  uint64_t total = 0;
  BLZ_ASSIGN_OR_RETURN(h.prefix_chunks, r.Chunks(prefix["chunks"], "prefix.chunks", &payload_pos, &total));
  if (total != h.prefix_length) {
    return r.Bad("prefix.chunks", "chunk sizes add up to " + std::to_string(total) +
                                      ", prefix.length is " + std::to_string(h.prefix_length));
  }

  const Json& pieces = j["pieces"];
  if (!pieces.is_array()) return r.Bad("pieces", "not an array");
  h.pieces.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string f = "pieces[" + std::to_string(i) + "]";
    const Json& p = pieces[i];
    BLZ_RETURN_IF_ERROR(r.ExpectObject(p, f, {"kind", "index", "base", "chunks"}));
    PatchPiece piece;
    BLZ_ASSIGN_OR_RETURN(std::string kind, r.String(p["kind"], f + ".kind"));
    if (kind == "raw") {
      piece.kind = Kind::kRaw;
    } else if (kind == "tensor") {
      piece.kind = Kind::kTensor;
    } else {
      return r.Bad(f + ".kind", "'" + kind.substr(0, 64) + "' is not \"raw\" or \"tensor\"");
    }
    BLZ_ASSIGN_OR_RETURN(piece.index, r.U32(p["index"], f + ".index"));
    if (!p["base"].is_null()) {
      if (!h.has_base) return r.Bad(f + ".base", "a full patch (base null) has no base pieces");
      BLZ_ASSIGN_OR_RETURN(uint32_t b, r.U32(p["base"], f + ".base"));
      piece.base = b;
    }
    BLZ_ASSIGN_OR_RETURN(piece.chunks, r.Chunks(p["chunks"], f + ".chunks", &payload_pos, &total));
    h.pieces.push_back(std::move(piece));
  }

  const Json& removed = j["removed"];
  if (!removed.is_array()) return r.Bad("removed", "not an array");
  if (!h.has_base && !removed.empty()) {
    return r.Bad("removed", "a full patch (base null) removes nothing: the list must be empty");
  }
  h.removed.reserve(removed.size());
  for (size_t i = 0; i < removed.size(); ++i) {
    BLZ_ASSIGN_OR_RETURN(std::string name, r.String(removed[i], "removed[" + std::to_string(i) + "]"));
    h.removed.push_back(std::move(name));
  }

  h.payload_bytes = payload_pos;
  uint64_t end = 0;
  bool overflow = !CheckedAdd(h.payload_start, h.payload_bytes, &end);
  if (overflow || end != file_size) {
    return Corruption(w + ": the chunk payloads need " + std::to_string(h.payload_bytes) +
                      " bytes from byte offset " + std::to_string(h.payload_start) + ", the file has " +
                      std::to_string(file_size - h.payload_start) +
                      (overflow || end > file_size ? " (truncated)" : " (trailing bytes)"));
  }

  // The header must be exactly what SerializePatchHeader writes for these values: this rejects
  // duplicate and reordered keys, whitespace, escapes and number spellings a writer never uses.
  Result<std::string> canonical = SerializePatchHeader(h);
  if (!canonical.ok()) return Corruption(w + ": header: " + canonical.status().message());
  if (*canonical != text) {
    size_t k = 0;
    while (k < text.size() && k < canonical->size() && text[k] == (*canonical)[k]) ++k;
    return Corruption(w + ": header is not in canonical form (first difference at byte offset " +
                      std::to_string(kPatchFixedBytes + k) + ")");
  }
  return h;
}

}  // namespace blz::patcher::internal
