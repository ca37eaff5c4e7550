#include "patcher/lossy/exact.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "formats/tensor_stats.h"
#include "patcher/lossy/payload_check.h"
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

namespace {

// An "exact" payload's meta and fields, as CheckExactPayload found them.
struct ExactPlan {
  uint32_t elem_size = 0;
  uint64_t chunk_bytes = 0;
  uint64_t chunks = 0;
  bool with_base = false;
  formats::WdeltaArrayView codecs, sizes, payload;
};

int64_t ChunkSize(const ExactPlan& plan, uint64_t c) {
  int64_t size = 0;
  std::memcpy(&size, plan.sizes.bytes.data() + c * 8, 8);
  return size;
}

Result<ExactPlan> PlanExact(const TensorPayload& p, const std::vector<uint64_t>& shape,
                            uint64_t out_bytes, uint64_t base_bytes) {
  BLZ_RETURN_IF_ERROR(CheckPayloadStrategy(p, "exact"));
  BLZ_ASSIGN_OR_RETURN(std::vector<uint64_t> declared, PayloadShape(p));
  if (declared != shape) {
    return Bad(p, "the header's \"shape\" " + formats::stats_text::Shape(declared) +
                      " is not the tensor's shape " + formats::stats_text::Shape(shape));
  }
  ExactPlan plan;
  const auto& m = *p.meta;
  BLZ_ASSIGN_OR_RETURN(uint64_t elem, PayloadUint(p, "elem_size"));
  BLZ_ASSIGN_OR_RETURN(plan.chunk_bytes, PayloadUint(p, "chunk_bytes"));
  if (plan.chunk_bytes == 0 || plan.chunk_bytes > patcher::kChunkBytes) {
    return Bad(p, "chunk_bytes " + std::to_string(plan.chunk_bytes) + " is not in 1.." +
                      std::to_string(patcher::kChunkBytes));
  }
  if (elem != 1 && elem != 2 && elem != 4 && elem != 8) {
    return Bad(p, "elem_size " + std::to_string(elem) + " is not 1, 2, 4 or 8");
  }
  plan.elem_size = uint32_t(elem);
  plan.with_base = m.contains("with_base") && m["with_base"].is_boolean() &&
                   m["with_base"].get<bool>();
  if (plan.with_base && base_bytes != out_bytes) {
    return Bad(p, "the base tensor has " + std::to_string(base_bytes) + " bytes, the target " +
                      std::to_string(out_bytes));
  }
  plan.chunks = out_bytes / plan.chunk_bytes + (out_bytes % plan.chunk_bytes != 0 ? 1 : 0);
  if (auto codecs = p.fields.find("codecs");
      codecs != p.fields.end() && codecs->second.bytes.size() != plan.chunks) {
    return Bad(p, "shape " + formats::stats_text::Shape(shape) + " is " +
                      std::to_string(out_bytes) + " bytes, " + std::to_string(plan.chunks) +
                      " chunks of " + std::to_string(plan.chunk_bytes) + ", but the file holds " +
                      std::to_string(codecs->second.bytes.size()) + " chunks");
  }
  BLZ_ASSIGN_OR_RETURN(plan.codecs, PayloadField(p, "codecs", "uint8", {plan.chunks}));
  BLZ_ASSIGN_OR_RETURN(plan.sizes, PayloadField(p, "sizes", "int64", {plan.chunks}));
  auto payload = p.fields.find("payload");
  if (payload == p.fields.end()) return Bad(p, "field \"payload\" missing");
  plan.payload = payload->second;
  BLZ_ASSIGN_OR_RETURN(uint64_t payload_bytes, ShapeElements(plan.payload.shape));
  BLZ_ASSIGN_OR_RETURN(plan.payload,
                       PayloadField(p, "payload", "uint8", {payload_bytes}));
  uint64_t at = 0;
  for (uint64_t c = 0; c < plan.chunks; ++c) {
    const int64_t size = ChunkSize(plan, c);
    uint64_t end = 0;
    if (size < 0 || !CheckedAdd(at, uint64_t(size), &end) || end > plan.payload.bytes.size()) {
      return Bad(p, "chunk " + std::to_string(c) + " payload size past the end of the field");
    }
    auto codec = patcher::CodecFromId(plan.codecs.bytes[c]);
    if (!codec.ok()) return Bad(p, "chunk " + std::to_string(c) + ": " + codec.status().message());
    const uint64_t off = c * plan.chunk_bytes;
    const uint64_t len = std::min<uint64_t>(plan.chunk_bytes, out_bytes - off);
    const uint64_t base_len = plan.with_base ? len : 0;
    Status s = patcher::CheckChunkPayload(*codec, base_len, plan.payload.bytes.subspan(at, uint64_t(size)),
                                          plan.elem_size, len);
    if (!s.ok()) return Bad(p, "chunk " + std::to_string(c) + ": " + s.message());
    at = end;
  }
  if (at != plan.payload.bytes.size()) return Bad(p, "payload has bytes after the last chunk");
  return plan;
}

}  // namespace

Status CheckExactPayload(const TensorPayload& p, const std::vector<uint64_t>& shape,
                         uint64_t out_bytes, uint64_t base_bytes) {
  return PlanExact(p, shape, out_bytes, base_bytes).status();
}

Status DecodeExact(const TensorPayload& p, const std::vector<uint64_t>& shape, ByteSpan base,
                   MutableByteSpan out) {
  BLZ_ASSIGN_OR_RETURN(ExactPlan plan, PlanExact(p, shape, out.size(), base.size()));
  uint64_t at = 0;
  for (uint64_t c = 0; c < plan.chunks; ++c) {
    const uint64_t size = uint64_t(ChunkSize(plan, c));  // checked by PlanExact
    const patcher::Codec codec = *patcher::CodecFromId(plan.codecs.bytes[c]);
    const uint64_t off = c * plan.chunk_bytes;
    const uint64_t len = std::min<uint64_t>(plan.chunk_bytes, out.size() - off);
    ByteSpan b = plan.with_base ? base.subspan(off, len) : ByteSpan{};
    MutableByteSpan dst = out.subspan(off, len);
    if (codec == patcher::Codec::kIdentical) {
      if (b.size() != len) return Bad(p, "chunk " + std::to_string(c) + " identical without base");
      if (len != 0) std::memcpy(dst.data(), b.data(), len);
    } else {
      Status s = patcher::DecodeChunk(codec, b, plan.payload.bytes.subspan(at, size),
                                      plan.elem_size, dst);
      if (!s.ok()) return Bad(p, "chunk " + std::to_string(c) + ": " + s.message());
    }
    at += size;
  }
  return Status::Ok();
}

uint64_t LosslessBytes(const formats::WdeltaTensorOut& exact) {
  for (const auto& [field, array] : exact.fields) {
    if (field == "payload") return array.bytes.size();
  }
  return 0;
}

}  // namespace blz::lossy
