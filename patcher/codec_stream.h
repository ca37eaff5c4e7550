// Building blocks of the per-chunk tensor codec payloads (patcher/tensor_codec.cc): streams
// (zero / raw / zstd, whichever is smallest) and a bounds-checked payload reader. The byte
// layouts are specified in the comment block at the top of patcher/tensor_codec.cc.
#ifndef BLZ_PATCHER_CODEC_STREAM_H_
#define BLZ_PATCHER_CODEC_STREAM_H_

#include <cstdint>
#include <string>

#include "core/bytes.h"
#include "core/status.h"

namespace blz::patcher::internal {

enum class StreamMode : uint8_t { kZero = 0, kRaw = 1, kZstd = 2 };

// Appends `s` as a stream: mode kZero if every byte is 0, else kZstd (u32 frame length + one
// zstd frame of ZstdCompressPlaneAppend at `level`) if that saves at least 1/32 of the bytes,
// else kRaw.
Status AppendStream(ByteSpan s, int level, std::string* out);

// Reads a payload front to back. Every read is checked against the bytes left; errors are
// kCorruption naming the field and the payload offset.
class PayloadReader {
 public:
  explicit PayloadReader(ByteSpan p) : p_(p) {}
  size_t pos() const { return pos_; }
  size_t left() const { return p_.size() - pos_; }

  Result<uint8_t> U8(const char* what);
  Result<uint32_t> U32(const char* what);
  Result<ByteSpan> Bytes(uint64_t n, const char* what);
  // Decodes one stream of exactly out.size() bytes into `out`.
  Status Stream(MutableByteSpan out, const char* what);
  // Steps over one stream of `len` decoded bytes, checking what it declares without decoding
  // it: its mode, that a raw one holds `len` bytes, that a zstd one is one frame whose header
  // records content size `len`.
  Status SkipStream(uint64_t len, const char* what);
  // kCorruption if bytes are left.
  Status ExpectEnd(const char* codec) const;

 private:
  // The next stream's mode and bytes (raw: its `len` bytes; zstd: its frame), the reader past
  // it; `at` is where it started.
  struct StreamBytes {
    StreamMode mode;
    ByteSpan bytes;
    size_t at;
  };
  Result<StreamBytes> NextStream(uint64_t len, const char* what);
  Status Truncated(const char* what, uint64_t need) const;
  ByteSpan p_;
  size_t pos_ = 0;
};

// A codec that rebuilds a chunk from the base needs a base of exactly the chunk's size:
// kCorruption naming `codec` otherwise.
Status CheckBase(uint64_t base_size, uint64_t out_size, const char* codec);

// The start of decoding codecs 2-5 (and of checking them, CheckChunkPayload): with
// `needs_base`, the base must be as long as the chunk (out_size bytes); then the payload's
// header (u8 E, and with `has_count` u32 n) must match the chunk. Returns n = out_size / E,
// the number of whole elements, with `r` past the header. kCorruption naming `codec`.
Result<size_t> ReadPayloadHeader(PayloadReader& r, const std::string& codec, bool needs_base,
                                 bool has_count, uint64_t base_size, uint64_t out_size,
                                 uint32_t e);

// A per-thread scratch buffer of at least `n` bytes for slot `slot` (0..3). Kept between calls
// (chunks are at most kChunkBytes, so it stays bounded); different slots never alias.
uint8_t* Scratch(int slot, size_t n);

}  // namespace blz::patcher::internal

#endif  // BLZ_PATCHER_CODEC_STREAM_H_
