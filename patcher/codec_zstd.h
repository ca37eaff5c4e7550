// zstd helpers for the per-chunk tensor codecs (patcher/tensor_codec.h): one compression and
// one decompression context per thread (created on first use, freed at thread exit, never
// per call), and strict single-frame decoding.
#ifndef BLZ_PATCHER_CODEC_ZSTD_H_
#define BLZ_PATCHER_CODEC_ZSTD_H_

#include <cstdint>
#include <string>

#include "core/bytes.h"
#include "core/status.h"

namespace blz::patcher::internal {

// Appends one zstd frame of `src` (content size recorded in the frame header, no checksum) at
// `level` to *out. kInternal if zstd fails (out of memory).
Status ZstdCompressAppend(ByteSpan src, int level, std::string* out);

// Same, for a byte plane (patcher/codec_stream.h). A plane without runs (fewer than half of
// the sampled bytes equal their predecessor: exponents of weights, XORs of changed values) is
// literals drawn from a skewed alphabet, where the short matches level 1 finds cost more than
// the literals they replace: it is coded with the fast strategy at `level`, matches of at least
// 7 bytes, a high acceleration (targetLength 1000: the match finder skips ahead where nothing
// repeats) and Huffman-coded literals forced on (zstd turns them off under such acceleration).
// A plane with runs (zeros where nothing changed) is coded at plain `level`: there the skipped
// bytes would become literals. On the generated BF16 models: full patches 2% smaller and a
// 256 MB fine-tune's patch 19% smaller, each coded with about a third less CPU time
// (docs/benchmarks.md, "Byte planes coded as literals"). The frames are ordinary zstd frames:
// decoding is unchanged.
Status ZstdCompressPlaneAppend(ByteSpan src, int level, std::string* out);

// Size of the zstd frame of `src` at `level`, without keeping it (for estimates).
Result<uint64_t> ZstdCompressedSize(ByteSpan src, int level);

// Checks, without decompressing, that `frame` is exactly one zstd frame (no trailing bytes)
// whose header records content size `content_size`. kCorruption otherwise.
Status ZstdCheckFrame(ByteSpan frame, uint64_t content_size);

// Decodes `frame`, which must be exactly one zstd frame (no trailing bytes) whose header
// records a content size equal to out.size(), into `out`. kCorruption otherwise; the content
// size is checked before anything is decompressed (ZstdCheckFrame).
Status ZstdDecompressExact(ByteSpan frame, MutableByteSpan out);

}  // namespace blz::patcher::internal

#endif  // BLZ_PATCHER_CODEC_ZSTD_H_
