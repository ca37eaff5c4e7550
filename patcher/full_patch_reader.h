// Random access to the archive a full patch holds (patcher/patch.h CreateFullPatch), without
// rebuilding it: any byte range of the archive is produced by decoding only the chunks that
// overlap it. The registry stores archives as full patches (registry/archive_storage.h) and
// serves single files of them, and ranges of those, through this (registry/hub/version_files.h).
//
// How a range maps onto the patch: a full patch codes the archive's prefix (magic, header,
// padding) and every piece of its data section (raw pieces and tensors) in chunks of at most
// kChunkBytes (4 MiB) of archive bytes, each chunk coded on its own (zstd, or byte planes + zstd)
// with the xxh3-64 of its decoded bytes in the patch header (patcher/patch_format.h). So the
// unit of decoding is one chunk, never a whole tensor: a byte range touches the chunks whose
// archive bytes overlap it, plus the zero padding between pieces (produced, not stored).
//
// Checks: Open validates the whole patch header (ParsePatch: sizes, payload offsets and
// lengths, overflow-checked), decodes the archive prefix (checking each of its chunks' xxh3)
// and validates the archive header it holds (formats::ParseArchivePrefix), and checks that the
// patch's pieces are exactly the archive's pieces in data order, each covered by its chunks,
// with codecs that need no base, before anything sized by the patch is allocated beyond the
// prefix (<= kMaxPrefixBytes, as ApplyFullPatch). Every chunk decoded is checked against its
// xxh3-64 before any of its bytes are handed out; the archive's SHA-256 cannot be checked for a
// part of it (the full patch itself was verified completely when it was stored, and the
// registry re-hashes the file of a whole-file read, registry/hub/version_files.h).
//
// Memory: the patch is memory-mapped (nothing of it is read beyond the chunks asked for and
// its header); a Cursor holds one decoded chunk (<= kChunkBytes) plus the codec's per-thread
// scratch buffers. Nothing is written to disk.
//
// Thread safety: a FullPatchReader is immutable after Open and may be shared by threads; each
// Cursor is used by one thread at a time.
#ifndef BLZ_PATCHER_FULL_PATCH_READER_H_
#define BLZ_PATCHER_FULL_PATCH_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/mmap_file.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher {

// What a read decoded (for measurements and tests).
struct FullPatchReadStats {
  uint64_t chunks_decoded = 0;  // chunks decoded (each one whole)
  uint64_t bytes_decoded = 0;   // their decoded (archive) bytes
  uint64_t payload_bytes = 0;   // their coded bytes read from the patch
};

// A byte range [offset, offset + length) of the archive.
struct ArchiveRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};

class FullPatchReader : public std::enable_shared_from_this<FullPatchReader> {
 public:
  // Opens and validates the full patch at `patch_path` (see the file comment). Errors:
  // kNotFound / kIOError (the file), kInvalidArgument (a patch that needs a base, naming it),
  // kCorruption / kTooLarge / kUnsupported (the patch header, the archive header it holds, a
  // prefix chunk that does not decode to its xxh3, pieces that do not match the archive),
  // messages naming `patch_path`, the field or piece and the byte offset.
  static Result<std::shared_ptr<const FullPatchReader>> Open(const std::string& patch_path);

  // The archive's parsed header, its digest ("sha256:<hex>", as the patch names it) and size.
  const formats::ArchiveHeader& header() const { return header_; }
  const std::string& archive_digest() const { return archive_digest_; }
  uint64_t archive_size() const { return header_.total_size; }
  const std::string& path() const { return path_; }

  // Produces the bytes of `ranges` of the archive, in order, one call of Next() at a time.
  class Cursor {
   public:
    // The next bytes: at most one chunk's worth (or 64 KiB of padding), valid until the next
    // call or the cursor's destruction; an empty span once every range was produced. Errors:
    // kCorruption naming the patch, the piece (tensor or file), the chunk and the payload's
    // byte offset when a chunk does not decode or its bytes do not match its xxh3-64 (then
    // none of that chunk's bytes were returned); the cursor must not be used after an error.
    Result<ByteSpan> Next();
    const FullPatchReadStats& stats() const { return stats_; }

   private:
    friend class FullPatchReader;
    Cursor(std::shared_ptr<const FullPatchReader> reader, std::vector<ArchiveRange> ranges);
    Status Decode(size_t chunk);

    std::shared_ptr<const FullPatchReader> reader_;
    std::vector<ArchiveRange> ranges_;
    size_t range_ = 0;   // the current range
    uint64_t done_ = 0;  // bytes of it produced
    std::unique_ptr<uint8_t[]> buf_;  // the decoded chunk `decoded_` (allocated on first use)
    size_t decoded_ = SIZE_MAX;
    FullPatchReadStats stats_;
  };

  // A cursor over `ranges` (each inside the archive; empty ones are skipped). The cursor keeps
  // this reader alive. kInvalidArgument (checked, overflow too) when a range is not inside the
  // archive.
  Result<std::unique_ptr<Cursor>> NewCursor(std::vector<ArchiveRange> ranges) const;

  // Hands the archive's bytes [offset, offset + length) to `sink` in order, in pieces of at
  // most kChunkBytes; stops at the first non-OK status of `sink` and returns it. Errors as
  // NewCursor and Cursor::Next. `stats` (may be null) receives what was decoded.
  Status Read(uint64_t offset, uint64_t length, const std::function<Status(ByteSpan)>& sink,
              FullPatchReadStats* stats = nullptr) const;

 private:
  FullPatchReader() = default;

  // One chunk of archive bytes: [offset, offset + size), coded at payload_offset of the file.
  struct Chunk {
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t payload_offset = 0;  // absolute, in the patch file
    uint64_t payload_length = 0;
    uint64_t xxh3 = 0;
    int64_t piece = -1;   // into header_'s data order (-1: the archive prefix)
    uint32_t index = 0;   // the chunk's index within its piece (or the prefix)
    uint32_t elem_size = 1;
    Codec codec = Codec::kZstd;
  };
  // "tensor 'wte' (file 'model.safetensors') chunk 3" / "archive header chunk 0".
  std::string Describe(const Chunk& c) const;

  std::string path_;
  MappedFile file_;
  formats::ArchiveHeader header_;
  std::vector<formats::ArchivePiece> order_;  // the archive's pieces in data order
  std::string archive_digest_;
  std::vector<Chunk> chunks_;  // sorted by offset, not overlapping
};

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_FULL_PATCH_READER_H_
