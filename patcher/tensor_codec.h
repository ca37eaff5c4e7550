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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/dtype.h"

namespace blz::patcher {

// Target chunk size for tensors (a multiple of every element size).
inline constexpr uint64_t kChunkBytes = 4ull << 20;

// Codec ids are stored in patches: never renumber or reuse one.
enum class Codec : uint8_t {
  kIdentical = 0,  // target chunk == base chunk: no payload
  kZstd = 1,       // zstd of the target bytes alone (no base)
  kXorPlanes = 2,  // XOR with the base, split into byte planes (byte k of every element in
                   // one stream), each plane zstd-compressed
  kSubPlanes = 3,  // integer difference target - base of each element (zigzag-coded), byte
                   // planes ordered by the base element's exponent, in zstd segments
  kSparse = 4,     // positions of the changed elements + their differences (few changes)
  kPlanes = 5,     // byte planes of the target alone, each zstd-compressed (no base)
};
// Byte layouts of every codec's payload: the comment block atop patcher/tensor_codec.cc
// (copied into docs/patch-format.md).

std::string_view CodecName(Codec codec);
// Maps a stored id back to a Codec; kCorruption for unknown ids.
Result<Codec> CodecFromId(uint8_t id);
// True for the codecs that rebuild a chunk from the base chunk (DecodeChunk needs it):
// kIdentical (unless the chunk is empty), kXorPlanes, kSubPlanes, kSparse.
bool CodecNeedsBase(Codec codec);

struct CodecOptions {
  // zstd level of kZstd (the whole target chunk as one frame).
  int zstd_level = 9;
  // zstd level of each plane stream of kXorPlanes, kSubPlanes, kSparse and kPlanes, coded with
  // the settings for byte planes of patcher/codec_zstd.h (ZstdCompressPlaneAppend). Byte
  // planes are mostly literals: higher levels gain < 2% and cost many times the time
  // (bench/codec_lab.cc).
  int plane_zstd_level = 1;
  // Element type of the tensor, if known: picks the exponent bits kSubPlanes groups by (F32,
  // BF16, F16, F64, F8). Unknown: guessed from elem_size (2-byte elements: BF16 vs F16 by a
  // sample). Only a hint: decoding never needs it (the payload records the grouping).
  std::optional<formats::DType> dtype;
};

struct EncodedChunk {
  Codec codec = Codec::kZstd;
  std::string payload;
};

// Codes `target`. `base` is either empty (no usable base: a new, reshaped or re-typed tensor,
// or a changed file) or exactly target.size() bytes (the same chunk of the base tensor).
// elem_size is the element width in bytes (1, 2, 4 or 8; 1 for raw files). Picks the codec
// that gives the smallest payload among those it tries (zstd, planes, and with a base
// sub-planes and, when at most half the elements changed, sparse); kIdentical when base ==
// target (and for an empty chunk). Chunks up to 128 KiB are coded with every candidate; for
// larger ones the choice is made on a sample (8 evenly spaced 16 KiB slices), then only the
// winner codes the whole chunk (falling back to zstd if it gained nothing).
// Thread-safe: may be called from many threads at once (zstd contexts are per thread).
// Memory: per calling thread, up to two chunk-sized scratch buffers, kept between calls.
Result<EncodedChunk> EncodeChunk(ByteSpan base, ByteSpan target, uint32_t elem_size,
                                 const CodecOptions& options);

// A codec choice made once for a whole tensor of many chunks (ChooseCodec), then applied to
// each of its chunks (EncodeChunkAs): the estimate runs once per tensor instead of once per
// chunk (it was ~7% of a diff of a 2.1 GB BF16 pair). Plain data; no payload.
struct CodecChoice {
  Codec codec = Codec::kZstd;  // never kIdentical (identical chunks are found per chunk)
  uint8_t key_shift = 0;       // kSubPlanes: the group key (see tensor_codec.cc)
  uint8_t key_bits = 0;
  bool check_zstd = false;     // whole-chunk zstd came within 1/16 in the estimate: compare it
};

// Chooses as EncodeChunk does, for a whole tensor: `target` is all of its bytes and `base`
// empty or all of the base tensor's (same size). The sample is the tensor itself up to
// 128 KiB, else 8 evenly spaced 16 KiB slices across the whole tensor. Deterministic: the
// same bytes give the same choice. kInvalidArgument as EncodeChunk.
Result<CodecChoice> ChooseCodec(ByteSpan base, ByteSpan target, uint32_t elem_size,
                                const CodecOptions& options);

// A part of a tensor ChooseCodec samples: its bytes [offset, offset + length).
struct SampleSlice {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// The slices ChooseCodec samples of a tensor of `size` bytes with elements of `elem_size`
// bytes: the whole tensor up to 128 KiB, else 8 evenly spaced slices of 16 KiB (whole
// elements), in order, not overlapping.
std::vector<SampleSlice> SampleSlices(uint64_t size, uint32_t elem_size);

// ChooseCodec for a caller that does not hold the whole tensors in memory (CreatePatch reading
// an archive stored as a patch): `target_sample` is the target tensor's slices that
// SampleSlices(size, elem_size) names, concatenated in order; `base_sample` the same of the
// base tensor, or empty. Makes exactly ChooseCodec's choice for those tensors.
// kInvalidArgument as ChooseCodec, or when the sample is not as long as those slices.
Result<CodecChoice> ChooseCodecOnSample(ByteSpan base_sample, ByteSpan target_sample,
                                        uint64_t size, uint32_t elem_size,
                                        const CodecOptions& options);

// Codes one chunk of a tensor with `choice`: kIdentical when base == target (and for an empty
// chunk), else choice.codec, with EncodeChunk's fallbacks (sub-planes when sparse finds no
// changed whole element; whole-chunk zstd when it is smaller and the choice was close, or
// when nothing was gained). A codec that needs a base falls back to kZstd without one. Same
// arguments, threads and memory as EncodeChunk.
Result<EncodedChunk> EncodeChunkAs(const CodecChoice& choice, ByteSpan base, ByteSpan target,
                                   uint32_t elem_size, const CodecOptions& options);

// Decodes `payload` (coded with `codec`) into `out`, whose size is the target chunk size.
// `base` must be what was given to EncodeChunk (empty for kZstd and kPlanes). kCorruption if
// the payload is malformed, the element size is not 1, 2, 4 or 8, a codec that needs the base
// gets none (or one of another size), or it does not decode to exactly out.size() bytes;
// every length is checked before it is used. `out` must not overlap `payload`; it may be
// `base` itself only for kIdentical. Thread-safe; memory as for EncodeChunk.
Status DecodeChunk(Codec codec, ByteSpan base, ByteSpan payload, uint32_t elem_size,
                   MutableByteSpan out);

// Checks what a chunk's payload declares against the chunk, without decoding anything or
// allocating anything of the chunk's size (patcher/codec_check.cc): for a caller that must
// know an untrusted payload is consistent before it allocates the output (the lossy "exact"
// strategy, patcher/lossy/exact.h). elem_size is 1, 2, 4 or 8; a codec that needs the base gets
// one of out_size bytes (kIdentical: also an empty chunk); the element-size byte and the
// element count of codecs 2-5 match; kZstd is one frame whose header records content size
// out_size; the streams of codecs 2, 4 and 5 (whose lengths the header gives) declare their
// lengths (zero, raw with its bytes present, or a zstd frame of that content size) and the
// payload ends where they do. Codec 3's streams are cut by the base's groups: only its header
// is checked. DecodeChunk re-checks all of it while decoding. kCorruption naming the mismatch.
Status CheckChunkPayload(Codec codec, uint64_t base_size, ByteSpan payload, uint32_t elem_size,
                         uint64_t out_size);

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_TENSOR_CODEC_H_
