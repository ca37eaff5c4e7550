// Random access to the archive a patch holds, without rebuilding it (patcher/archive_reader.h):
// any byte range of the archive is produced by decoding only the chunks that overlap it. Two
// kinds of patch are read this way:
// - a full patch (patcher/patch.h CreateFullPatch), by itself;
// - a chain link: a patch from a parent archive (registry/archive_chains.cc), together with a
//   reader of that parent (a full patch's, another link's, or a plain archive file's), so a
//   chain of any depth is read link by link down to its root.
// The registry stores archives in these forms (registry/archive_storage.h; docs/storage.md) and
// serves single files of them, and ranges of those, through this (registry/hub/version_files.h).
//
// How a range maps onto the patch: a patch codes the archive's prefix (magic, header, padding)
// and every piece of its data section (raw pieces and tensors) in chunks of at most
// kChunkBytes (4 MiB) of archive bytes, each chunk coded on its own (zstd, byte planes + zstd,
// or against the same chunk of a base piece of the parent: identical, XOR planes, ...) with the
// xxh3-64 of its decoded bytes in the patch header (patcher/patch_format.h). So the unit of
// decoding is one chunk, never a whole tensor: a byte range touches the chunks whose archive
// bytes overlap it, plus the zero padding between pieces (produced, not stored). A link's chunk
// coded against a base needs exactly one range of the parent (the base piece's chunk of the
// same index and size), read through the parent's reader (recursively: a chain of depth d
// decodes at most d + 1 chunks per chunk of the archive).
//
// Checks: Open validates the whole patch header (ParsePatch: sizes, payload offsets and
// lengths, overflow-checked), decodes the archive prefix (checking each of its chunks' xxh3)
// and validates the archive header it holds (formats::ParseArchivePrefix), and checks that the
// patch's pieces are exactly the archive's pieces in data order, each covered by its chunks;
// a full patch's chunks need no base; a link's patch names the parent's digest and size, and
// each of its base pieces exists in the parent with the same kind and size (tensors: the same
// dtype, shape and ggml type); a piece without a base uses no codec that needs one. All that
// happens before anything sized by the patch is allocated beyond the prefix (<=
// kMaxPrefixBytes, as ApplyPatch). Every chunk decoded is checked against its xxh3-64 before
// any of its bytes are handed out (a link's after decoding it against its base, whose own
// chunks the parent checked); the archive's SHA-256 cannot be checked for a part of it (every
// patch was verified completely when it was stored, and the registry re-hashes the file of a
// whole-file read, registry/hub/version_files.h).
//
// Memory: the patch is memory-mapped (nothing of it is read beyond the chunks asked for and
// its header); a Cursor holds one decoded chunk (<= kChunkBytes; none while every chunk it
// reads is identical to its base) plus its parent's cursor (the same, recursively), and the
// codec's per-thread scratch buffers; a reader opened with shared_chunks keeps that many
// decoded chunks more (<= kChunkBytes each). Nothing is written to disk.
//
// Thread safety: a PatchReader is immutable after Open and may be shared by threads (its
// shared-chunk memo, below, has a lock of its own); each Cursor is used by one thread at a time.
#ifndef BLZ_PATCHER_PATCH_READER_H_
#define BLZ_PATCHER_PATCH_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/mmap_file.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "patcher/archive_reader.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher {

class PatchReader final : public ArchiveReader {
 public:
  // Opens and validates the patch at `patch_path` (see the file comment): a full patch when
  // `parent` is null, else a chain link from the archive `parent` reads (which the reader and
  // its cursors keep alive). Errors: kNotFound / kIOError (the file); kInvalidArgument (a patch
  // that needs a base and no parent was given, or a full patch with a parent, or a link from
  // another archive than the parent's, naming both digests); kCorruption / kTooLarge /
  // kUnsupported (the patch header, the archive header it holds, a prefix chunk that does not
  // decode to its xxh3, pieces that do not match the archive or the parent's pieces they name
  // as their base), messages naming `patch_path`, the field or piece and the byte offset.
  // `shared_chunks` > 0: the reader keeps that many of the chunks its cursors decoded last (each
  // <= kChunkBytes, checked against its xxh3-64 before it is kept) for its other cursors, so
  // that readers built on this one that read the same chunks at about the same time (two chain
  // links over one parent, diffed against each other: registry/archive_storage.h OpenReaders)
  // decode each once; a kept chunk is copied once, when kept. 0 (the default): nothing kept.
  static Result<std::shared_ptr<const PatchReader>> Open(
      const std::string& patch_path, std::shared_ptr<const ArchiveReader> parent = nullptr,
      size_t shared_chunks = 0);

  ~PatchReader() override;

  // The archive's parsed header, its digest ("sha256:<hex>", as the patch names it).
  const formats::ArchiveHeader& header() const override { return header_; }
  const std::string& archive_digest() const override { return archive_digest_; }
  const std::string& path() const { return path_; }
  // The parent's reader (null for a full patch).
  const std::shared_ptr<const ArchiveReader>& parent() const { return parent_; }

  // A cursor over `ranges`: ArchiveReader::NewCursor. Its Next() returns at most one chunk's
  // worth (or 64 KiB of padding).
  Result<std::unique_ptr<ArchiveReader::Cursor>> NewCursor(
      std::vector<ArchiveRange> ranges) const override;
  // One range per chunk (ArchiveReader::IndependentRanges).
  std::vector<ArchiveRange> IndependentRanges() const override;

 private:
  class PatchCursor;
  struct SharedChunks;  // patch_reader.cc
  PatchReader();

  // One chunk of archive bytes: [offset, offset + size), coded at payload_offset of the file,
  // against the parent's bytes [base_offset, base_offset + size) when has_base.
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
    bool has_base = false;
    uint64_t base_offset = 0;  // absolute, in the parent archive
  };
  // "<patch>: tensor 'wte' (file 'model.safetensors') chunk 3 (payload at byte offset N)" /
  // "<patch>: archive header chunk 0 (...)".
  std::string Describe(const Chunk& c) const;

  std::string path_;
  MappedFile file_;
  formats::ArchiveHeader header_;
  std::vector<formats::ArchivePiece> order_;  // the archive's pieces in data order
  std::string archive_digest_;
  std::vector<Chunk> chunks_;  // sorted by offset, not overlapping
  std::shared_ptr<const ArchiveReader> parent_;
  std::unique_ptr<SharedChunks> shared_;  // null unless Open was given shared_chunks > 0
};

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_PATCH_READER_H_
