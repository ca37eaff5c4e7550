#include "store/timed_blob_store.h"

#include <utility>

namespace blz::store {
namespace {

template <class F>
auto Timed(BlobStoreTimings::Op* op, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  auto result = f();
  op->Add(std::chrono::steady_clock::now() - t0, result.ok());
  return result;
}

}  // namespace

TimedBlobStore::TimedBlobStore(std::unique_ptr<BlobStore> inner)
    : BlobStore(inner->root()), inner_(std::move(inner)) {}

Status TimedBlobStore::CheckReachable() const {
  return Timed(&timings_.list, [&] { return inner_->CheckReachable(); });
}

Result<BlobInfo> TimedBlobStore::Stat(std::string_view digest) const {
  return Timed(&timings_.stat, [&] { return inner_->Stat(digest); });
}

Result<BlobInfo> TimedBlobStore::LocalFile(std::string_view digest) const {
  return Timed(&timings_.get, [&] { return inner_->LocalFile(digest); });
}

Result<std::unique_ptr<BlobReader>> TimedBlobStore::OpenRange(std::string_view digest,
                                                              uint64_t offset,
                                                              uint64_t length) const {
  return Timed(&timings_.get, [&] { return inner_->OpenRange(digest, offset, length); });
}

Result<std::string> TimedBlobStore::Quarantine(std::string_view digest,
                                               uint64_t hashed_identity) const {
  return Timed(&timings_.remove, [&] { return inner_->Quarantine(digest, hashed_identity); });
}

Result<std::vector<std::string>> TimedBlobStore::ListDigests() const {
  return Timed(&timings_.list, [&] { return inner_->ListDigests(); });
}

Result<uint64_t> TimedBlobStore::RemoveIfOlder(
    std::string_view digest, std::chrono::system_clock::time_point cutoff) const {
  return Timed(&timings_.remove, [&] { return inner_->RemoveIfOlder(digest, cutoff); });
}

Result<std::string> TimedBlobStore::PresignGet(std::string_view digest,
                                               std::chrono::seconds expiry) const {
  return inner_->PresignGet(digest, expiry);
}

Status TimedBlobStore::PutUploadPart(std::string_view session, std::string_view name,
                                     const std::string& path) const {
  return Timed(&timings_.put, [&] { return inner_->PutUploadPart(session, name, path); });
}

Status TimedBlobStore::ConcatUploadParts(std::string_view session,
                                         const std::vector<std::string>& names,
                                         const std::string& dest,
                                         const UploadSessionFile* held) const {
  return Timed(&timings_.get,
               [&] { return inner_->ConcatUploadParts(session, names, dest, held); });
}

Status TimedBlobStore::DeleteUploadParts(std::string_view session) const {
  return Timed(&timings_.remove, [&] { return inner_->DeleteUploadParts(session); });
}

Result<std::vector<std::string>> TimedBlobStore::ListUploadPartSessions() const {
  return Timed(&timings_.list, [&] { return inner_->ListUploadPartSessions(); });
}

Result<std::unique_ptr<UploadSessionFile>> TimedBlobStore::LockSessionFile(
    std::string_view session) const {
  return inner_->LockSessionFile(session);  // local, like a temporary file: not timed
}

Result<BlobInfo> TimedBlobStore::PublishVerified(const std::string& temp_path,
                                                 const std::string& digest, uint64_t size,
                                                 bool synced) const {
  return Timed(&timings_.put,
               [&] { return inner_->PublishVerified(temp_path, digest, size, synced); });
}

Result<StoredHash> TimedBlobStore::HashStored(std::string_view digest) const {
  return Timed(&timings_.get, [&] { return inner_->HashStored(digest); });
}

}  // namespace blz::store
