// Random access to a .blz archive however it is stored, without rebuilding it: any byte range
// of the archive as a cursor of byte spans. Implemented by
// - ArchiveFileReader (here): a plain archive file (a raw blob, or a copy rebuilt earlier),
//   memory-mapped; its bytes are handed out as they are;
// - PatchReader (patcher/patch_reader.h): the archive a full patch holds, or the archive a
//   chain link (a patch from a parent archive) rebuilds together with its parent's reader,
//   decoding only the 4 MiB chunks a range touches.
// The registry stores archives in all three forms (registry/archive_storage.h; docs/storage.md)
// and serves single files of them, and ranges of those, through this
// (registry/hub/version_files.h).
//
// Thread safety: a reader is immutable once opened and may be shared by threads; each Cursor
// is used by one thread at a time.
#ifndef BLZ_PATCHER_ARCHIVE_READER_H_
#define BLZ_PATCHER_ARCHIVE_READER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/bytes.h"
#include "core/mmap_file.h"
#include "core/status.h"
#include "formats/blz_archive.h"

namespace blz::patcher {

// What a read decoded (for measurements and tests). A chain link's cursor counts the chunks
// its parents decoded for it too.
struct ArchiveReadStats {
  uint64_t chunks_decoded = 0;  // chunks decoded (each one whole)
  uint64_t bytes_decoded = 0;   // their decoded (archive) bytes
  uint64_t payload_bytes = 0;   // their coded bytes read from the patches
  ArchiveReadStats& operator+=(const ArchiveReadStats& o) {
    chunks_decoded += o.chunks_decoded;
    bytes_decoded += o.bytes_decoded;
    payload_bytes += o.payload_bytes;
    return *this;
  }
};
using FullPatchReadStats = ArchiveReadStats;  // the name before chains were read in place

// A byte range [offset, offset + length) of the archive.
struct ArchiveRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};

class ArchiveReader : public std::enable_shared_from_this<ArchiveReader> {
 public:
  virtual ~ArchiveReader() = default;

  // The archive's parsed header, its digest ("sha256:<hex>") and size.
  virtual const formats::ArchiveHeader& header() const = 0;
  virtual const std::string& archive_digest() const = 0;
  uint64_t archive_size() const { return header().total_size; }

  // Produces the bytes of some ranges of the archive, in order, one call of Next() at a time.
  class Cursor {
   public:
    virtual ~Cursor() = default;
    // The next bytes: at most one chunk's worth (kChunkBytes), valid until the next call of
    // Next or Reset or the cursor's destruction; an empty span once every range was produced.
    // Errors (a patch reader's): kCorruption naming the patch, the piece (tensor or file), the
    // chunk and the payload's byte offset when a chunk does not decode or its bytes do not
    // match its xxh3-64 (then none of that chunk's bytes were returned); the cursor must not
    // be used after an error.
    virtual Result<ByteSpan> Next() = 0;
    // Starts over on `ranges` (checked as NewCursor), keeping the cursor's buffers (and what
    // it decoded last, which a range may ask for again) and its stats.
    virtual Status Reset(std::vector<ArchiveRange> ranges) = 0;
    // What this cursor decoded so far (a chain link's: with its parents').
    virtual ArchiveReadStats stats() const = 0;
  };

  // A cursor over `ranges` (each inside the archive; empty ones are skipped). The cursor keeps
  // this reader alive. kInvalidArgument (checked, overflow too) when a range is not inside the
  // archive.
  virtual Result<std::unique_ptr<Cursor>> NewCursor(std::vector<ArchiveRange> ranges) const = 0;

  // Hands the archive's bytes [offset, offset + length) to `sink` in order, in pieces of at
  // most kChunkBytes; stops at the first non-OK status of `sink` and returns it. Errors as
  // NewCursor and Cursor::Next. `stats` (may be null) receives what was decoded.
  Status Read(uint64_t offset, uint64_t length, const std::function<Status(ByteSpan)>& sink,
              ArchiveReadStats* stats = nullptr) const;

