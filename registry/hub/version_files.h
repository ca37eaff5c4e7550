// The files of a stored model version, as the Hugging Face Hub API (registry/hub/) and the
// Ollama blob endpoint serve them: the original files of the model directory a version's .blz
// archive holds (formats/blz_archive.h), listed with their size, SHA-256 and the Hub's Git
// object id, and read by byte range straight from the archive's pieces.
//
// Listing: the first listing of an archive reads its header (and the bytes of its small files,
// for their Git blob id) and records the result in the metadata DB (table version_files,
// migrations/0010_version_files.sql); every later listing, on any replica, reads the DB only and
// needs no archive bytes at all. The registry lists each version once at its manifest PUT,
// while the raw archive is still stored (registry/manifest_handlers.cc).
//
// Reading: a file's bytes are its pieces (raw and tensor pieces, 64-byte aligned in the archive's
// data section, so not contiguous), mapped onto byte segments of the archive. Slice() returns
// those segments for any byte range of one file, and how to get their bytes:
// - while the raw archive is stored (or a copy rebuilt earlier is in <data>/cache): the archive
//   file (ArchiveStorage::FileIfStored); the HTTP session streams the segments
//   (Response::file_segments, registry/file_range_body.h) in fixed buffers;
// - when the archive is stored only as a patch (its full patch, or a chain link: a patch from a
//   parent archive, itself stored as a file, a full patch or another link): a BodyProducer
//   that decodes only the 4 MiB chunks of the pieces the range touches (patcher/patch_reader.h;
//   for a link, each chunk against the one chunk of its parent it needs, recursively down the
//   chain, ArchiveStorage::ReadForms), one chunk at a time as the session sends them. Nothing
//   is rebuilt, nothing is written to <data>/cache, memory stays at one decoded chunk per
//   response (per level of a chain). Every chunk decoded is checked
//   against its xxh3-64 before its bytes leave; a range that is the whole file is also checked
//   against the file's SHA-256 (from the archive header) before its last bytes leave, so a
//   complete download is never wrong, only cut short. The archive header comes from the
//   patch's prefix (its first chunk), so listing needs no rebuild either. Only a server that
//   cannot read patches (no patch functions), or a chain whose parts vanished meanwhile, falls
//   back to ArchiveStorage::File() (a rebuild into <data>/cache).
//
// Thread safety: every method may be called from any thread. Parsed archive headers (and opened
// full patches) are kept in a small in-process cache (kHeaderCacheEntries, least recently used
// out).
#ifndef BLZ_REGISTRY_HUB_VERSION_FILES_H_
#define BLZ_REGISTRY_HUB_VERSION_FILES_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "patcher/archive_reader.h"
#include "registry/archive_storage.h"
#include "registry/body_producer.h"
#include "registry/http_message.h"
#include "store/metadata_db.h"

namespace blz::registry::hub {

// Files of at least this size are LFS files even without a weight extension (the Hub's own
// threshold for text files pushed without LFS rules is 10 MiB).
inline constexpr uint64_t kLfsThresholdBytes = 10ull << 20;
inline constexpr size_t kHeaderCacheEntries = 16;

// One file of a version.
struct VersionFile {
  std::string path;     // relative, '/'-separated (the archive's, already IsSafeRelativePath)
  uint64_t size = 0;
  std::string sha256;   // 64 lower-case hex of the file's bytes
  // 40 lower-case hex: the Hub's "oid". SHA-1 of "blob <size>\0" + the bytes for a plain file;
  // for an LFS file the same over its LFS pointer text (LfsPointer), as Git would store it.
  std::string git_oid;
  // Stored by the Hub with Git LFS (IsLfsPath or size >= kLfsThresholdBytes): its ETag is the
  // SHA-256, the tree entry carries "lfs": {oid, size, pointerSize}.
  bool lfs = false;
};

// Is `path` a file the Hub's default .gitattributes puts in LFS (*.safetensors, *.gguf, *.bin,
// *.pt, *.pth, *.ckpt, *.h5, *.onnx, *.msgpack, *.model, *.npy, *.npz, *.pkl, *.pickle, *.tflite,
// *.ot, *.pb, *.parquet, *.arrow, archives (*.zip, *.tar, *.gz, ...), ...)?
bool IsLfsPath(std::string_view path);

// The Git LFS pointer file of a blob: "version https://git-lfs.github.com/spec/v1\noid sha256:
// <sha256>\nsize <size>\n".
std::string LfsPointer(std::string_view sha256_hex, uint64_t size);

// SHA-1 of "blob <size>\0" + bytes, streamed: Update() the bytes, then FinishHex().
class GitBlobHasher {
 public:
  explicit GitBlobHasher(uint64_t size);
  ~GitBlobHasher();
  GitBlobHasher(const GitBlobHasher&) = delete;
  GitBlobHasher& operator=(const GitBlobHasher&) = delete;
  void Update(ByteSpan data);
  std::string FinishHex();  // 40 lower-case hex

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// The Git blob id of `bytes` (GitBlobHasher over all of them).
std::string GitBlobId(std::string_view bytes);

// A byte segment of the archive file: [offset, offset + length).
struct FileSegment {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Where a byte range of one file is: the archive's segments, in order (their lengths add up to
// the range's length; no segment is empty), and where their bytes come from: the archive file
// `archive_path`, or, when that is "" (the archive is stored only as its full patch),
// `producer`, which makes exactly `length` bytes (the segments' bytes, decoded as it goes).
struct FileSlice {
  std::string archive_path;  // valid for ArchiveStorageOptions::grace at least
  std::vector<FileSegment> segments;
  uint64_t length = 0;
  std::shared_ptr<BodyProducer> producer;  // set exactly when archive_path is ""
};

// Makes `slice` the body of `res` (file_path + file_segments, or producer) and sets
// res->file_length.
void SetResponseBody(FileSlice slice, Response* res);

// The segments of `file`'s bytes [offset, offset + length) in an archive laid out as `header`.
// REQUIRES: offset + length <= file.size (checked: kInvalidArgument otherwise, also on overflow).
Result<std::vector<FileSegment>> MapFileRange(const formats::ArchiveHeader& header,
                                              const formats::ArchiveFile& file, uint64_t offset,
                                              uint64_t length);

class VersionFiles {
 public:
  // `storage` and `db` must outlive this object.
  VersionFiles(ArchiveStorage* storage, store::MetadataDb* db);

