// OCI distribution operations against one blz registry (docs/registry-api.md).
//
// Every request carries `Authorization: Bearer <token>` when a token is configured. Failures
// the server reports are turned into a Status whose message starts with the action ("push" or
// "pull" or "ping") and quotes the OCI error body, e.g.
//   "push refused: UNAUTHORIZED: authentication required (no token for 127.0.0.1:5000: run
//    `blz login 127.0.0.1:5000`)"
// HTTP status -> code: 401/403 kUnauthorized; 404 kNotFound; 400 DIGEST_INVALID
// kDigestMismatch; other 400 kInvalidArgument; 413 kTooLarge; 416 kInvalidArgument;
// 5xx kUnavailable; anything else unexpected kUnavailable. Transport failures come from
// HttpClient (kUnavailable / kIOError).
#ifndef BLZ_CLIENT_REGISTRY_CLIENT_H_
#define BLZ_CLIENT_REGISTRY_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/http_client.h"
#include "client/reference.h"
#include "core/status.h"

namespace blz::client {

struct RegistryClientOptions {
  HttpClientOptions http;
  std::string token;  // bearer token; empty = anonymous
};

// Turns a non-success response into a Status (see the file comment). `action` is "push",
// "pull", ... ; `what` names the object ("blob sha256:...", "manifest org/model:v1").
Status StatusFromResponse(const HttpResponse& response, std::string_view action,
                          std::string_view what, bool have_token, std::string_view registry);

// Redirects on blob and patch GETs (as OCI registries send to object stores): 301, 302, 303,
// 307 and 308 answers to a GET are followed, at most kMaxRedirects hops, to an absolute
// "http(s)://HOST[:PORT]/PATH" Location (another host or scheme allowed) or an absolute path
// on the same host. The Authorization header is dropped as soon as the scheme, host or port
// differs from the registry's. Errors: kUnavailable for too many hops, a missing or
// unusable Location; transport errors from HttpClient.
inline constexpr int kMaxRedirects = 5;

// Sends GET `request` through `first` (the registry's connection, registry `origin`) and
// follows redirects, connecting with `options` (tls chosen per hop from the Location's scheme).
// `transfer` applies to every hop (its sink and on_headers see only the final answer's body;
// on_headers also sees the redirect answers). Returns the final response.
Result<HttpResponse> SendGetFollowingRedirects(HttpClient* first, const RegistryAddress& origin,
                                               HttpRequest request,
                                               const HttpClientOptions& options,
                                               const TransferOptions& transfer);

struct BlobStat {
  bool exists = false;
  uint64_t size = 0;  // Content-Length when it exists
  // The answer carried `Blz-Verifies-Archives: true`: the registry accepts a model manifest
  // only once its archive passed `blz verify` (docs/registry-api.md, "Model manifests").
  bool registry_verifies_archives = false;
};

struct ManifestResponse {
  std::string bytes;       // the manifest exactly as served
  std::string digest;      // "sha256:<hex>" of `bytes` (checked against Docker-Content-Digest)
  std::string media_type;  // Content-Type
};

// A model version as GET /v2/<name>/blz/bases describes it.
struct RemoteVersion {
  std::string digest;           // archive digest
  std::string repository;       // a repository (readable by the caller) it is a version of
  std::string name;             // NAME:TAG or NAME@<12 hex> as the registry names it ("" from
                                // an older registry)
  std::string manifest_digest;  // its manifest in that repository
  uint64_t size = 0;            // archive bytes
  std::string structure;        // structural hash (64 hex), "" when unknown
  bool same_structure = false;  // (bases only) same structure as the target
  std::optional<uint64_t> patch_size;  // (bases only) size of the cached patch to the target
};

// The registry's answer to "which of the archives I hold should I patch from?".
struct BaseAdvice {
  RemoteVersion to;                  // the target version
  std::vector<RemoteVersion> bases;  // usable held archives, best first (may be empty)
};

struct PatchDownload {
  uint64_t bytes = 0;       // size of the patch written
  std::string digest;       // "sha256:<hex>" of the patch bytes
  bool server_cache_hit = false;  // Blz-Patch-Cache: hit
};

class RegistryClient {
 public:
  // Talks HTTPS when `registry.tls` (options.http.tls is set from it), else plain HTTP.
  RegistryClient(RegistryAddress registry, RegistryClientOptions options);

