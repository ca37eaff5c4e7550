// Blobs: GET, HEAD and DELETE /v2/<name>/blobs/<digest> (docs/registry-api.md). A blob is
// readable in a repository while it is linked there (store/metadata_db.h LinkBlob).
#include <nlohmann/json.hpp>

#include "registry/errors.h"
#include "registry/ollama/ollama_handlers.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"

namespace blz::registry {

namespace {
using json = nlohmann::json;
using internal::ServeFile;
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
