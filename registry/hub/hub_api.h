// The Hugging Face Hub read API on blz's repositories, so that huggingface_hub (1.x; also
// `transformers`) with HF_ENDPOINT=<registry URL> and @huggingface/hub (2.x) with hubUrl work
// unchanged. User-facing description: docs/huggingface.md. Routes (repo_id = one or two
// '/'-separated components, a blz repository name; only model repositories exist):
//
//   GET  /api/whoami-v2                                       who the token is (401 without one)
//   GET  /api/models/{repo_id}[/revision/{rev}]               id, sha, siblings, lastModified, ...
//   GET  /api/models/{repo_id}/tree/{rev}[/{path}]            ?recursive=, ?expand=, ?cursor=,
//                                                             ?limit=; Link: <...>; rel="next"
//   POST /api/models/{repo_id}/paths-info/{rev}               paths (form or JSON) -> entries
//   GET  /api/models/{repo_id}/refs                           tags as branches
//   HEAD/GET /{repo_id}/resolve/{rev}/{filename}              the file's bytes (Range: 206/416)
//
// Revisions, commit ids and "main": registry/hub/revisions.h. Files: registry/hub/version_files.h
// (resolve streams the file from the archive's pieces; HEAD opens nothing). Answers carry
// X-Repo-Commit; resolve also ETag ("<sha256>" of LFS files with X-Linked-Etag and
// X-Linked-Size, else "<git blob sha1>"), Accept-Ranges and Content-Length. No X-Xet-* header
// and no xetHash is ever sent (clients would switch to Xet storage).
//
// Errors (JSON {"error": message}, X-Error-Code and X-Error-Message as the Hub sends them):
//   401 RepoNotFound       no credentials on a private registry
//   401 (no code)          bad credentials: "Invalid credentials in Authorization header"
//   404 RepoNotFound       no such repository, or one the caller may not pull (the same answer)
//   404 RevisionNotFound   unknown revision ("Invalid rev id: <rev>")
//   404 EntryNotFound      no such file at that revision (with X-Repo-Commit: clients cache the
//                          miss, e.g. transformers' optional generation_config.json)
//   400 (no code)          a malformed path (.., ., empty components, backslashes, absolute),
//                          a repository id with a percent-encoded '/', a bad cursor or limit
//   409 (no code)          an ambiguous commit id
//   416                    an unsatisfiable Range (Content-Range: bytes */<size>)
// Authentication: registry/auth.h Authenticator::Authenticate (Bearer blz API or access tokens,
// Basic); reads need pull on the repository (HeldActions), as for the OCI API.
#ifndef BLZ_REGISTRY_HUB_HUB_API_H_
#define BLZ_REGISTRY_HUB_HUB_API_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "registry/auth.h"
#include "registry/http_message.h"
#include "registry/hub/version_files.h"
#include "store/metadata_db.h"

namespace blz::registry::hub {

// What the Hub handlers need from the registry (all must outlive the call).
struct HubContext {
  store::MetadataDb* db = nullptr;
  VersionFiles* files = nullptr;
  const Authenticator* auth = nullptr;
  bool private_mode = false;
  // "http(s)://host[:port]" for absolute links (pagination); "" = the request's scheme + Host.
  std::string public_url;
};

// Hub tree pages: entries per page by default and at most.
inline constexpr uint64_t kTreePageSize = 1000;
inline constexpr uint64_t kMaxTreePageSize = 10000;
// The largest paths-info request body read.
inline constexpr uint64_t kMaxHubBodyBytes = 1 << 20;

// Is `target` (origin-form) a Hub API request: its path starts with "/api/" or has "resolve" as
// its second or third component? Everything else is the OCI API's.
bool IsHubTarget(std::string_view target);

// Does the request stream or compute enough to belong to the heavy handler pool (a resolve GET,
// which may rebuild an archive)?
bool IsHeavyHubRequest(const RequestHead& head);

// Answers a Hub API request (see the file comment). Never throws; a HEAD's Response has
// head_size set (the session sends no body).
Response HandleHub(const HubContext& ctx, const Request& request);

}  // namespace blz::registry::hub

#endif  // BLZ_REGISTRY_HUB_HUB_API_H_
