// The S3 blob driver (`--storage s3://BUCKET/PREFIX?endpoint=URL&region=R[&path_style=1]`),
// on store/s3/s3_client.h.
//
// Object keys: "<prefix>/blobs/sha256/<64 hex>" ("blobs/sha256/<hex>" without a prefix;
// sha512 blobs under ".../blobs/sha512/<128 hex>"). Writes are verified in the replica's own
// <root>/uploads/ first (store/blob_store.h), then sent with one PUT, or a multipart upload for
// files of `multipart_threshold` bytes or more; the uploaded file then becomes the local cached
// copy (renamed, not copied).
//
// Local cache: <root>/cache/blobs/<algorithm>-<hex>, verified copies for LocalFile (mmap of
// archives and patches). Blob GETs do not go through it: the registry streams them with
// OpenRange (one ranged GET each). Bounded by `cache_bytes` (least recently used first
// out; the entry just fetched always stays, even when larger than the bound). Files present at
// start are kept (they were verified when fetched) and ordered by mtime. Evicting unlinks the
// file, so a reader that has it open keeps reading.
//
// Not atomic across replicas: a PUT of a key that RemoveIfOlder is deleting can be lost (the
// database's GC marks coordinate that, issue 25). Timestamps are S3's Last-Modified (the
// server's clock).
#ifndef BLZ_STORE_S3_S3_BLOB_STORE_H_
#define BLZ_STORE_S3_S3_BLOB_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "store/blob_store.h"
#include "store/s3/s3_client.h"

namespace blz::store::s3 {

struct S3BlobStoreOptions {
  uint64_t cache_bytes = 8ull << 30;            // bound of <root>/cache/blobs
  uint64_t multipart_threshold = 64ull << 20;   // files this large go up in parts
  uint64_t part_size = 16ull << 20;             // >= kMinMultipartPartSize
};

class S3BlobStore final : public BlobStore {
 public:
  // `config` must be complete (ParseS3Url + ApplyS3Environment). Creates <root>/uploads and
  // <root>/cache/blobs; does not contact S3 (CheckReachable does). Errors: kIOError,
  // kInvalidArgument (part size below 5 MiB, empty root).
  static Result<std::unique_ptr<S3BlobStore>> Open(const std::string& root, S3Config config,
                                                   S3BlobStoreOptions options = {});

  std::string_view driver() const override { return "s3"; }
  std::string Describe() const override;

  // The object key of `digest`. Errors: kInvalidArgument (malformed digest).
  Result<std::string> KeyFor(std::string_view digest) const;
  // Bytes in the local cache now (for tests and metrics).
  uint64_t cached_bytes() const;

  Status CheckReachable() const override;
  Result<BlobInfo> Stat(std::string_view digest) const override;
  Result<BlobInfo> LocalFile(std::string_view digest) const override;
  // One ranged GET streamed in pieces of at most 256 KiB; the cache is neither read nor filled.
  Result<std::unique_ptr<BlobReader>> OpenRange(std::string_view digest, uint64_t offset,
                                                uint64_t length) const override;
  bool streams_reads() const override { return true; }
  Result<std::string> Quarantine(std::string_view digest,
                                 uint64_t hashed_identity = 0) const override;
  Result<std::vector<std::string>> ListDigests() const override;
  Result<uint64_t> RemoveIfOlder(std::string_view digest,
                                 std::chrono::system_clock::time_point cutoff) const override;
  Result<std::string> PresignGet(std::string_view digest,
                                 std::chrono::seconds expiry) const override;
  Status PutUploadPart(std::string_view session, std::string_view name,
                       const std::string& path) const override;
  // No session file here (LockSessionFile is kUnsupported): `held` is never set.
  Status ConcatUploadParts(std::string_view session, const std::vector<std::string>& names,
                           const std::string& dest,
                           const UploadSessionFile* held) const override;
  Status DeleteUploadParts(std::string_view session) const override;
  Result<std::vector<std::string>> ListUploadPartSessions() const override;

 protected:
  Result<BlobInfo> PublishVerified(const std::string& temp_path, const std::string& digest,
                                   uint64_t size, bool synced) const override;
  Result<StoredHash> HashStored(std::string_view digest) const override;

 private:
  S3BlobStore(std::string root, S3Config config, S3BlobStoreOptions options);

  std::string BlobsPrefix() const;  // "<prefix>/blobs/"
  std::string UploadsPrefix() const;  // "<prefix>/uploads/"
  // <root>/uploads/parts-<session>: local copies of the parts this replica received.
  std::string LocalPartsDir(std::string_view session) const;
  std::string CachePath(std::string_view digest) const;
  Status Upload(const std::string& key, const std::string& path, uint64_t size) const;
  // Downloads the object to `path` and hashes it.
  Result<StoredHash> Download(std::string_view digest, const std::string& path) const;
  // Records `digest`'s file (already in the cache directory) and evicts others past the bound.
  void CacheInsert(const std::string& digest, uint64_t size) const;
  void CacheDrop(const std::string& digest) const;

  S3Config config_;
  S3BlobStoreOptions options_;
  std::string cache_dir_;  // <root>/cache/blobs

  struct Entry {
    uint64_t size = 0;
    uint64_t last_use = 0;
  };
  mutable std::mutex mu_;
  mutable std::map<std::string, Entry> cache_;  // by digest
  mutable uint64_t cache_total_ = 0;
  mutable uint64_t clock_ = 0;
};

// Parses an HTTP date ("Fri, 27 Nov 2026 03:28:02 GMT") or an ISO 8601 UTC time
// ("2026-11-27T03:28:02.000Z"). kInvalidArgument otherwise.
Result<std::chrono::system_clock::time_point> ParseS3Time(std::string_view text);

}  // namespace blz::store::s3

#endif  // BLZ_STORE_S3_S3_BLOB_STORE_H_
