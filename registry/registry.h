// The registry's request handlers: the OCI distribution endpoints of docs/registry-api.md plus
// the blz extensions (patches, value diffs, structure listings), over a store::BlobStore and a
// store::MetadataDb.
//
// Handlers are pure with respect to the network: Handle() takes a Request description and
// returns a Response description (registry/http_message.h) and does no socket I/O, so every
// endpoint and error path is testable without sockets. The Beast session
// (registry/http_session.h) does the I/O: it reads the head, asks PlanBody() how to read the
// body (memory with a cap, or streamed into a file under <data>/uploads), then calls Handle().
//
// Thread safety: PlanBody() and Handle() may be called concurrently from any threads. Writes to
// one upload session are serialized; identical patch (or value diff) requests compute it once
// (a mutex per (from, to) pair, and a job lease in the metadata DB across the replicas that
// share it: registry/background_jobs.h SharedJobs); the metadata DB serializes itself.
//
// Layout: registry/registry.cc (construction, routing, ping, catalog) and one file of handlers
// per resource: registry/blob_handlers.cc, upload_handlers.cc, manifest_handlers.cc (manifests,
// tags), blz_handlers.cc (patches, value diffs, structures, storage status),
// browse_handlers.cc (the web view's JSON: repository and version summaries, statistics, patch
// reports, ?async=1 via registry/background_jobs.h), delta_handlers.cc (lossy deltas) and
// token_handlers.cc (token admin API);
// helpers they share are in registry/registry_internal.h.
// Who may do what is decided by registry/auth.h (called from Prepare).
#ifndef BLZ_REGISTRY_REGISTRY_H_
#define BLZ_REGISTRY_REGISTRY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/status.h"
#include "registry/archive_storage.h"
#include "registry/background_jobs.h"
#include "registry/delta_function.h"
#include "registry/garbage_collector.h"
#include "registry/http_message.h"
#include "registry/keyed_mutex.h"
#include "registry/oci_manifest.h"
#include "registry/metrics.h"
#include "registry/readiness.h"
#include "registry/storage_accounting.h"
#include "store/blob_store.h"
#include "store/metadata_db.h"

