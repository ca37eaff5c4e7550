// Content-addressed blob store on the local file system.
//
// Layout under the data directory `root`:
//   <root>/blobs/sha256/<first 2 hex>/<64 hex>   published blobs, named by their SHA-256
//   <root>/blobs/sha512/<first 2 hex>/<128 hex>  blobs pushed under a SHA-512 digest (OCI allows
//                                                both; the registry's own blobs are sha256)
//   <root>/uploads/                              temporary files (writes in progress)
//   <root>/quarantine/<64 hex>[.<random>]        blobs found damaged (Quarantine, Scrub)
//
// A blob is only published after its bytes were hashed and matched the digest that names it:
// writes go to a temporary file under <root>/uploads/, are SHA-256 checked, fsynced and then
// renamed into place (same file system, so the rename is atomic). On a digest mismatch nothing
// is stored (kDigestMismatch). Reading and writing are streamed in fixed buffers; no blob is
// ever held in memory whole.
//
// Thread safety: all methods are safe to call concurrently. Publishing the same digest twice
// is harmless (identical content; the second rename replaces the first atomically).
#ifndef BLZ_STORE_BLOB_STORE_H_
#define BLZ_STORE_BLOB_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/status.h"

namespace blz::store {

struct BlobInfo {
  std::string digest;  // "sha256:<hex>" or "sha512:<hex>"
  uint64_t size = 0;   // bytes
  std::string path;    // absolute or root-relative path of the published file
};

class BlobWriter;

// What BlobStore::Scrub found.
struct ScrubReport {
  uint64_t blobs = 0;  // published blobs re-hashed
  uint64_t bytes = 0;  // their bytes
  // Digests of the blobs whose bytes no longer hashed to their name, now in quarantine.
  std::vector<std::string> quarantined;
  // Blobs that could not be read or moved (left in place), one message each.
  std::vector<std::string> errors;
};

class BlobStore {
 public:
  // Opens the store rooted at `root`, creating <root>/blobs/sha256 and <root>/uploads when
  // missing. `root` and those directories are made owner-only (0700, whatever the umask; an
  // existing wider one is tightened with a warning on stderr); blob shards are created 0700
  // and blob files 0600. Errors: kIOError.
  static Result<BlobStore> Open(const std::string& root);

  const std::string& root() const { return root_; }
  const std::string& uploads_dir() const { return uploads_dir_; }

  // Where the blob named `digest` lives (whether or not it exists). Errors: kInvalidArgument
  // for anything but "sha256:<64 lower-case hex>" or "sha512:<128 lower-case hex>".
  Result<std::string> PathFor(std::string_view digest) const;

  // Size and path of a published blob. Errors: kInvalidArgument, kNotFound.
  Result<BlobInfo> Stat(std::string_view digest) const;
  bool Contains(std::string_view digest) const { return Stat(digest).ok(); }

  // A fresh path "<root>/uploads/<prefix>-<random hex>" (the file is not created).
  std::string NewTempPath(std::string_view prefix) const;

  // Publishes the file at `temp_path` (which must be inside uploads_dir()) as the blob named
  // `expected_digest`: hashes it (streamed), and only when it matches fsyncs and renames it into
  // place. Errors: kInvalidArgument (malformed digest), kDigestMismatch (the file is left where
  // it is for the caller to remove; nothing stored), kNotFound / kIOError.
  Result<BlobInfo> Publish(const std::string& temp_path, std::string_view expected_digest) const;
  // Same, naming the blob by the digest of the file's bytes.
  Result<BlobInfo> PublishComputed(const std::string& temp_path) const;

  // A streaming writer for a new blob.
  Result<BlobWriter> NewWriter() const;

  // Writes `data` as a blob (small content: configs, manifests in tests). An empty
  // `expected_digest` means "name it by its digest".
  Result<BlobInfo> PutBytes(std::string_view data, std::string_view expected_digest = {}) const;

  // Re-hashes a published blob. Errors: kNotFound, kDigestMismatch (the file was damaged).
  Status Verify(std::string_view digest) const;

