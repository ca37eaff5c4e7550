// Per-chunk tensor codecs: how the bytes of one chunk of a target tensor are coded, given the
// matching chunk of the base tensor (or no base). The patch container (patcher/patch.h, spec in
// docs/patch-format.md) cuts every tensor into chunks of at most kChunkBytes and codes each
// chunk with EncodeChunk; chunks are independent, so they can be coded on all cores.
//
// Byte order: tensors are little-endian arrays of `elem_size`-byte elements, as stored in
// safetensors/GGUF. Codecs are lossless: DecodeChunk(EncodeChunk(x)) == x, bit for bit,
// whatever the bytes are (NaN payloads, -0.0, denormals, odd lengths).
#ifndef BLZ_PATCHER_TENSOR_CODEC_H_
#define BLZ_PATCHER_TENSOR_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/bytes.h"
#include "core/status.h"

namespace blz::patcher {

// Target chunk size for tensors (a multiple of every element size).
inline constexpr uint64_t kChunkBytes = 4ull << 20;

// Codec ids are stored in patches: never renumber or reuse one.
enum class Codec : uint8_t {
  kIdentical = 0,  // target chunk == base chunk: no payload
  kZstd = 1,       // zstd of the target bytes alone (no base)
  kXorPlanes = 2,  // XOR with the base, split into byte planes (byte k of every element in
                   // one stream), each plane zstd-compressed
};

std::string_view CodecName(Codec codec);
// Maps a stored id back to a Codec; kCorruption for unknown ids.
Result<Codec> CodecFromId(uint8_t id);

struct CodecOptions {
  int zstd_level = 9;
};

struct EncodedChunk {
  Codec codec = Codec::kZstd;
  std::string payload;
};

// Codes `target`. `base` is either empty (no usable base: a new, reshaped or re-typed tensor,
// or a changed file) or exactly target.size() bytes (the same chunk of the base tensor).
// elem_size is the element width in bytes (1, 2, 4 or 8; 1 for raw files). Picks the codec
// that gives the smallest payload among those it tries; kIdentical when base == target.
// Thread-safe: may be called from many threads at once (zstd contexts are per thread).
Result<EncodedChunk> EncodeChunk(ByteSpan base, ByteSpan target, uint32_t elem_size,
                                 const CodecOptions& options);

// Decodes `payload` (coded with `codec`) into `out`, whose size is the target chunk size.
// `base` must be what was given to EncodeChunk. kCorruption if the payload is malformed or
// does not decode to exactly out.size() bytes. Thread-safe.
Status DecodeChunk(Codec codec, ByteSpan base, ByteSpan payload, uint32_t elem_size,
                   MutableByteSpan out);

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_TENSOR_CODEC_H_
