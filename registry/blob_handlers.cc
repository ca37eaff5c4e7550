// Blobs: GET, HEAD and DELETE /v2/<name>/blobs/<digest> (docs/registry-api.md). A blob is
// readable in a repository while it is linked there (store/metadata_db.h LinkBlob).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <memory>

#include "core/digest.h"
#include "core/ordered_pipeline.h"
#include "patcher/archive_reader.h"
#include "patcher/tensor_codec.h"
#include "registry/byte_ranges.h"
#include "registry/errors.h"
#include "registry/ollama/ollama_handlers.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"

namespace blz::registry {

namespace {
using json = nlohmann::json;
using internal::ServeFile;

// A blob's bytes as the store streams them (BlobStore::OpenRange), pulled by the session as the
// client takes them. When the range is the whole of a sha256 blob, the bytes are hashed on the
// way (blobs of at most ArchiveStorageOptions::verify_on_read_bytes, as the fs path checks
// them) and the last piece is handed out only if they hash to the blob's name: a damaged stored
// object then ends the response early (the client sees a short body, never a complete wrong
// one).
class StreamedBlob final : public BodyProducer {
 public:
  StreamedBlob(std::unique_ptr<store::BlobReader> reader, std::string digest, uint64_t length,
               bool verify)
      : reader_(std::move(reader)), digest_(std::move(digest)), left_(length), verify_(verify) {}

  Result<ByteSpan> Next() override {
    BLZ_ASSIGN_OR_RETURN(ByteSpan piece, reader_->Next());
    left_ -= std::min<uint64_t>(left_, piece.size());
    if (verify_ && !piece.empty()) {
      hash_.Update(piece);
      if (left_ == 0) {
        const std::string actual = MakeDigest(hash_.FinishHex());
        if (actual != digest_) {
          return DigestMismatch("blob " + digest_ + " is damaged in the store: its bytes hash to " +
                                actual + "; the response was cut short");
        }
      }
    }
    return piece;
  }

 private:
  std::unique_ptr<store::BlobReader> reader_;
  std::string digest_;
  uint64_t left_;
  bool verify_;
  Sha256 hash_;
};

// A blob GET on a store that streams reads (store::BlobStore::streams_reads: s3): the requested
// range proxied from one ranged GET, in bounded pieces; nothing is downloaded whole or cached.
// nullopt when the store does not have the blob (an archive whose raw blob was dropped: the
// caller serves it from its full patch).
std::optional<Response> StreamBlob(const store::BlobStore& blobs, ArchiveStorage& storage,
                                   const std::string& digest, const RequestHead& head,
                                   uint64_t verify_bytes) {
  auto failed = [&](const Status& status) {
    return ErrorResponse(OciErrorFor(status, ErrorContext::kBlob), status.message(),
                         json{{"digest", digest}});
  };
  // The raw archive stays (on every replica) while the stream opens.
  if (Status held = storage.MarkServed(digest); !held.ok()) return failed(held);
  Result<store::BlobInfo> stored = blobs.Stat(digest);
  if (!stored.ok()) {
    if (stored.status().code() == Code::kNotFound) return std::nullopt;
    return failed(stored.status());
  }
  Response res;
  std::optional<RangeSpan> span = SelectRange(head.Get("Range"), stored->size, &res);
  if (!span) {
    Response err = ErrorResponse(OciError::kRangeInvalid,
                                 "requested range not satisfiable for " +
                                     std::to_string(stored->size) + " bytes",
                                 json{{"size", stored->size}});
    SetUnsatisfiableRange(stored->size, &err);
    return err;
  }
  Result<std::unique_ptr<store::BlobReader>> reader =
      blobs.OpenRange(digest, span->offset, span->length);
  if (!reader.ok()) {
    if (reader.status().code() == Code::kNotFound) return std::nullopt;  // dropped meanwhile
    return failed(reader.status());
  }
  const bool verify = span->offset == 0 && span->length == stored->size &&
                      stored->size <= verify_bytes && digest.rfind("sha256:", 0) == 0;
  res.producer =
      std::make_shared<StreamedBlob>(std::move(*reader), digest, span->length, verify);
  res.file_length = span->length;
  res.Set("Content-Type", "application/octet-stream");
  res.Set("Docker-Content-Digest", digest);
  res.Set("ETag", "\"" + digest + "\"");
  return res;
}

// An archive stored only as patches (its full patch, or a chain: ArchiveStorage::OpenReader),
// the requested range decoded chunk by chunk as the client takes it, nothing rebuilt first. A
// whole GET is hashed on the way (the last piece is handed out only if the bytes hash to the
// digest: a damaged store ends the response early) and copied into the cache as it goes
// (ArchiveStorage::CacheCopy, published after that check), so the next whole GET is a file.
class StreamedArchive final : public BodyProducer {
 public:
  // `next`: the bytes in order (a Cursor's or an ArchiveStream's Next).
  StreamedArchive(ArchiveStorage* storage, std::function<Result<ByteSpan>()> next,
                  std::string digest, uint64_t length, bool whole,
                  std::unique_ptr<ArchiveStorage::CacheCopy> copy)
      : storage_(storage),
        next_(std::move(next)),
        digest_(std::move(digest)),
        left_(length),
        whole_(whole),
        copy_(std::move(copy)) {}

