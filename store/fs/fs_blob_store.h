// The file-system blob driver (the default, `--storage file:DIR`): blobs in a local directory.
//
// Layout under the data directory `root`:
//   <root>/blobs/sha256/<first 2 hex>/<64 hex>   published blobs, named by their SHA-256
//   <root>/blobs/sha512/<first 2 hex>/<128 hex>  blobs pushed under a SHA-512 digest (OCI allows
//                                                both; the registry's own blobs are sha256)
//   <root>/uploads/                              temporary files (writes in progress)
//   <root>/quarantine/<64 hex>[.<random>]        blobs found damaged (Quarantine, Scrub)
//
// Publishing fsyncs the verified temporary file and renames it into place (same file system, so
// the rename is atomic). Publishing the same digest twice is harmless (identical content; the
// second rename replaces the first atomically). Stat and LocalFile return the blob's own file.
#ifndef BLZ_STORE_FS_FS_BLOB_STORE_H_
#define BLZ_STORE_FS_FS_BLOB_STORE_H_

#include <memory>
#include <string>

#include "store/blob_store.h"

namespace blz::store {

class FsBlobStore final : public BlobStore {
 public:
  // Opens the store rooted at `root`, creating <root>/blobs/sha256 and <root>/uploads when
  // missing. `root` and those directories are made owner-only (0700, whatever the umask; an
  // existing wider one is tightened with a warning on stderr); blob shards are created 0700
  // and blob files 0600. Errors: kIOError, kInvalidArgument (empty root).
  static Result<std::unique_ptr<FsBlobStore>> Open(const std::string& root);

  std::string_view driver() const override { return "file"; }
  std::string Describe() const override { return blobs_dir_; }

  // Where the blob named `digest` lives (whether or not it exists). Errors: kInvalidArgument
  // for anything but "sha256:<64 lower-case hex>" or "sha512:<128 lower-case hex>".
  Result<std::string> PathFor(std::string_view digest) const;

  Result<BlobInfo> Stat(std::string_view digest) const override;
  Result<BlobInfo> LocalFile(std::string_view digest) const override { return Stat(digest); }
  Result<std::string> Quarantine(std::string_view digest,
                                 uint64_t hashed_identity = 0) const override;
  Result<std::vector<std::string>> ListDigests() const override;
  Result<uint64_t> RemoveIfOlder(std::string_view digest,
                                 std::chrono::system_clock::time_point cutoff) const override;
  Status PutUploadPart(std::string_view session, std::string_view name,
                       const std::string& path) const override;
  Status ConcatUploadParts(std::string_view session, const std::vector<std::string>& names,
                           const std::string& dest,
                           const UploadSessionFile* held) const override;
  Status DeleteUploadParts(std::string_view session) const override;
  Result<std::vector<std::string>> ListUploadPartSessions() const override;
  // <root>/uploads/parts-<session>/data (store/blob_store.h, "the session file").
  Result<std::unique_ptr<UploadSessionFile>> LockSessionFile(
      std::string_view session) const override;

 protected:
  Result<BlobInfo> PublishVerified(const std::string& temp_path, const std::string& digest,
                                   uint64_t size, bool synced) const override;
  Result<StoredHash> HashStored(std::string_view digest) const override;

 private:
  explicit FsBlobStore(std::string root);

  std::string blobs_dir_;   // <root>/blobs/sha256
  std::string sha512_dir_;  // <root>/blobs/sha512
};

}  // namespace blz::store

#endif  // BLZ_STORE_FS_FS_BLOB_STORE_H_
