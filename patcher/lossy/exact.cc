#include "patcher/lossy/exact.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "patcher/tensor_codec.h"

namespace blz::lossy {
namespace {

patcher::CodecOptions OptionsFor(const std::string& dtype) {
  patcher::CodecOptions options;
  auto parsed = formats::ParseDType(dtype);
  if (parsed.ok()) options.dtype = *parsed;
  return options;
}

Status Bad(const TensorPayload& p, const std::string& what) {
  return Status(Code::kCorruption, "tensor '" + p.name + "' (exact): " + what);
}

}  // namespace

Result<formats::WdeltaTensorOut> EncodeExact(const std::string& name, ByteSpan base,
                                             ByteSpan target, const std::string& dtype,
                                             uint32_t elem_size,
                                             const std::vector<uint64_t>& shape) {
  if (!base.empty() && base.size() != target.size()) {
    return Status(Code::kInvalidArgument, "tensor '" + name + "': base and target sizes differ");
  }
  const patcher::CodecOptions options = OptionsFor(dtype);
  const uint64_t chunk = patcher::kChunkBytes;
  patcher::CodecChoice choice;
  if (!target.empty()) {
    auto c = patcher::ChooseCodec(base, target, elem_size, options);
    if (!c.ok()) return c.status();
    choice = *c;
  }
  formats::WdeltaArray codecs{"uint8", {0}, {}};
  formats::WdeltaArray sizes{"int64", {0}, {}};
  formats::WdeltaArray payload{"uint8", {0}, {}};
  for (uint64_t at = 0; at < target.size(); at += chunk) {
    const uint64_t len = std::min<uint64_t>(chunk, target.size() - at);
    ByteSpan b = base.empty() ? ByteSpan{} : base.subspan(at, len);
    auto enc = patcher::EncodeChunkAs(choice, b, target.subspan(at, len), elem_size, options);
    if (!enc.ok()) return enc.status();
    codecs.bytes.push_back(static_cast<uint8_t>(enc->codec));
    uint8_t size_le[8];
    StoreLE64(size_le, enc->payload.size());  // int64, little-endian
    sizes.bytes.insert(sizes.bytes.end(), size_le, size_le + 8);
    payload.bytes.insert(payload.bytes.end(), enc->payload.begin(), enc->payload.end());
  }
  codecs.shape = {codecs.bytes.size()};
  sizes.shape = {codecs.bytes.size()};
  payload.shape = {payload.bytes.size()};
  formats::WdeltaTensorOut out;
  out.name = name;
  out.meta = nlohmann::ordered_json::object();
  out.meta["strategy"] = "exact";
  out.meta["shape"] = shape;
  out.meta["dtype"] = dtype;
  out.meta["elem_size"] = elem_size;
  out.meta["chunk_bytes"] = chunk;
  out.meta["with_base"] = !base.empty();
  out.fields.emplace_back("codecs", std::move(codecs));
  out.fields.emplace_back("sizes", std::move(sizes));
  out.fields.emplace_back("payload", std::move(payload));
  return out;
}

Status DecodeExact(const TensorPayload& p, ByteSpan base, MutableByteSpan out) {
  const auto& m = *p.meta;
  auto num = [&](const char* key) -> Result<uint64_t> {
    if (!m.contains(key) || !m[key].is_number_unsigned()) {
      return Bad(p, std::string("meta \"") + key + "\" missing or not an unsigned integer");
    }
    return m[key].get<uint64_t>();
  };
  auto elem = num("elem_size");
  if (!elem.ok()) return elem.status();
  auto chunk = num("chunk_bytes");
  if (!chunk.ok()) return chunk.status();
  if (*chunk == 0 || *chunk > (uint64_t{1} << 30)) return Bad(p, "chunk_bytes out of range");
  if (*elem != 1 && *elem != 2 && *elem != 4 && *elem != 8) return Bad(p, "bad elem_size");
  const bool with_base = m.contains("with_base") && m["with_base"].is_boolean() &&
                         m["with_base"].get<bool>();
  if (with_base && base.size() != out.size()) {
    return Bad(p, "the base tensor has " + std::to_string(base.size()) + " bytes, the target " +
                      std::to_string(out.size()));
  }
  auto field = [&](const char* f, const char* dtype) -> Result<formats::WdeltaArrayView> {
    auto it = p.fields.find(f);
    if (it == p.fields.end()) return Bad(p, std::string("field \"") + f + "\" missing");
    if (it->second.dtype != dtype) {
      return Bad(p, std::string("field \"") + f + "\" has dtype " + it->second.dtype +
                        ", expected " + dtype);
    }
    return it->second;
  };
  auto codecs = field("codecs", "uint8");
  if (!codecs.ok()) return codecs.status();
  auto sizes = field("sizes", "int64");
  if (!sizes.ok()) return sizes.status();
  auto payload = field("payload", "uint8");
  if (!payload.ok()) return payload.status();
  const uint64_t chunks = (out.size() + *chunk - 1) / *chunk;
  if (codecs->bytes.size() != chunks || sizes->bytes.size() != chunks * 8) {
    return Bad(p, "expected " + std::to_string(chunks) + " chunks, the fields hold " +
                      std::to_string(codecs->bytes.size()));
  }
  uint64_t at = 0;
  for (uint64_t c = 0; c < chunks; ++c) {
    int64_t size = 0;
    std::memcpy(&size, sizes->bytes.data() + c * 8, 8);
    uint64_t end = 0;
    if (size < 0 || !CheckedAdd(at, uint64_t(size), &end) || end > payload->bytes.size()) {
      return Bad(p, "chunk " + std::to_string(c) + " payload size past the end of the field");
    }
    auto codec = patcher::CodecFromId(codecs->bytes[c]);
    if (!codec.ok()) return Bad(p, "chunk " + std::to_string(c) + ": " + codec.status().message());
    const uint64_t off = c * *chunk;
    const uint64_t len = std::min<uint64_t>(*chunk, out.size() - off);
    ByteSpan b = with_base ? base.subspan(off, len) : ByteSpan{};
    MutableByteSpan dst = out.subspan(off, len);
    if (*codec == patcher::Codec::kIdentical) {
      if (b.size() != len) return Bad(p, "chunk " + std::to_string(c) + " identical without base");
      std::memcpy(dst.data(), b.data(), len);
    } else {
      Status s = patcher::DecodeChunk(*codec, b, payload->bytes.subspan(at, uint64_t(size)),
                                      uint32_t(*elem), dst);
      if (!s.ok()) return Bad(p, "chunk " + std::to_string(c) + ": " + s.message());
    }
    at = end;
  }
  if (at != payload->bytes.size()) return Bad(p, "payload has bytes after the last chunk");
  return Status::Ok();
}

uint64_t LosslessBytes(const formats::WdeltaTensorOut& exact) {
  for (const auto& [field, array] : exact.fields) {
    if (field == "payload") return array.bytes.size();
  }
  return 0;
}

}  // namespace blz::lossy
