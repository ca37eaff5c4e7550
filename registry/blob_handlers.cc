// Blobs: GET and HEAD /v2/<name>/blobs/<digest> (docs/registry-api.md).
#include <nlohmann/json.hpp>

#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"

namespace blz::registry {

namespace {
using json = nlohmann::json;
using internal::ServeFile;
}  // namespace

Response Registry::GetBlob(const Route& route, const RequestHead& head) {
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

}  // namespace blz::registry
