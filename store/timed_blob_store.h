// A timing decorator over any BlobStore driver (store/blob_store.h), for /metrics
// (blz_blob_store_seconds{op}): every call that reaches the driver is counted and timed under
// one of five operations:
//   stat   Stat
//   get    LocalFile (s3: a download on a cache miss), HashStored (Verify, Scrub), OpenRange
//          (until the body starts: s3's ranged GET up to its headers)
//   put    PublishVerified (the driver's half of Publish, PutBytes, BlobWriter::Commit),
//          PutUploadPart
//   get    also ConcatUploadParts (the parts of an upload read back)
//   delete RemoveIfOlder, Quarantine, DeleteUploadParts
//   list   ListDigests, CheckReachable (s3: a listing of the prefix), ListUploadPartSessions
// PresignGet (a local computation) is passed through untimed. Everything else (the write path,
// temporary files) is the base class's, over the same data directory as the inner driver.
//
// Thread safety: as the inner driver's; the counters are atomics.
#ifndef BLZ_STORE_TIMED_BLOB_STORE_H_
#define BLZ_STORE_TIMED_BLOB_STORE_H_

#include <memory>

#include "store/blob_store.h"

namespace blz::store {

// Not final: tests derive from it to slow down or gate single calls of a real driver.
class TimedBlobStore : public BlobStore {
 public:
  explicit TimedBlobStore(std::unique_ptr<BlobStore> inner);

  std::string_view driver() const override { return inner_->driver(); }
  std::string Describe() const override { return inner_->Describe(); }
  Status CheckReachable() const override;
  Result<BlobInfo> Stat(std::string_view digest) const override;
  Result<BlobInfo> LocalFile(std::string_view digest) const override;
  Result<std::unique_ptr<BlobReader>> OpenRange(std::string_view digest, uint64_t offset,
                                                uint64_t length) const override;
  bool streams_reads() const override { return inner_->streams_reads(); }
  Result<std::string> Quarantine(std::string_view digest,
                                 uint64_t hashed_identity) const override;
  Result<std::vector<std::string>> ListDigests() const override;
  Result<uint64_t> RemoveIfOlder(std::string_view digest,
                                 std::chrono::system_clock::time_point cutoff) const override;
  Result<std::string> PresignGet(std::string_view digest,
                                 std::chrono::seconds expiry) const override;
  Status PutUploadPart(std::string_view session, std::string_view name,
                       const std::string& path) const override;
  Status ConcatUploadParts(std::string_view session, const std::vector<std::string>& names,
                           const std::string& dest,
                           const UploadSessionFile* held) const override;
  Status DeleteUploadParts(std::string_view session) const override;
  Result<std::vector<std::string>> ListUploadPartSessions() const override;
  Result<std::unique_ptr<UploadSessionFile>> LockSessionFile(
      std::string_view session) const override;
  const BlobStoreTimings* timings() const override { return &timings_; }
  BlobStore& unwrapped() override { return inner_->unwrapped(); }

 protected:
  Result<BlobInfo> PublishVerified(const std::string& temp_path, const std::string& digest,
                                   uint64_t size, bool synced) const override;
  Result<StoredHash> HashStored(std::string_view digest) const override;

 private:
  std::unique_ptr<BlobStore> inner_;
  mutable BlobStoreTimings timings_;
};

}  // namespace blz::store

#endif  // BLZ_STORE_TIMED_BLOB_STORE_H_