  // A partition of the archive [0, archive_size()) into consecutive ranges, in order, that
  // cursors can decode independently of each other (WriteArchive hands them to threads): a
  // patch reader's chunks (the padding before a chunk joined to it); a file's kChunkBytes
  // pieces. Each is at most 2 x kChunkBytes long.
  virtual std::vector<ArchiveRange> IndependentRanges() const;

 protected:
  // kInvalidArgument unless every range lies inside the archive (overflow-checked).
  Status CheckRanges(const std::vector<ArchiveRange>& ranges) const;
};

// Writes the archive `reader` reads to `out_path` atomically (core/file_util.h AtomicFile: a
// temporary file beside it, then a rename that replaces nothing), decoding it through an
// ArchiveStream on `threads` worker threads (0 = one per core) and writing and hashing it in
// order on the calling thread. The file appears only if
// its SHA-256 is reader.archive_digest(); every chunk decoded was checked against its xxh3-64
// (patcher/patch_reader.h). `reader` must be owned by a shared_ptr (every Open makes one).
// Nothing of an intermediate archive of a chain is written: a chain
// of depth d is decoded link by link per chunk. Memory: at most kWindowPerThread x threads
// ranges (core/ordered_pipeline.h) of <= 2 x kChunkBytes, plus ArchiveStream's queue and each
// cursor's buffers.
// Errors: the cursors' (kCorruption naming the patch, the piece, the chunk and the payload's
// offset), kDigestMismatch (the whole archive hashes to another digest: nothing written),
// kAlreadyExists (out_path exists), kIOError (naming the temporary file), kInvalidArgument
// (threads < 0). `stats` (may be null) receives what the cursors decoded.
Status WriteArchive(const ArchiveReader& reader, const std::string& out_path, int threads = 0,
                    ArchiveReadStats* stats = nullptr);

// Decodes the whole archive `reader` reads, as WriteArchive does (on `threads` workers), and
// writes nothing: OK only if the bytes are exactly those of the archive file at `archive_path`
// (compared byte for byte: a copy the caller verified to be reader.archive_digest(), such as a
// registry's raw blob), or, when `archive_path` is "", if their SHA-256 is
// reader.archive_digest(). How a registry checks a chain link before relying on it without
// writing its parent, or the archive the link rebuilds, anywhere. Errors: the cursors'
// (kCorruption naming the patch, the piece, the chunk), kDigestMismatch (naming the first byte
// offset that differs, a size that differs, or the digest the bytes have), kNotFound /
// kIOError (archive_path). `stats` (may be null) receives what was decoded.
Status VerifyReader(const ArchiveReader& reader, const std::string& archive_path, int threads = 0,
                    ArchiveReadStats* stats = nullptr);

// A pool of cursors of one reader, so that several threads decode ranges of it at once
// without a new cursor per range: a range takes an idle cursor (its buffers, and what it
// decoded last, as Cursor::Reset keeps them) or opens one, and gives it back after; a cursor
// that failed is dropped (its stats are kept). One cursor per thread at a time exists.
// Thread-safe. The reader must outlive the pool (a shared_ptr keeps it).
class CursorPool {
 public:
  explicit CursorPool(std::shared_ptr<const ArchiveReader> reader);
  ~CursorPool();
  CursorPool(const CursorPool&) = delete;
  CursorPool& operator=(const CursorPool&) = delete;

  // Decodes `range` (inside the archive: the caller checked it) into out[0, range.length).
  // Errors: the cursor's (kCorruption naming the patch, the piece and the chunk; as
  // Cursor::Next, a bad chunk's bytes are not written), kInternal (it produced another
  // length).
  Status DecodeInto(const ArchiveRange& range, uint8_t* out) const;
  // What every cursor decoded (complete once no range is being decoded).
  ArchiveReadStats stats() const;
  const ArchiveReader& reader() const { return *reader_; }