  // Every file of the archive `archive_digest` ("sha256:<hex>"), sorted by path (bytewise), as
  // recorded in the metadata DB; computed from the archive (its file, or its full patch: no
  // rebuild) and recorded when it was not. The caller decides whether the archive is a
  // version the requester may read. Errors: kNotFound (no such archive stored), those of
  // Slice (kCorruption: not a valid archive) and of the metadata DB.
  Result<std::vector<VersionFile>> List(const std::string& archive_digest);

  // The file named `path` (exact, bytewise) in List(archive_digest). kNotFound naming the path
  // when the archive has no such file; errors as List.
  Result<VersionFile> Find(const std::string& archive_digest, std::string_view path);

  // The segments holding bytes [offset, offset + length) of the file `path` of `archive_digest`,
  // and the archive file or producer to read them from (see the file comment; decoding happens
  // in the producer, later). Errors: kNotFound (no such archive or file), kInvalidArgument (the
  // range is not inside the file), those of ArchiveStorage::FileIfStored / ReadForms and of
  // reading the archive header (kCorruption) or opening its patches
  // (patcher::PatchReader::Open).
  Result<FileSlice> Slice(const std::string& archive_digest, std::string_view path,
                          uint64_t offset, uint64_t length);

  // Reads bytes [offset, offset + length) of the file `path` of `archive_digest`, handing them to
  // `sink` in pieces of at most 1 MiB, in order (for tests and small files; HTTP responses
  // stream Slice() instead). Stops at the first non-OK status of `sink` and returns it. Errors as
  // Slice, kIOError when the archive file cannot be read, and from a full patch kCorruption (a
  // chunk that does not match its xxh3-64) or kDigestMismatch (a whole file whose bytes do not
  // have its SHA-256; the last piece is then not handed to `sink`).
  Status Read(const std::string& archive_digest, std::string_view path, uint64_t offset,
              uint64_t length, const std::function<Status(ByteSpan)>& sink);

 private:
  struct Opened {
    std::string path;  // the archive file (ArchiveStorage::FileIfStored); "" when `patch` is set
    std::shared_ptr<const formats::ArchiveHeader> header;
    std::shared_ptr<const patcher::ArchiveReader> patch;  // its patch(es), when no file
  };
  // The archive file of `archive_digest`, or a reader of its patch(es), and its parsed header
  // (cached by digest).
  Result<Opened> Open(const std::string& archive_digest);
  // The slice of `file` [offset, offset + length) in `opened`.
  Result<FileSlice> SliceOf(const Opened& opened, const std::string& archive_digest,
                            const formats::ArchiveFile& file, uint64_t offset, uint64_t length);
  struct Cached {
    std::string digest;
    std::shared_ptr<const formats::ArchiveHeader> header;
    std::shared_ptr<const patcher::ArchiveReader> patch;  // null until needed
  };
  // Computes the listing from the archive (header + small files' bytes).
  Result<std::vector<VersionFile>> Compute(const std::string& archive_digest);

  ArchiveStorage* storage_;
  store::MetadataDb* db_;
  std::mutex mu_;  // guards headers_
  std::list<Cached> headers_;
};

}  // namespace blz::registry::hub

#endif  // BLZ_REGISTRY_HUB_VERSION_FILES_H_
