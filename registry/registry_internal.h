// Internal to the registry's handler files (registry/registry.cc, registry/*_handlers.cc): the
// parsed route of a request and the helpers several handler files share. Not part of the
// registry's API; include only from registry/*.cc.
#ifndef BLZ_REGISTRY_REGISTRY_INTERNAL_H_
#define BLZ_REGISTRY_REGISTRY_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "registry/auth.h"
#include "registry/http_message.h"
#include "registry/registry.h"
#include "registry/wire.h"

namespace blz::registry {

// A request's endpoint, as Registry::Prepare parsed it from the request target.
struct Registry::Route {
  enum class Kind : uint8_t {
    kPing,           // /v2/
    kCatalog,        // /v2/_catalog
    kBlob,           // /v2/<name>/blobs/<digest>
    kUploadStart,    // /v2/<name>/blobs/uploads/
    kUploadSession,  // /v2/<name>/blobs/uploads/<uuid>
    kManifest,       // /v2/<name>/manifests/<reference>
    kTags,           // /v2/<name>/tags/list
    kReferrers,      // /v2/<name>/referrers/<digest>
    kPatch,          // /v2/<name>/blz/patch
    kDiff,           // /v2/<name>/blz/diff
    kBases,          // /v2/<name>/blz/bases (which held version to patch from)
    kStructures,     // /v2/_blz/structures/<structural hash>
    kStorage,        // /v2/_blz/storage
    kGc,             // /v2/_blz/gc
    kToken,          // /v2/_blz/token (the token endpoint, registry/auth.h)
    kTokens,         // /v2/_blz/tokens (token admin API: list, create)
    kTokenName,      // /v2/_blz/tokens/<name> (revoke); the name is in `ref`
    // Browsing (registry/browse_handlers.cc, the web view's JSON):
    kRepositories,   // /v2/_blz/repositories (catalog with summaries)
    kVersions,       // /v2/<name>/blz/versions
    kVersion,        // /v2/<name>/blz/version?digest=
    kStats,          // /v2/<name>/blz/stats?digest=
    kPatchReport,    // /v2/<name>/blz/patch-report?from=&to=
    // Lossy deltas (registry/delta_handlers.cc):
    kDelta,          // /v2/<name>/blz/delta?from=&to=&strategy=
    kDeltaReport,    // /v2/<name>/blz/delta-report?from=&to=&strategy=
  };
  Kind kind = Kind::kPing;
  std::string method;
  std::string name;
  std::string ref;  // blob digest, upload uuid, manifest reference, subject digest or
                    // structural hash
  Target target;
  std::string principal;  // who is asking (registry/auth.h Principal::Describe), for logs
  // Who is asking, as Prepare authenticated it (anonymous for the token endpoint): handlers
  // decide what else the caller may read from this, without authenticating again.
  Principal caller;
  // Whom rate limits charge (registry/rate_limiter.h): "token:<name>" for a token, else
  // "addr:<client address>" (RequestHead::client_address).
  std::string client;
  // A blob upload with ?mount=&from=<repository>: may the caller pull from <repository>?
  // (Registry::Prepare; else the mount falls back to an upload.)
  bool mount_source_readable = false;

  std::optional<std::string> Query(const std::string& key) const {
    auto it = target.query.find(key);
    if (it == target.query.end()) return std::nullopt;
    return it->second;
  }
};

namespace internal {

// Did the request ask to run in the background (?async=1 or ?async=true)?
inline bool IsAsync(const Registry::Route& route) {
  const std::optional<std::string> a = route.Query("async");
  return a.has_value() && (*a == "1" || *a == "true");
}

// May route.caller list `repository`: does it hold pull there (registry/auth.h HeldActions: its
// grants, or any repository of a public registry), or is it an access token with the catalog
// claim whose API token may pull there? Every listing that names repositories (catalog,
// structure listings, browsing) shows only those.
bool MayPull(const Registry::Route& route, std::string_view repository, bool private_mode);
// `names` without those route.caller may not pull (MayPull), in their order.
std::vector<std::string> PullableNames(const Registry::Route& route,
                                       std::vector<std::string> names, bool private_mode);

// Is `s` an upload session id as NewUuid makes them (8-4-4-4-12 lower-case hex digits)?
bool IsUuid(std::string_view s);

// Upload progress as the OCI spec's Range header: "0-<last byte>" ("0-0" when empty).
std::string UploadRange(uint64_t size);

// 200 / 206 / 416 for a stored file, honouring a single-range Range header.
Response ServeFile(const std::string& path, uint64_t size, const RequestHead& head,
                   std::string content_type);

// A response with `status` and neither headers nor body.
Response Empty(int status);

// A (limit, last) pair from ?n=&last=. Errors: kInvalidArgument.
Result<std::pair<std::optional<uint64_t>, std::string>> ParsePagination(
    const Registry::Route& route);

// `text` with every occurrence of `from` replaced by `to` (server-side paths by digests, so
// that error messages sent to clients do not reveal the data directory).
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to);

// The structural hash (64 lower-case hex, formats/identify.h) of the .blz archive stored at
// `path` under `digest`. Reads the archive's header only. Errors: those of BlzArchive::Open and
// StructuralInputFromArchive, naming `digest` instead of `path`.
Result<std::string> ArchiveStructuralHash(const std::string& path, const std::string& digest);

// How answers name a version (registry/base_handlers.cc): "NAME:TAG" ("latest" when it is one
// of `tags`, else the first), or "NAME@<first 12 hex of archive_digest>" when untagged.
std::string VersionDisplayName(const std::string& repository, const std::string& archive_digest,
                               const std::vector<std::string>& tags);

}  // namespace internal
}  // namespace blz::registry

#endif  // BLZ_REGISTRY_REGISTRY_INTERNAL_H_