  const RegistryAddress& registry() const { return registry_; }

  // GET /v2/. With a token: OK when the registry answers 200 (the token is valid);
  // kUnauthorized "... the token for HOST:PORT was rejected" on 401. Without one: OK on 200,
  // and on 401 too (the registry is reachable and challenges anonymous clients, as OCI
  // registries do: anonymous pulls may still be allowed). Other statuses and transport
  // failures: see the file comment.
  Status Ping();

  // The token admin API (docs/registry-api.md, "Token admin API"); the client's token must
  // grant "admin". POST /v2/_blz/tokens: a new token named `name` with `scope`, expiring
  // `expires_in` seconds from now (0 = never). Returns the server's JSON answer
  // {name, token, scope, created, expires}.
  Result<nlohmann::json> CreateToken(std::string_view name, std::string_view scope,
                                     int64_t expires_in);
  // GET /v2/_blz/tokens: {"tokens":[{name, scope, created, expires, expired}]}.
  Result<nlohmann::json> ListTokens();
  // DELETE /v2/_blz/tokens/<name>. kNotFound when no active token has that name.
  Status RevokeToken(std::string_view name);

  // HEAD /v2/<name>/blobs/<digest>: exists (200) or not (404).
  Result<BlobStat> HeadBlob(std::string_view name, std::string_view digest);

  // GET /v2/<name>/blobs/<digest> into `dest_path`, written atomically: the bytes are hashed
  // while they stream and the file appears only when their SHA-256 equals `digest` (else
  // kDigestMismatch and nothing is left behind). `expected_size` (0 = unknown) caps the body
  // and must equal Content-Length when both are known (kCorruption otherwise). An existing
  // dest_path is replaced (content-addressed: the bytes are identical by construction).
  Status GetBlob(std::string_view name, std::string_view digest, uint64_t expected_size,
                 const std::string& dest_path, const ProgressFn& progress = nullptr);

  // Asks the registry to link a blob it already holds into `name` without an upload:
  // POST /v2/<name>/blobs/uploads/?mount=<digest> (an automatic cross-repository mount; blz's
  // store is content-addressed, so a blob pushed to any repository need not be sent again).
  // true: 201, the blob is now in `name`; false: the registry opened an upload session instead
  // (202; the session is cancelled again) and the blob must be uploaded.
  Result<bool> MountBlob(std::string_view name, std::string_view digest);

  // Uploads a blob: POST /v2/<name>/blobs/uploads/, then PUT <location>?digest=<digest> with
  // the body streamed from `file_path` (or from `data`). Checks the 201 answer and its
  // Docker-Content-Digest.
  Status UploadBlobFromFile(std::string_view name, std::string_view digest,
                            const std::string& file_path, const ProgressFn& progress = nullptr);
  Status UploadBlob(std::string_view name, std::string_view digest, std::string_view data);

  // PUT /v2/<name>/manifests/<reference>. Returns the manifest digest (the server's
  // Docker-Content-Digest, which must equal the SHA-256 of `manifest_json`).
  Result<std::string> PutManifest(std::string_view name, std::string_view reference,
                                  std::string_view manifest_json);

  // GET /v2/<name>/manifests/<reference> (at most kMaxManifestBytes). When `reference` is a
  // digest the body must hash to it (kDigestMismatch).
  Result<ManifestResponse> GetManifest(std::string_view name, std::string_view reference);

  // DELETE /v2/<name>/manifests/<digest>: the manifest, the tags that point at it and the model
  // version it records (202). kNotFound when the repository has no such manifest.
  Status DeleteManifest(std::string_view name, std::string_view digest);

  // POST /v2/_blz/gc[?dry_run=true]: one garbage collection; returns the report's JSON text.
  Result<std::string> CollectGarbage(bool dry_run);

  // GET /v2/<name>/tags/list, following pagination (Link: <...>; rel="next").
  Result<std::vector<std::string>> ListTags(std::string_view name);