  Result<ByteSpan> Next() override {
    Result<ByteSpan> piece = next_();
    if (!piece.ok()) {
      copy_.reset();  // removed unpublished
      Status s = piece.status();
      // A damaged stored patch: quarantined now, as a rebuild would (the next request is
      // answered from what remains, or 404).
      if (s.code() == Code::kCorruption) {
        Status quarantined = storage_->QuarantineDamagedForms(digest_);
        if (!quarantined.ok()) s = quarantined;
      }
      return s.WithContext("streaming archive " + digest_ + " from its stored form");
    }
    left_ -= std::min<uint64_t>(left_, piece->size());
    if (!whole_ || piece->empty()) return piece;
    hash_.Update(*piece);
    // A failed copy is logged by it; the response goes on without.
    if (copy_ != nullptr && !copy_->Append(*piece).ok()) copy_.reset();
    if (left_ == 0) {
      const std::string actual = MakeDigest(hash_.FinishHex());
      if (actual != digest_) {
        copy_.reset();
        return DigestMismatch("archive " + digest_ + " decoded from its stored form hashes to " +
                              actual + "; the response was cut short");
      }
      if (copy_ != nullptr) {
        (void)copy_->Publish();  // logged by the copy when it fails: only a cache entry lost
        copy_.reset();
      }
    }
    return piece;
  }