 private:
  std::shared_ptr<const ArchiveReader> reader_;
  mutable std::mutex mu_;  // guards the members below
  mutable std::vector<std::unique_ptr<ArchiveReader::Cursor>> idle_;
  mutable ArchiveReadStats dropped_;  // of cursors dropped after an error
};

class RangeDecoder;  // archive_reader.cc

// The bytes [offset, offset + length) of an archive, decoded ahead of the consumer on worker
// threads and handed out in order: how a download of a whole archive stored as patches is
// streamed (registry/blob_handlers.cc), and how WriteArchive writes one, on several cores
// rather than one. A driver thread runs the reader's IndependentRanges through RunOrdered
// (core/ordered_pipeline.h) on `threads` workers (0 = one per core) and queues at most kAhead
// decoded ranges; Next() takes them in order, waiting while the next is being decoded.
// Memory: at most (kWindowPerThread x threads + kAhead + 1) buffers of 2 x kChunkBytes, plus
// one cursor per worker. The reader must be owned by a shared_ptr (every Open makes one); the
// stream keeps it alive. Destroying the stream stops the workers (it waits for the ranges
// being decoded). Next() is called by one thread at a time.
class ArchiveStream {
 public:
  static constexpr size_t kAhead = 2;
  // Errors: kInvalidArgument (the range is not inside the archive, overflow-checked; threads
  // < 0), kInternal (no thread could be started).
  static Result<std::unique_ptr<ArchiveStream>> Start(std::shared_ptr<const ArchiveReader> reader,
                                                       uint64_t offset, uint64_t length,
                                                       int threads = 0);
  ~ArchiveStream();
  ArchiveStream(const ArchiveStream&) = delete;
  ArchiveStream& operator=(const ArchiveStream&) = delete;

  // The next bytes (at most 2 x kChunkBytes), valid until the next call or the stream's
  // destruction; an empty span once every byte was handed out. Errors: the cursors' (as
  // Cursor::Next: none of a bad chunk's bytes are handed out); the stream ends there.
  Result<ByteSpan> Next();
  // What the cursors decoded (complete once Next returned the end or an error).
  ArchiveReadStats stats() const;

 private:
  ArchiveStream() = default;
  void Drive(unsigned threads);  // the driver thread
  struct Piece {
    std::unique_ptr<uint8_t[]> bytes;
    size_t size = 0;
  };
  std::unique_ptr<RangeDecoder> decoder_;
  std::vector<ArchiveRange> jobs_;
  std::thread driver_;
  mutable std::mutex mu_;  // guards the members below
  std::condition_variable cv_;
  std::deque<Piece> ready_;
  bool done_ = false, cancelled_ = false;
  Status status_;
  Piece current_;  // handed out by the last Next (the consumer's)
};

// A plain .blz archive file, memory-mapped: ranges are spans of the mapping (nothing is copied
// or decoded; stats stay zero). The header is parsed and validated at Open
// (formats::ParseArchivePrefix); the bytes are not hashed: `digest` is the caller's (a
// content-addressed store that verified the file when it was written).
class ArchiveFileReader final : public ArchiveReader {
 public:
  // Errors: kNotFound / kIOError (the file), kCorruption / kTooLarge / kUnsupported (its
  // header), naming `path`.
  static Result<std::shared_ptr<const ArchiveFileReader>> Open(const std::string& path,
                                                               std::string digest);
  const formats::ArchiveHeader& header() const override { return header_; }
  const std::string& archive_digest() const override { return digest_; }
  Result<std::unique_ptr<Cursor>> NewCursor(std::vector<ArchiveRange> ranges) const override;
  // The mapping itself, for a reader of the whole archive at once (CreatePatchFromReaders).
  const MappedFile& file() const { return file_; }

 private:
  class FileCursor;
  ArchiveFileReader() = default;
  MappedFile file_;
  formats::ArchiveHeader header_;
  std::string digest_;
};

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_ARCHIVE_READER_H_