  // <root>/quarantine: where damaged blobs are moved (created on first use).
  std::string quarantine_dir() const { return root_ + "/quarantine"; }

  // Moves the published blob `digest` out of the store, to <root>/quarantine/<hex> (or
  // "<hex>.<random hex>" when that name is taken), for an operator to inspect: afterwards the
  // store no longer has it (Stat: kNotFound), so it is never served again, and a client may push
  // it again. For blobs whose bytes no longer hash to their digest (callers check first; this
  // does not hash). With `hashed_inode` != 0 (the inode of the file the caller hashed), a blob
  // whose file was replaced since (pushed again, so a sound copy) is left in place and the
  // result is kNotFound. Returns the quarantined file's path. Errors: kInvalidArgument
  // (malformed digest), kNotFound (not stored, quarantined concurrently, or replaced), kIOError.
  Result<std::string> Quarantine(std::string_view digest, uint64_t hashed_inode = 0) const;

  // The digests of every published blob, in no particular order. Files in the blobs tree that
  // are not named like a blob are ignored. Errors: kIOError (the tree cannot be listed).
  Result<std::vector<std::string>> ListDigests() const;

  // Garbage collection's removal of one blob: removes it only if its file was last written
  // before `cutoff`. A young file is not touched. An old one is renamed aside and judged again
  // (the very file that would be removed): a copy published concurrently is moved back, so
  // it is never lost, though a reader may miss it for the instant between the two renames. Returns the bytes freed (0 when the
  // blob was not there). Errors: kUnavailable (younger than `cutoff`: kept), kInvalidArgument,
  // kIOError.
  Result<uint64_t> RemoveIfOlder(std::string_view digest,
                                 std::chrono::system_clock::time_point cutoff) const;

  // Re-hashes every published blob (streamed, one at a time) and quarantines each whose bytes
  // no longer hash to its name. Files in the blobs tree that are not named like a blob are
  // ignored. `log` (may be empty) gets one line per damaged or unreadable blob. Errors:
  // kIOError when the blobs tree cannot be listed; a blob that cannot be read or moved is
  // reported in ScrubReport::errors and the scrub goes on.
  Result<ScrubReport> Scrub(const std::function<void(const std::string&)>& log = {}) const;

 private:
  friend class BlobWriter;
  // Moves a verified file (named by `digest`, sha256 or sha512) into place.
  Result<BlobInfo> MoveIntoPlace(const std::string& temp_path, const std::string& digest,
                                 uint64_t size) const;

  std::string root_;
  std::string blobs_dir_;    // <root>/blobs/sha256
  std::string sha512_dir_;   // <root>/blobs/sha512
  std::string uploads_dir_;  // <root>/uploads
};

// Streams one blob into a temporary file under <root>/uploads/ (a core AtomicFile), hashing as
// it goes. Destroying an uncommitted writer removes its temporary file.
class BlobWriter {
 public:
  BlobWriter() = default;
  ~BlobWriter();
  BlobWriter(BlobWriter&& other) noexcept;
  BlobWriter& operator=(BlobWriter&& other) noexcept;
  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;

  Status Append(ByteSpan data);
  Status Append(std::string_view data) { return Append(AsBytes(data)); }
  uint64_t size() const { return file_.size(); }

  // Checks that the bytes written hash to `expected_digest` ("sha256:<hex>"), then publishes.
  // Errors: kInvalidArgument (malformed digest), kDigestMismatch (nothing stored), kIOError.
  Result<BlobInfo> Commit(std::string_view expected_digest);
  // Publishes under the digest of the bytes written (for content the server produced).
  Result<BlobInfo> CommitComputed();
  // Removes the temporary file now.
  void Abandon();

 private:
  friend class BlobStore;
  Result<BlobInfo> Finish(std::string_view expected_hex);

  BlobStore store_;  // a copy (three paths): the writer does not depend on the original
  AtomicFile file_;  // <root>/uploads/blob-<hex>, written through its own temporary file
  Sha256 hash_;
};

}  // namespace blz::store

#endif  // BLZ_STORE_BLOB_STORE_H_