  // GET /v2/<name>/blz/patch?from=<from>&to=<to> into `dest_path` (atomically, like GetBlob;
  // the Docker-Content-Digest of the patch, when sent, is verified). kNotFound when the server
  // has no such patch. A patch whose Content-Length exceeds `max_bytes` (0 = no cap) is not
  // downloaded: kTooLarge. With an empty `from_digest` it asks for the full patch of `to`
  // (GET .../blz/patch?to=<to>: the archive compressed per tensor, needing no base); a server
  // that does not serve those (404, 405, or an older blz server's 400 DIGEST_INVALID) gives
  // kUnsupported.
  Result<PatchDownload> GetPatch(std::string_view name, std::string_view from_digest,
                                 std::string_view to_digest, const std::string& dest_path,
                                 uint64_t max_bytes, const ProgressFn& progress = nullptr);

  // GET /v2/<name>/blz/bases?to=<to>&have=<d1>,... (docs/registry-api.md, "Choosing a base"):
  // the target version `to` (an archive digest) and, of the archives in `have` (at most 64),
  // those the registry can patch from, best first. kNotFound when `to` is not a version of
  // `name`; kUnsupported when the registry has no such endpoint (an older blz, or another
  // OCI registry); kCorruption for a malformed answer.
  Result<BaseAdvice> GetBases(std::string_view name, std::string_view to,
                              const std::vector<std::string>& have);

  // GET /v2/<name>/blz/bases?push=1&have=<d1>,...&structure=<hash>&to-push=<digest>
  // (docs/registry-api.md, "Choosing a base for a push"): of the archives in `have` (at most
  // 64), those the registry holds as versions the caller may read and would apply a patch
  // upload against, best first. `structure` (64 hex, or "") is the pushed archive's structural
  // hash; `to_push` its digest (never proposed); `related` (&related=, a subset of `have`)
  // the archives the client found to hold most of the pushed archive's tensors, whatever their
  // structure and repository (formats/tensor_share.h). kUnsupported when the registry has no
  // such mode (an older blz answers 400, another registry 404/405); kCorruption for a
  // malformed answer or a base not offered.
  Result<std::vector<RemoteVersion>> GetPushBases(std::string_view name,
                                                  const std::vector<std::string>& have,
                                                  std::string_view structure,
                                                  std::string_view to_push,
                                                  const std::vector<std::string>& related = {});

  // GET `target` (origin-form, with ?async=1 for a computation that may take long, e.g.
  // /v2/<name>/blz/delta-report) answering a JSON object; a 202 answer (the computation still
  // runs, docs/registry-api.md "Asynchronous requests") is asked again after its Retry-After
  // (1 to 5 s), for at most `max_wait`. `what` names the document in messages. Errors: see the
  // file comment; kUnavailable when still computing after max_wait; kCorruption for a body
  // that is not a JSON object.
  Result<nlohmann::json> GetComputedJson(std::string_view target, std::string_view what,
                                         std::chrono::seconds max_wait);

  // GET /v2/_catalog, following pagination: the repositories the caller may see.
  Result<std::vector<std::string>> ListRepositories();

  // Bytes of response bodies received so far (blobs, patches, manifests).
  uint64_t bytes_received() const { return bytes_received_; }
  // Bytes of request bodies sent so far.
  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  HttpRequest NewRequest(std::string method, std::string target) const;
  Status Fail(const HttpResponse& r, std::string_view action, std::string_view what) const;
  Result<std::string> StartUpload(std::string_view name);
  Result<std::string> UploadTarget(std::string_view location, std::string_view digest) const;
  Status FinishUpload(const HttpResponse& r, std::string_view digest);
  // Sends the GET `req` and follows redirects (see SendGetFollowingRedirects).
  Result<HttpResponse> GetFollowingRedirects(const HttpRequest& req, const TransferOptions& t);

  RegistryAddress registry_;
  RegistryClientOptions options_;
  HttpClient http_;
  uint64_t bytes_received_ = 0;
  uint64_t bytes_sent_ = 0;
};

}  // namespace blz::client

#endif  // BLZ_CLIENT_REGISTRY_CLIENT_H_
