// Blobs: GET, HEAD and DELETE /v2/<name>/blobs/<digest> (docs/registry-api.md). A blob is
// readable in a repository while it is linked there (store/metadata_db.h LinkBlob).
#include <nlohmann/json.hpp>

#include "core/digest.h"
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
  // An archive stored as a full patch: HEAD answers from its header, GET from a rebuilt copy.
  Result<store::BlobInfo> info =
      route.method == "HEAD" ? storage_->Stat(route.ref) : storage_->File(route.ref);
  if (info.ok() && info->path.empty()) info->path = "/dev/null";  // HEAD: never opened
  if (!info.ok()) {
    // Stored bytes found damaged (verify on read; now quarantined): the server's fault, never
    // a 200 with wrong bytes. docs/registry-api.md, "Storage integrity".
    const Code code = info.status().code();
    if (code == Code::kCorruption || code == Code::kDigestMismatch) {
      return ErrorResponse(OciError::kUnknown, info.status().message(),
                           json{{"digest", route.ref}, {"damaged", true}});
    }
    return ErrorResponse(OciErrorFor(info.status(), ErrorContext::kBlob), info.status().message(),
                         json{{"digest", route.ref}});
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