namespace blz::registry {

// Writes the patch from `base_archive` to `target_archive` (both .blz files) to `out_path`.
// The digests are the archives' ("sha256:<hex>"), verified by the blob store: the patcher
// records them instead of hashing the archives again.
using PatchFunction = std::function<Status(
    const std::string& base_archive, const std::string& base_digest,
    const std::string& target_archive, const std::string& target_digest,
    const std::string& out_path)>;

// blz::patcher::CreatePatch with default DiffOptions and the known digests (defined in registry/patch_function.cc, so
// binaries that never call it need not link the patcher's implementation).
PatchFunction PatcherPatchFunction();

// Writes the patch between two archives read as they are stored (patcher/archive_reader.h: an
// archive file, a full patch, or a chain link over its parent's reader) to `out_path`, so
// neither is rebuilt into the cache: GET /v2/<name>/blz/patch between versions stored
// compressed or chained (docs/storage.md, "Chains"). The readers' digests are the archives'.
using PatchFromReadersFunction = std::function<Status(
    std::shared_ptr<const patcher::ArchiveReader> base,
    std::shared_ptr<const patcher::ArchiveReader> target, const std::string& out_path)>;

// blz::patcher::CreatePatchFromReaders with default DiffOptions (registry/patch_function.cc).
PatchFromReadersFunction PatcherPatchFromReadersFunction();

// Rebuilds a target archive from the registry's copy of a base archive and an uploaded patch
// (POST /v2/<name>/blobs/uploads/?blz-patch-from=<base>, docs/registry-api.md "Patch
// uploads"): `patch_path` must be a patch (not a full patch) from `base_digest` to
// `target_digest` whose target has at most `max_bytes` bytes; the result is written to
// `out_path` (which must not exist) only once its SHA-256 is `target_digest`; nothing is left
// there otherwise. Errors: kCorruption / kUnsupported (not a readable blz patch, a damaged
// payload), kInvalidArgument (a full patch, or a patch against another base), kDigestMismatch
// (the patch names or rebuilds another archive), kTooLarge, kIOError. Messages may contain the
// paths (the caller replaces them).
using ApplyPatchFunction = std::function<Status(
    const std::string& base_archive, const std::string& base_digest,
    const std::string& patch_path, const std::string& target_digest, uint64_t max_bytes,
    const std::string& out_path)>;

// blz::patcher::ReadPatchInfo + ApplyPatch (registry/patch_function.cc).
ApplyPatchFunction PatcherApplyPatchFunction();

inline constexpr uint64_t kMaxBlobBytes = 64ull << 30;       // 64 GiB per blob
inline constexpr uint64_t kMaxManifestBytes = 4ull << 20;    // 4 MiB per manifest
inline constexpr uint64_t kMaxIgnoredBodyBytes = 64 << 10;   // bodies of GET & co are discarded
inline constexpr uint64_t kMaxPageSize = 10000;              // cap on ?n=
inline constexpr uint64_t kDefaultMaxUploadsPerToken = 100;
inline constexpr uint64_t kDefaultMaxUploadsPerRepository = 1000;
inline constexpr uint64_t kDefaultDeltaCacheBytes = 8ull << 30;  // 8 GiB

// Slow request bodies (registry/http_session.cc): a body must arrive at an average of at least
// kMinBodyBytesPerSecond over every kBodyRateWindow (the first window starts with the body),
// else the connection is closed and the partial body file removed. Without this, a body
// trickled at one byte per 29 s (under the 30 s inactivity timeout) would hold a connection and
// its upload file forever. 1 KiB/s over 60 s: a stall of up to 30 s after 30 s at 2 KiB/s passes.
inline constexpr uint64_t kMinBodyBytesPerSecond = 1024;
inline constexpr std::chrono::milliseconds kBodyRateWindow{60'000};
struct BodyRateLimit {
  uint64_t min_bytes_per_second = kMinBodyBytesPerSecond;  // 0 = no rate limit
  std::chrono::milliseconds window = kBodyRateWindow;       // tests lower it
};

inline constexpr char kOciManifestMediaType[] = "application/vnd.oci.image.manifest.v1+json";
inline constexpr char kBlzArtifactType[] = "application/vnd.blz.model.v1";
inline constexpr char kBlzConfigMediaType[] = "application/vnd.blz.model.config.v1+json";
inline constexpr char kBlzArchiveMediaType[] = "application/vnd.blz.archive.v1";
inline constexpr char kBlzPatchMediaType[] = "application/vnd.blz.patch.v1";
// A lossy delta (.wdelta, formats/wdelta.h) served by GET /v2/<name>/blz/delta.
inline constexpr char kBlzWdeltaMediaType[] = "application/vnd.blz.wdelta";

// The SQLite file of the metadata in the data directory (the default `blz serve --metadata`).
inline constexpr char kMetadataFileName[] = "blz.db";

struct RegistryOptions {
  // The metadata database's URL (store::MetadataDb::Open): "" = "sqlite:<data>/blz.db";
  // "postgresql://USER@HOST:PORT/DB" for a database shared by several replicas.
  std::string metadata_url;
  bool private_mode = false;  // reads need a token too
  // DELETE of manifests, tags and blobs (202); false (`blz serve --no-delete`): 405 UNSUPPORTED.
  bool allow_delete = true;
  uint64_t max_blob_bytes = kMaxBlobBytes;
  uint64_t max_manifest_bytes = kMaxManifestBytes;
  // Computes patches for GET /v2/<name>/blz/patch; empty = that endpoint answers
  // 405 UNSUPPORTED.
  PatchFunction create_patch;
  // When set, patches between archives not stored as files (full patches, chain links) are
  // computed from their stored forms through this instead of create_patch on rebuilt copies.
  PatchFromReadersFunction create_patch_from_readers;
  // Full patches (GET /v2/<name>/blz/patch?to= without from) and archives stored as verified
  // full patches (registry/archive_storage.h); incomplete (the default) = neither: the
  // endpoint answers 405 UNSUPPORTED and archives stay raw.
  FullPatchFunctions full_patch;
  // Applies patch uploads (?blz-patch-from=); empty = such uploads answer 405 UNSUPPORTED.
  ApplyPatchFunction apply_patch;
  // Computes lossy deltas for GET /v2/<name>/blz/delta and /blz/delta-report
  // (registry/delta_handlers.cc); empty = those endpoints answer 405 UNSUPPORTED.
  DeltaFunction create_delta;
  ArchiveStorageOptions storage;
  // Where blobs live (`blz serve --storage`, store/open_blob_store.h): "" = "file:" under the
  // data directory; "file:DIR"; "s3://BUCKET/PREFIX?endpoint=URL&region=R[&path_style=1]".
  std::string blob_storage;
  // Bound of a remote driver's local blob cache (<data>/cache/blobs).
  uint64_t blob_cache_bytes = 8ull << 30;
  // `blz serve --redirect`: blob GETs answer 307 to a presigned URL valid this long when the
  // driver has them (s3); 0 = proxy every GET (the default). At most 20 minutes.
  std::chrono::seconds blob_redirect_expiry{0};
  // Upload sessions left unfinished longer than this are deleted (row and file): at Open, and
  // at most hourly when a session is started. distribution's default (uploadpurging) is a week.
  std::chrono::seconds upload_max_age{7 * 24 * 3600};
  // Garbage collection (registry/garbage_collector.h): unreferenced blobs younger than this stay.
  std::chrono::milliseconds gc_grace{std::chrono::hours(1)};
  // The minimum rate at which request bodies must arrive (see kMinBodyBytesPerSecond).
  BodyRateLimit body_rate;
  // How clients reach the registry, "http(s)://host[:port]": the realm of auth challenges is
  // this + "/v2/_blz/token" (registry/auth.h). "" = "http://" + the request's Host header.
  std::string public_url;
  // ?async=1 requests (docs/registry-api.md, "Asynchronous requests"): how long a request waits
  // for its computation before answering 202, and how many computations run at once.
  std::chrono::milliseconds async_wait{1000};
  unsigned background_workers = 2;
  // Leases on computations and garbage collection shared with the other replicas of the
  // metadata DB (registry/background_jobs.h, SharedJobs).
  LeaseOptions job_leases;
  // Quotas and limits (docs/registry-api.md, "Quotas and limits"; `blz serve` flags):
  // open upload sessions per token and per repository (0 = no cap): over it, 429
  // TOOMANYREQUESTS; sessions without a byte for upload_idle_timeout are deleted.
  uint64_t max_uploads_per_token = kDefaultMaxUploadsPerToken;
  uint64_t max_uploads_per_repository = kDefaultMaxUploadsPerRepository;
  std::chrono::seconds upload_idle_timeout{24 * 3600};
  // Bytes of cached lossy deltas kept; past it, the least recently used are evicted (their
  // blobs removed). 0 = no bound.
  uint64_t delta_cache_bytes = kDefaultDeltaCacheBytes;
  // Tests: called by the eviction with each evicted delta's blob digest, after its row is gone
  // and before its blob is deleted.
  std::function<void(const std::string&)> before_delta_blob_delete;
  // New derived computations (patches, value diffs, statistics, lossy deltas not cached yet)
  // per client (registry/rate_limiter.h): `computation_burst` at once, refilled at
  // `computations_per_minute`; over it, 429 with Retry-After. Admin tokens are not limited.
  // 0 (either) = no limit.
  double computations_per_minute = 10;
  uint64_t computation_burst = 30;
};

class Authenticator;   // registry/auth.h
namespace hub {
class VersionFiles;    // registry/hub/version_files.h
}  // namespace hub
class BackgroundJobs;  // registry/background_jobs.h
class RateLimiter;     // registry/rate_limiter.h
namespace ollama {
struct Context;  // registry/ollama/ollama_handlers.h
class ViewCache;
}  // namespace ollama

class Registry {
 public:
  // Opens (creating when needed) the data directory: <data>/blobs, <data>/uploads, and the
  // metadata DB options.metadata_url (default <data>/blz.db; migrated). Leftover temporary files in <data>/uploads (not
  // upload sessions) are removed, and so are upload sessions older than
  // options.upload_max_age or idle, and upload parts without a session. Versions without a structural hash (rows of a schema-1 DB) get
  // one from their archive's header; those whose archive is missing or cannot be identified
  // stay without (and are retried at the next Open). The archive storage is opened
  // (<data>/cache, registry/archive_storage.h) and archives still stored raw are queued for
  // compression. The auth secret is read from the metadata DB, created (or imported from an
  // older blz's <data>/auth_secret) on first use (registry/auth.h). The blob store is
  // options.blob_storage (store/open_blob_store.h), checked reachable first. Errors: those of
  // store::OpenBlobStore and BlobStore::CheckReachable (kUnauthorized: refused S3 keys),
  // MetadataDb::Open,
  // ArchiveStorage::Open and Authenticator::Open (a bad options.public_url), and metadata DB
  // failures while backfilling.
  static Result<std::unique_ptr<Registry>> Open(const std::string& data_dir,
                                                RegistryOptions options);
  ~Registry();

  // Decides how to read the body of a request from its head: into memory with a cap, or
  // streamed into a new file under <data>/uploads (blob uploads), or not at all (`reject` set:
  // bad route, bad name, missing token, unknown upload session, out-of-order chunk, body over
  // its cap). Does not create the file; for an upload's chunk of known length it may open
  // (creating) and lock the session's one file instead (BodyPlan::session_file), reading the
  // session's row again under the lock.
  BodyPlan PlanBody(const RequestHead& head);

  // Handles a complete request. Never throws. The caller removes request.body_file afterwards
  // if it still exists (handlers move it into the blob store when they publish it).
  Response Handle(const Request& request);

  // Creates the full-access token named "admin" unless an unrevoked one exists (so revoking
  // it and restarting the server prints a new one). Returns the new token, or nullopt when an
  // admin token already existed, or another replica on the same database created it first.
  Result<std::optional<std::string>> EnsureAdminToken();

  // Runs one garbage collection (registry/garbage_collector.h) with options_.gc_grace; one at a
  // time in this process (a second call waits for the first) and one at a time across the
  // replicas of the metadata DB (the job lease "gc": while another replica holds it,
  // kUnavailable naming that replica). Also POST /v2/_blz/gc. Unless `dry_run`, first
  // evicts cached lossy deltas beyond options_.delta_cache_bytes (EvictLossyDeltas).
  Result<GcReport> CollectGarbage(bool dry_run);

  const std::string& data_dir() const { return data_dir_; }
  store::BlobStore& blobs() { return *blobs_; }
  store::MetadataDb& db() { return *db_; }
  const RegistryOptions& options() const { return options_; }
  // How archives are stored (full patches, the rebuilt-archive cache, background compression).
  ArchiveStorage& storage() { return *storage_; }
  // The files of stored versions, listed and read by range (the Hugging Face Hub API,
  // registry/hub/; Ollama blobs).
  hub::VersionFiles& version_files() { return *version_files_; }

  // Patch computations performed so far (cache misses that succeeded); for tests and logs.
  uint64_t patches_computed() const;
  // Value diff computations performed so far (cache misses that succeeded).
  uint64_t value_diffs_computed() const { return value_diffs_computed_.load(); }
  // Tensor statistics computations performed so far (cache misses that succeeded).
  uint64_t stats_computed() const { return stats_computed_.load(); }
  // Lossy delta computations performed so far (cache misses that succeeded).
  uint64_t deltas_computed() const { return deltas_computed_.load(); }
  // Cluster-wide leases of this replica (computations, garbage collection).
  SharedJobs& shared_jobs() { return *shared_jobs_; }
  // The server's counters (GET /metrics, registry/metrics.h): the session records requests,
  // the handlers cache hits; garbage collection reports each run with metrics().RecordGc().
  Metrics& metrics() { return metrics_; }
  // The /metrics gauges' account of bytes at rest (registry/storage_accounting.h), reused
  // for kStorageAccountTtl.
  StorageAccountCache& storage_accounts() { return storage_accounts_; }
  // GET /readyz and blz_ready (registry/readiness.h): the metadata DB and the blob store.
  ReadinessProbe& readiness() { return *readiness_; }
  // Credentials and scopes (registry/auth.h), for handlers served outside Handle (/readyz).
  const Authenticator& auth() const { return *auth_; }

  struct Route;  // defined in registry/registry_internal.h
  struct DeltaQuery;  // defined in registry/delta_handlers.cc

 private:
  Registry(std::string data_dir, RegistryOptions options, std::unique_ptr<store::BlobStore> blobs,
           std::unique_ptr<store::MetadataDb> db);

  // Routes, checks the method, the token and the name. nullopt + *error set on failure.
  std::optional<Route> Prepare(const RequestHead& head, Response* error);
  Response Dispatch(const Route& route, const Request& request);
  BodyPlan PlanBodyUnchecked(const RequestHead& head);

  Response Ping(const Route& route);
  Response Catalog(const Route& route);
  Response GetBlob(const Route& route, const RequestHead& head);
  Response StartUpload(const Route& route, const Request& request);
  Response UploadStatus(const Route& route);
  Response PatchUpload(const Route& route, const Request& request);
  Response FinishUpload(const Route& route, const Request& request);
  Response CancelUpload(const Route& route);
  // Is route.ref an open upload session of route.name? REQUIRES: its upload lock is held.
  bool UploadSessionBelongs(const Route& route);
  Response PutManifest(const Route& route, const Request& request);
  // PutManifest's checks of what a manifest references (registry/manifest_handlers.cc). Each
  // adds the blobs to link to *put, or sets *error and returns false.
  // A blob: linked into `repository`, present, of `size` bytes (else MANIFEST_BLOB_UNKNOWN /
  // MANIFEST_INVALID).
  bool CheckManifestBlob(const std::string& repository, const std::string& digest, uint64_t size,
                         store::ManifestPut* put, Response* error);
  // Any OCI manifest: its config and layers (CheckManifestBlob; a non-distributable layer that
  // was not pushed is skipped: IsNonDistributableLayer), an index's manifests (in the
  // repository, of the stated size).
  bool CheckReferences(const Route& route, const OciManifest& manifest, store::ManifestPut* put,
                       Response* error);
  // A blz model manifest: its blz-specific shape, its blobs, and its archive identified and
  // verified; fills in the version fields of *put.
  bool PrepareModelVersion(const OciManifest& manifest, store::ManifestPut* put,
                           Response* error);
  Response DeleteManifest(const Route& route);
  Response ListReferrers(const Route& route);
  Response DeleteBlob(const Route& route);
  // Patch uploads (registry/patch_upload_handlers.cc, docs/registry-api.md "Patch uploads").
  // nullopt when route.caller may patch from `base`: a valid archive digest that is a version
  // of a repository the caller may read (ReadableVersionOf) whose archive is stored; else the
  // error (400 DIGEST_INVALID, 404 BLOB_UNKNOWN: unknown and unreadable answer alike,
  // 405 UNSUPPORTED without options_.apply_patch).
  std::optional<Response> CheckPatchBase(const Route& route, const std::string& base);
  // Applies the patch at `patch_file` to the registry's copy of `base` (rebuilt when stored as
  // a full patch), into a temporary file, and publishes and links it as blob `digest` of
  // route.name only when it is exactly `digest`: 201, or the error (nothing stored, the
  // temporary file removed). *discard: the patch is unusable (a 4xx), so its session goes.
  Response PublishPatched(const Route& route, const std::string& base,
                          const std::string& patch_file, const std::string& digest,
                          bool* discard);
  // After PublishPatched published `digest`: keeps the verified patch at `patch_file` (moved
  // into the blob store) as the patch base -> digest, so that a pull from the base is served it
  // without a diff and storage may keep it as the archive's chain link (ArchiveStorage::
  // TryChain reuses a recorded patch). Best effort: a failure is logged, the push stands.
  // Skipped when the patch is not smaller than the archive (`target_size` bytes).
  void KeepPushedPatch(const std::string& repository, const std::string& base,
                       const std::string& digest, const std::string& patch_file,
                       uint64_t target_size);
  // POST /v2/<name>/blobs/uploads/?mount=<digest>[&from=<repository>]: links the blob and
  // answers 201 when it may be mounted; nullopt: start an upload session instead.
  std::optional<Response> TryMount(const Route& route);
  // `head`: its Accept may ask for Ollama's view of a GGUF version (registry/ollama/).
  Response GetManifest(const Route& route, const RequestHead& head);
  // What the Ollama handlers use (registry/ollama/ollama_handlers.h).
  ollama::Context OllamaContext();
  Response ListTags(const Route& route);
  Response GetPatch(const Route& route, const RequestHead& head);
  // GET /v2/<name>/blz/patch?to=<digest> without from: the archive's full patch.
  Response GetFullPatch(const Route& route, const RequestHead& head, const std::string& to);
  // GET /v2/_blz/storage[?repository=NAME] (registry/storage_handlers.cc): bytes at rest per
  // repository the caller may pull; for an admin also the total and StorageStatus.
  Response GetStorage(const Route& route);
  Response GetValueDiff(const Route& route, const RequestHead& head);
  // GET /v2/<name>/blz/bases?to=<archive digest>[&have=<digest>,...]: the version `to` (its
  // manifest digest, size and structure) and, of the `have` archives the client holds, those
  // the caller may patch from, best first (docs/registry-api.md, "Choosing a base").
  Response GetBases(const Route& route, const RequestHead& head);
  // GET /v2/<name>/blz/bases?push=1&have=<digest>,...[&structure=<hash>][&to-push=<digest>]:
  // before a push, which of the client's archives the registry holds as bases for a patch
  // upload, best first (docs/registry-api.md, "Choosing a base for a push").
  Response GetPushBases(const Route& route);
  // POST /v2/_blz/gc[?dry_run=true]: GcReport as JSON.
  Response RunGc(const Route& route);
  Response ListStructure(const Route& route);
  // Browsing, the web view's JSON (registry/browse_handlers.cc, docs/registry-api.md
  // "Browsing"): GET /v2/_blz/repositories (repositories the caller may pull, with summaries),
  // /v2/<name>/blz/versions, /v2/<name>/blz/version?digest=, /v2/<name>/blz/stats?digest=
  // (cached like value diffs) and /v2/<name>/blz/patch-report?from=&to= (the cached patch,
  // described).
  Response ListRepositorySummaries(const Route& route, const RequestHead& head);
  Response ListVersionSummaries(const Route& route);
  Response GetVersionDetail(const Route& route, const RequestHead& head);
  Response GetVersionStats(const Route& route, const RequestHead& head);
  Response GetPatchReport(const Route& route, const RequestHead& head);
  // Lossy deltas (registry/delta_handlers.cc, docs/registry-api.md "Lossy deltas"):
  // GET /v2/<name>/blz/delta?from=&to=&strategy=[&max_error=][&sparsity=][&rank_energy=] (the
  // .wdelta, computed once per (from, to, strategy and options) and cached, its measured error
  // in X-Blz-* headers) and /v2/<name>/blz/delta-report with the same query (its report).
  Response GetDelta(const Route& route, const RequestHead& head);
  Response GetDeltaReport(const Route& route, const RequestHead& head);
  // Validates the query and resolves from/to (*error set and false on failure).
  bool ParseDeltaQuery(const Route& route, const RequestHead& head, DeltaQuery* query,
                       Response* error);
  // `handler` as is, or with ?async=1 in the background (registry/background_jobs.h): 200 with
  // its response when it finishes within options_.async_wait, else 202 with the progress.
  Response Async(const Route& route, const RequestHead& head,
                 Response (Registry::*handler)(const Route&, const RequestHead&));
  // The token admin API (registry/token_handlers.cc): POST and GET /v2/_blz/tokens,
  // DELETE /v2/_blz/tokens/<name>.
  Response CreateApiToken(const Request& request);
  Response ListApiTokens();
  Response RevokeApiToken(const Route& route);

  // A blob computed from other blobs on the first request and kept (patches, value diffs).
  struct CachedBlob {
    store::BlobInfo blob;
    bool hit = false;  // served from the cache
  };
  // One computation per `key` at a time, in this process (`locks`) and across the replicas
  // of the metadata DB (shared_jobs_, job key "<temp_name>:<key>"): a second identical
  // request waits, then finds the cached result. `find` gives the digest of the cached blob (kNotFound: none; a cached blob
  // missing from the store is computed again). On a miss `compute` writes the artifact to the
  // temporary path it is given (under <data>/uploads, named "<temp_name>-<random>"), which is
  // published as a blob (PublishComputed + RecordBlob) and passed to `record`. Nothing is kept
  // when a step fails. Errors are returned unchanged; *compute_failed tells whether `compute`
  // returned it.
  Result<CachedBlob> ComputeCached(KeyedMutex* locks, const std::string& key,
                                   std::string_view temp_name,
                                   const std::function<Result<std::string>()>& find,
                                   const std::function<Status(const std::string&)>& compute,
                                   const std::function<Status(const store::BlobInfo&)>& record,
                                   bool* compute_failed);
  // The patch from -> to (paths: their archive files, ResolveFromTo), computed once and cached
  // (ComputeCached); a cached patch damaged on disk is computed again. Shared by GetPatch and
  // GetPatchReport; *compute_failed as for ComputeCached.
  Result<CachedBlob> CachedPatch(const Route& route, const std::string& from,
                                 const std::string& to, const std::string paths[2],
                                 bool* compute_failed);
  // Writes the patch from -> to to `out` through options_.create_patch_from_readers, reading
  // both archives as stored (ArchiveStorage::OpenReader). A damaged stored patch is quarantined
  // (kCorruption). kUnsupported: this server stores no patches (rebuild files instead).
  Status PatchInPlace(const std::string& from, const std::string& to, const std::string& out);
  // compute() (a ComputeCached call); when it served a cached blob that is damaged on disk
  // (CheckStoredBlob quarantines it: verify on read), compute() once more.
  Result<CachedBlob> RecomputeIfDamaged(const std::function<Result<CachedBlob>()>& compute);
  // Charges route.client for a new derived computation unless `cached` (registry/rate_limiter.h):
  // nullopt = go ahead; else 429 TOOMANYREQUESTS with Retry-After. Admin tokens are not charged.
  std::optional<Response> ThrottleComputation(const Route& route, bool cached);
  // Evicts the least recently used cached lossy deltas beyond options_.delta_cache_bytes (never
  // `keep`, the (from, to, params) just served) and removes their blobs unless something else
  // references them or a push touched them since (MetadataDb::DeleteBlobUnlessTouched: safe
  // across replicas, as garbage collection). Best effort: failures leave the rows or blobs to
  // garbage collection.
  void EvictLossyDeltas(const store::LossyDeltaRecord& keep);
  // The error response for a failed CachedPatch (shared by GetPatch and GetPatchReport).
  Response CachedPatchError(const Status& status, bool compute_failed) const;
  // The lossy delta of `query` (registry/delta_handlers.cc), computed once per key and cached
  // like patches (a damaged cached blob is computed again); *report: its report as JSON text.
  Result<CachedBlob> CachedDelta(const DeltaQuery& query, std::string* report,
                                 bool* compute_failed);
  // ParseDeltaQuery, then CachedDelta (shared by GetDelta and GetDeltaReport): the delta, or
  // nullopt with the error response in *error.
  std::optional<CachedBlob> DeltaFor(const Route& route, const RequestHead& head,
                                     DeltaQuery* query, std::string* report, Response* error);
  // A computed JSON document (value diff, statistics) served from its cached blob, with
  // Docker-Content-Digest and `cache_header`: hit|miss.
  static Response ServeComputedJson(const CachedBlob& computed, const RequestHead& head,
                                    const char* cache_header);
  // Fills in missing structural hashes (see Open).
  Status BackfillStructuralHashes();
  // Is `digest` a version of route.name whose archive blob is present? Sets *path to the blob's
  // file; otherwise *error to the response (404 MANIFEST_UNKNOWN: not a version of the
  // repository; 404 BLOB_UNKNOWN: its blob is gone).
  // Both ?from= and ?to= (archive digests; else 400 DIGEST_INVALID with `usage`) resolved by
  // ResolveVersionArchive into paths[0] and paths[1]. ?from= may also be a version of another
  // repository the caller may pull from (ReadableRepositoryOf): a client that holds a base
  // pulled from elsewhere patches from it.
  bool ResolveFromTo(const Route& route, const RequestHead& head,
                     const std::optional<std::string>& from, const std::optional<std::string>& to,
                     std::string_view usage, std::string paths[2], Response* error,
                     bool lazy = false);
  bool ResolveVersionArchive(const Route& route, const std::string& digest, std::string* path,
                             Response* error, bool lazy = false);
  // The file of a version's archive (rebuilt when stored as a full patch or a chain): *path,
  // or *error (404 BLOB_UNKNOWN when its blob is gone). `lazy`: only checks that the archive
  // is stored (no rebuild) and leaves *path empty: for answers that are likely cached (a
  // chain link is the cached patch parent -> child; docs/storage.md, "Chains").
  bool ArchiveFile(const std::string& digest, std::string* path, Response* error,
                   bool lazy = false);
  // The repository, readable by route.caller, in which `archive_digest` is a version:
  // route.name when it is one there, else the first other such repository by name. kNotFound
  // when none (also when it is a version only of repositories the caller may not read: the
  // answer must not tell those apart, neither by content nor by the work done).
  Result<store::VersionRecord> ReadableVersionOf(const Route& route,
                                                 const std::string& archive_digest);

  std::string SessionPath(const std::string& uuid) const;
  // Deletes the upload sessions started more than options_.upload_max_age ago or idle (no chunk,
  // by the row's `updated`) for options_.upload_idle_timeout, rows and stored parts; with
  // `orphans` (at Open), also stored parts and old session files without a session.
  Status PurgeStaleUploads(bool orphans);
  // Checks a chunk of `*chunk` bytes (the request body) against the session's offset `size`
  // (Content-Range, the blob size cap). Sets *error and returns false on failure.
  bool CheckChunk(const Route& route, const Request& request, uint64_t size, uint64_t* chunk,
                  Response* error);
  // Stores the request body (file or memory) as the next part of session `up` in the blob store
  // (a body written into the session file is recorded where it is) and advances the session's
  // offset in the database (conditional on `up.size`: 416 when another request, through any
  // replica, got there first). Sets *error and returns false on failure.
  bool AppendChunk(const Route& route, const Request& request, const store::UploadRecord& up,
                   uint64_t* new_size, Response* error);
  // The SHA-256 of an upload session's bytes so far, kept in memory between its chunks on
  // this replica (issue 28: the closing PUT then hashes nothing again). TakeUploadHash returns
  // the state for session `up` only when it covers exactly the recorded parts (the last part's
  // name and the offset match), removing it (a chunk that fails leaves none: the closing PUT
  // then hashes the parts); a fresh state for a session with no bytes; else null (the chunks
  // came through another replica, or this one restarted). KeepUploadHash stores the state
  // after part `part` was recorded; DropUploadHash forgets a finished or cancelled session.
  std::shared_ptr<BodyHash> TakeUploadHash(const std::string& uuid, const store::UploadRecord& up);
  void KeepUploadHash(const std::string& uuid, const std::string& part,
                      std::shared_ptr<BodyHash> hash);
  void DropUploadHash(const std::string& uuid);
  // The session file of upload `uuid` (store::BlobStore::LockSessionFile), locked, when it holds
  // every byte the session has (store::SessionFileHoldsAll); `*up` is then the session's row as
  // read again under the lock, whose size is where the next body goes. Null (the body then goes
  // to a file of its own, as before) when the driver has none, another request holds it, it is
  // linked elsewhere or holds fewer bytes than the row, the session has ordinary parts, the
  // row is gone (the file just created is removed again), or on an I/O error.
  std::shared_ptr<store::UploadSessionFile> LockSessionFile(const std::string& uuid,
                                                            store::UploadRecord* up);

  std::string data_dir_;
  RegistryOptions options_;
  std::unique_ptr<store::BlobStore> blobs_;  // the driver (store/blob_store.h)
  std::unique_ptr<store::MetadataDb> db_;
  KeyedMutex upload_locks_;
  std::atomic<int64_t> last_upload_purge_{0};  // unix seconds
  struct KeptUploadHash {
    std::string part;  // the last part the state covers
    std::shared_ptr<BodyHash> hash;
  };
  std::mutex upload_hashes_mu_;
  std::unordered_map<std::string, KeptUploadHash> upload_hashes_;  // by session uuid
  KeyedMutex patch_locks_;
  std::atomic<uint64_t> patches_computed_{0};
  KeyedMutex diff_locks_;
  std::atomic<uint64_t> value_diffs_computed_{0};
  KeyedMutex stats_locks_;
  std::atomic<uint64_t> stats_computed_{0};
  KeyedMutex delta_locks_;
  std::atomic<uint64_t> deltas_computed_{0};
  std::unique_ptr<RateLimiter> computations_;  // options_.computations_per_minute
  std::mutex gc_mu_;
  // One lock per blob digest, held by whatever makes a blob referenced (manifest PUT, upload,
  // mount) and by garbage collection while it decides on the blob (registry/garbage_collector.h).
  KeyedMutex blob_locks_;
  Metrics metrics_;
  StorageAccountCache storage_accounts_;
  std::unique_ptr<Authenticator> auth_;  // credentials and scopes (registry/auth.h)
  std::unique_ptr<ollama::ViewCache> ollama_views_;  // Ollama views of GGUF versions
  // Declared last: destroyed (its thread stopped) before the store and the DB it uses.
  std::unique_ptr<ArchiveStorage> storage_;
  std::unique_ptr<hub::VersionFiles> version_files_;  // over storage_ and db_
  // Computations and garbage collection exclusive across the replicas of the DB.
  std::unique_ptr<SharedJobs> shared_jobs_;
  std::unique_ptr<ReadinessProbe> readiness_;
  // ?async=1 computations; stopped first (~Registry), as they use everything above.
  std::unique_ptr<BackgroundJobs> jobs_;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_REGISTRY_H_