 private:
  ArchiveStorage* storage_;  // outlives the response (the registry outlives its sessions)
  std::function<Result<ByteSpan>()> next_;
  std::string digest_;
  uint64_t left_;
  bool whole_;
  std::unique_ptr<ArchiveStorage::CacheCopy> copy_;
  Sha256 hash_;
};

// Worker threads decoding one streamed archive (whatever the number of cores): each adds
// kWindowPerThread ranges in flight (about 4 MiB resident each), so a download holds about
// (4 x 2 + 3) x 4 MiB.
constexpr unsigned kStreamThreads = 2;

// The error response for a blob whose stored bytes cannot be served.
Response StoredBlobError(const Status& status, const std::string& digest) {
  // Stored bytes found damaged (verify on read; now quarantined): the server's fault, never
  // a 200 with wrong bytes. docs/registry-api.md, "Storage integrity".
  const Code code = status.code();
  if (code == Code::kCorruption || code == Code::kDigestMismatch) {
    return ErrorResponse(OciError::kUnknown, status.message(),
                         json{{"digest", digest}, {"damaged", true}});
  }
  return ErrorResponse(OciErrorFor(status, ErrorContext::kBlob), status.message(),
                       json{{"digest", digest}});
}

// A blob GET served without rebuilding anything: the stored file when there is one (the raw
// blob, a cached copy), else an archive stored as patches streamed through its reader
// (StreamedArchive); the error response when a stored file is damaged (quarantined). nullopt
// when neither applies (*open_error: why the stored form could not be opened, if it was
// tried): the caller then goes through ArchiveStorage::File.
std::optional<Response> ServeWithoutRebuild(ArchiveStorage& storage, const std::string& digest,
                                            const RequestHead& head, Status* open_error) {
  if (!storage.enabled() || digest.rfind("sha256:", 0) != 0) return std::nullopt;
  Result<std::optional<store::BlobInfo>> file = storage.FileIfStored(digest);
  if (!file.ok()) return StoredBlobError(file.status(), digest);
  Response res;
  if (file->has_value()) {
    res = ServeFile((*file)->path, (*file)->size, head, "application/octet-stream");
  } else {
    Result<std::shared_ptr<const patcher::ArchiveReader>> reader = storage.OpenReader(digest);
    if (!reader.ok()) {
      // File() rebuilds what there is, and quarantines a damaged blob it finds (then says so,
      // or 404 when nothing remains: then this error, which names the damage, is the answer).
      *open_error = reader.status();
      return std::nullopt;
    }
    const uint64_t size = (*reader)->archive_size();
    std::optional<RangeSpan> span = SelectRange(head.Get("Range"), size, &res);
    if (!span) {
      Response err = ErrorResponse(OciError::kRangeInvalid,
                                   "requested range not satisfiable for " +
                                       std::to_string(size) + " bytes",
                                   json{{"size", size}});
      SetUnsatisfiableRange(size, &err);
      return err;
    }
    // A short range through a cursor on this thread; anything longer decoded ahead on up to
    // kStreamThreads workers (patcher::ArchiveStream), at about WriteArchive's speed.
    std::function<Result<ByteSpan>()> next;
    if (span->length <= patcher::kChunkBytes) {
      Result<std::unique_ptr<patcher::ArchiveReader::Cursor>> cursor =
          (*reader)->NewCursor({{span->offset, span->length}});
      if (!cursor.ok()) return std::nullopt;
      next = [c = std::shared_ptr<patcher::ArchiveReader::Cursor>(std::move(*cursor))] {
        return c->Next();
      };
    } else {
      Result<std::unique_ptr<patcher::ArchiveStream>> stream = patcher::ArchiveStream::Start(
          *reader, span->offset, span->length,
          int(std::min(ResolveThreads(0), kStreamThreads)));
      if (!stream.ok()) return StoredBlobError(stream.status(), digest);
      next = [st = std::shared_ptr<patcher::ArchiveStream>(std::move(*stream))] {
        return st->Next();
      };
    }
    const bool whole = span->offset == 0 && span->length == size;
    res.producer = std::make_shared<StreamedArchive>(
        &storage, std::move(next), digest, span->length, whole,
        whole ? storage.StartCacheCopy(digest, size) : nullptr);
    res.file_length = span->length;
    res.Set("Content-Type", "application/octet-stream");
  }
  res.Set("Docker-Content-Digest", digest);
  res.Set("ETag", "\"" + digest + "\"");
  return res;
}

}  // namespace

Response Registry::GetBlob(const Route& route, const RequestHead& head) {
  if (!IsValidOciDigest(route.ref)) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid digest '" + route.ref + "'",
                         json{{"digest", route.ref}});
  }
  Result<bool> linked = db_->BlobLinked(route.name, route.ref);
  if (!linked.ok()) return ErrorResponse(linked.status(), ErrorContext::kBlob);
  if (!*linked) {
    // Ollama's pull: the GGUF file or config of one of the repository's versions
    // (registry/ollama/ollama_handlers.h).
    std::optional<Response> r = ollama::ServeBlob(OllamaContext(), route.name, route.ref, head);
    if (r.has_value()) return std::move(*r);
    return ErrorResponse(OciError::kBlobUnknown,
                         "blob " + route.ref + " is not in repository '" + route.name + "'",
                         json{{"digest", route.ref}});
  }
  // `blz serve --redirect`: a blob the driver stores as it is goes straight from the store
  // (307 to a presigned URL); anything else (fs driver, an archive kept as a full patch) is
  // proxied below.
  if (route.method == "GET" && options_.blob_redirect_expiry.count() > 0) {
    // The raw archive stays while the client reads it.
    Status held = storage_->MarkServed(route.ref);
    Result<store::BlobInfo> stored =
        held.ok() ? blobs_->Stat(route.ref) : Result<store::BlobInfo>(held);
    Result<std::string> url = stored.ok() ? blobs_->PresignGet(route.ref, options_.blob_redirect_expiry)
                                          : Result<std::string>(stored.status());
    if (url.ok()) {
      Response res = internal::Empty(307);
      res.Set("Location", *url);
      res.Set("Docker-Content-Digest", stored->digest);
      return res;
    }
  }
  // A store where reading a blob locally means downloading it whole (s3): GETs proxy the range.
  if (route.method == "GET" && blobs_->streams_reads()) {
    std::optional<Response> streamed = StreamBlob(*blobs_, *storage_, route.ref, head,
                                                      options_.storage.verify_on_read_bytes);
    if (streamed.has_value()) return std::move(*streamed);
  }
  // The stored file, or an archive stored as patches streamed from them.
  std::optional<Response> served;
  Status open_error;  // why its stored form could not be opened for streaming
  if (route.method == "GET") {
    served = ServeWithoutRebuild(*storage_, route.ref, head, &open_error);
    if (served.has_value()) return std::move(*served);
  }
  // HEAD answers from the archive's header; a GET whose stored form could not be opened above
  // from a rebuilt copy (or the error saying why there is none).
  Result<store::BlobInfo> info =
      route.method == "HEAD" ? storage_->Stat(route.ref) : storage_->File(route.ref);
  if (info.ok() && info->path.empty()) info->path = "/dev/null";  // HEAD: never opened
  if (!info.ok()) {
    const Code open_code = open_error.code();
    if (info.status().code() == Code::kNotFound &&
        (open_code == Code::kCorruption || open_code == Code::kDigestMismatch)) {
      return StoredBlobError(open_error, route.ref);
    }
    return StoredBlobError(info.status(), route.ref);
  }
  Response res = ServeFile(info->path, info->size, head, "application/octet-stream");
  res.Set("Docker-Content-Digest", info->digest);
  res.Set("ETag", "\"" + info->digest + "\"");
  return res;
}

Response Registry::DeleteBlob(const Route& route) {
  if (!options_.allow_delete) {
    return ErrorResponse(OciError::kUnsupported, "deletes are disabled on this registry");
  }
  if (!IsValidOciDigest(route.ref)) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid digest '" + route.ref + "'",
                         json{{"digest", route.ref}});
  }
  // Only the link goes: the bytes may be shared with other repositories and stay until garbage
  // collection finds them unreferenced.
  Result<bool> unlinked = db_->UnlinkBlob(route.name, route.ref);
  if (!unlinked.ok()) return ErrorResponse(unlinked.status(), ErrorContext::kBlob);
  if (!*unlinked) {
    return ErrorResponse(OciError::kBlobUnknown,
                         "blob " + route.ref + " is not in repository '" + route.name + "'",
                         json{{"digest", route.ref}});
  }
  return internal::Empty(202);
}

}  // namespace blz::registry
