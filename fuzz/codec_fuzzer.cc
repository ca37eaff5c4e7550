// fuzz_codec: DecodeChunk of every chunk codec (patcher/tensor_codec.h), with and without a
// base chunk, then an encode/decode round trip of what it decoded.
//
// Input layout (5 bytes, then the payload):
//   0     codec id (CodecFromId: unknown ids are rejected there)
//   1     element size (low 4 bits, so invalid sizes are tried too)
//   2..3  u16 LE size of the decoded chunk (0 .. 65535)
//   4     bit 0: give a base chunk; bits 1..7: the seed of the base's bytes (float-like values)
//   5..   the payload
// Properties: a decoded chunk re-encodes (EncodeWith the same codec, and EncodeChunk's choice)
// to a payload that decodes to the same bytes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "patcher/codec_internal.h"
#include "patcher/tensor_codec.h"

namespace {

using blz::patcher::Codec;

// Float-like little-endian values of small magnitude, deterministic in `seed`.
std::vector<uint8_t> MakeBase(uint8_t seed, size_t n) {
  std::vector<uint8_t> b(n);
  uint32_t x = 0x9e3779b9u * (uint32_t(seed) + 1);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    float f = (float(x & 0xffff) - 32768.0f) / 1.0e6f;
    std::memcpy(&b[i], &f, 4);
  }
  for (size_t i = n & ~size_t(3); i < n; ++i) b[i] = uint8_t(i);
  return b;
}

std::string Header(uint8_t codec, uint8_t elem, uint16_t out_size, uint8_t base_byte) {
  std::string h;
  h.push_back(char(codec));
  h.push_back(char(elem));
  h.push_back(char(out_size & 0xff));
  h.push_back(char(out_size >> 8));
  h.push_back(char(base_byte));
  return h;
}

void WriteSeeds() {
  blz::patcher::CodecOptions options;
  for (uint8_t id = 0; id <= 5; ++id) {
    auto codec = blz::patcher::CodecFromId(id);
    blz::fuzz::MustOk(codec.status(), "CodecFromId");
    for (uint32_t elem : {1u, 2u, 4u, 8u}) {
      for (uint16_t size : {uint16_t(0), uint16_t(64), uint16_t(4096)}) {
        if (size % elem != 0) continue;
        bool needs_base = blz::patcher::CodecNeedsBase(*codec);
        uint8_t base_byte = needs_base ? uint8_t(1 | (id << 1)) : 0;
        std::vector<uint8_t> base = MakeBase(uint8_t(base_byte >> 1), size);
        std::vector<uint8_t> target = base;
        if (*codec != Codec::kIdentical) {
          for (size_t i = 0; i < target.size(); i += 4 * elem) target[i] ^= uint8_t(i | 1);
        }
        blz::ByteSpan b = needs_base ? blz::ByteSpan(base) : blz::ByteSpan();
        auto payload = blz::patcher::internal::EncodeWith(*codec, b, target, elem, options);
        if (!payload.ok()) continue;
        blz::fuzz::WriteSeed("crafted_" + std::string(blz::patcher::CodecName(*codec)) + "_e" +
                                 std::to_string(elem) + "_" + std::to_string(size),
                             Header(id, uint8_t(elem), size, base_byte) + *payload);
      }
    }
  }
}

void RoundTrip(Codec codec, blz::ByteSpan base, blz::ByteSpan decoded, uint32_t elem) {
  blz::patcher::CodecOptions options;
  std::vector<uint8_t> again(decoded.size());
  auto same = blz::patcher::internal::EncodeWith(codec, base, decoded, elem, options);
  if (same.ok()) {
    blz::Status s = blz::patcher::DecodeChunk(codec, base, blz::AsBytes(*same), elem, again);
    blz::fuzz::Check(s.ok(), "EncodeWith's payload decodes");
    blz::fuzz::Check(std::equal(again.begin(), again.end(), decoded.begin()),
                     "EncodeWith round trip is lossless");
  }
  auto chosen = blz::patcher::EncodeChunk(base, decoded, elem, options);
  blz::fuzz::Check(chosen.ok(), "EncodeChunk codes a decodable chunk");
  blz::Status s =
      blz::patcher::DecodeChunk(chosen->codec, base, blz::AsBytes(chosen->payload), elem, again);
  blz::fuzz::Check(s.ok(), "EncodeChunk's payload decodes");
  blz::fuzz::Check(std::equal(again.begin(), again.end(), decoded.begin()),
                   "EncodeChunk round trip is lossless");
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  auto codec = blz::patcher::CodecFromId(data[0]);
  if (!codec.ok()) return 0;
  uint32_t elem = data[1] & 0x0f;
  size_t out_size = size_t(data[2]) | size_t(data[3]) << 8;
  bool has_base = (data[4] & 1) != 0;
  std::vector<uint8_t> base_bytes = has_base ? MakeBase(data[4] >> 1, out_size)
                                             : std::vector<uint8_t>();
  // A heap copy of exactly the payload, so reads past its end are caught.
  std::vector<uint8_t> payload(data + 5, data + size);
  std::vector<uint8_t> out(out_size);
  blz::ByteSpan base(base_bytes);
  blz::Status s = blz::patcher::DecodeChunk(*codec, base, payload, elem, out);
  if (!s.ok()) return 0;
  blz::fuzz::Check(elem == 1 || elem == 2 || elem == 4 || elem == 8,
                   "DecodeChunk accepts only element sizes 1, 2, 4, 8");
  // EncodeChunk takes an empty base or one of the target's size.
  RoundTrip(*codec, base, out, elem);
  return 0;
}
