// The registry's construction, routing (Prepare, PlanBody, Handle, Dispatch) and the endpoints
// of no resource (ping, catalog). The handlers of each resource are in registry/*_handlers.cc.
#include "registry/registry.h"

#include <algorithm>
#include <ctime>
#include <exception>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "registry/auth.h"
#include "registry/background_jobs.h"
#include "registry/errors.h"
#include "registry/hub/hub_api.h"
#include "registry/hub/version_files.h"
#include "registry/ollama/ollama_handlers.h"
#include "registry/rate_limiter.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"
#include "store/open_blob_store.h"
#include "store/timed_blob_store.h"

namespace blz::registry {

namespace {

using json = nlohmann::json;
using Kind = Registry::Route::Kind;
using internal::ArchiveStructuralHash;
using internal::IsAsync;
using internal::IsUuid;
using internal::ParsePagination;
using internal::UploadRange;

constexpr char kApiVersionHeader[] = "Docker-Distribution-API-Version";
constexpr char kApiVersion[] = "registry/2.0";

// On every response of the registry's routes: the API version, and that a model manifest is
// accepted only once its archive passed `blz verify` (manifest_handlers.cc), so that `blz
// push` can leave that check to the registry (client/push.h; docs/registry-api.md).
void SetRegistryHeaders(Response* r) {
  r->Set(kApiVersionHeader, kApiVersion);
  r->Set("Blz-Verifies-Archives", "true");
}

std::string Join(const std::vector<std::string>& parts, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += '/';
    out += parts[i];
  }
  return out;
}

std::string_view AllowedMethods(Kind kind) {
  switch (kind) {
    case Kind::kPing: return "GET, HEAD";
    case Kind::kCatalog: return "GET";
    case Kind::kBlob: return "GET, HEAD, DELETE";
    case Kind::kUploadStart: return "POST";
    case Kind::kUploadSession: return "GET, PATCH, PUT, DELETE";
    case Kind::kManifest: return "GET, HEAD, PUT, DELETE";
    case Kind::kTags: return "GET";
    case Kind::kReferrers: return "GET";
    case Kind::kPatch: return "GET, HEAD";
    case Kind::kDiff: return "GET, HEAD";
    case Kind::kBases: return "GET";
    case Kind::kStructures: return "GET";
    case Kind::kStorage: return "GET";
    case Kind::kGc: return "POST";
    case Kind::kToken: return "GET";
    case Kind::kTokens: return "GET, POST";
    case Kind::kTokenName: return "DELETE";
    case Kind::kRepositories: return "GET";
    case Kind::kVersions: return "GET";
    case Kind::kVersion: return "GET";
    case Kind::kStats: return "GET";
    case Kind::kPatchReport: return "GET";
    case Kind::kDelta: return "GET, HEAD";
    case Kind::kDeltaReport: return "GET, HEAD";
  }
  return "";
}

bool MethodAllowed(Kind kind, std::string_view method) {
  std::string_view list = AllowedMethods(kind);
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(", ", start);
    if (end == std::string_view::npos) end = list.size();
    if (list.substr(start, end - start) == method) return true;
    start = end + 2;
  }
  return false;
}

}  // namespace

// ---- construction ----

Registry::Registry(std::string data_dir, RegistryOptions options,
                   std::unique_ptr<store::BlobStore> blobs,
                   std::unique_ptr<store::MetadataDb> db)
    : data_dir_(std::move(data_dir)), options_(std::move(options)), blobs_(std::move(blobs)),
      db_(std::move(db)),
      computations_(std::make_unique<RateLimiter>(options_.computations_per_minute,
                                                   options_.computation_burst)),
      shared_jobs_(std::make_unique<SharedJobs>(db_.get(), options_.job_leases)),
      readiness_(std::make_unique<ReadinessProbe>(
          [this] { return db_->Ping(); }, [this] { return blobs_->CheckReachable(); },
          std::chrono::milliseconds(1000), options_.storage.log)) {
  ollama_views_ = std::make_unique<ollama::ViewCache>();
}

Result<std::unique_ptr<Registry>> Registry::Open(const std::string& data_dir,
                                                 RegistryOptions options) {
  store::BlobStoreOptions blob_options;
  blob_options.cache_bytes = options.blob_cache_bytes;
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<store::BlobStore> blobs,
                       store::OpenBlobStore(options.blob_storage, data_dir, blob_options));
  // Every driver call is timed for /metrics (blz_blob_store_seconds).
  blobs = std::make_unique<store::TimedBlobStore>(std::move(blobs));
  // A store that cannot be reached with these credentials fails the start, naming it.
  BLZ_RETURN_IF_ERROR(blobs->CheckReachable());
  const std::string metadata_url = options.metadata_url.empty()
                                       ? data_dir + "/" + kMetadataFileName
                                       : options.metadata_url;
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<store::MetadataDb> db,
                       store::MetadataDb::Open(metadata_url));
  // Temporary files of a previous run (request bodies, computed patches) are garbage; upload
  // sessions' parts (fs: "parts-<uuid>") survive restarts.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(blobs->uploads_dir(), ec)) {
    std::string fname = entry.path().filename().string();
    if (fname.rfind("session-", 0) != 0 && fname.rfind("parts-", 0) != 0) {
      RemoveAll(entry.path().string());
    }
  }
  std::unique_ptr<Registry> registry(
      new Registry(data_dir, std::move(options), std::move(blobs), std::move(db)));
  BLZ_ASSIGN_OR_RETURN(
      registry->auth_,
      Authenticator::Open(data_dir, registry->db_.get(),
                          AuthOptions{registry->options_.private_mode,
                                      registry->options_.public_url}));
  registry->options_.storage.job_leases = registry->options_.job_leases;
  BLZ_ASSIGN_OR_RETURN(registry->storage_,
                       ArchiveStorage::Open(registry->blobs_.get(), registry->db_.get(), data_dir,
                                            registry->options_.full_patch,
                                            registry->options_.storage));
  registry->version_files_ =
      std::make_unique<hub::VersionFiles>(registry->storage_.get(), registry->db_.get());
  BLZ_RETURN_IF_ERROR(registry->PurgeStaleUploads(/*orphans=*/true));
  BLZ_RETURN_IF_ERROR(registry->BackfillStructuralHashes());
  BLZ_RETURN_IF_ERROR(registry->storage_->ScheduleAll());
  registry->jobs_ = std::make_unique<BackgroundJobs>(registry->options_.background_workers);
  return registry;
}

Registry::~Registry() {
  jobs_.reset();  // joins the workers before anything they use goes away
}

Result<std::optional<std::string>> Registry::EnsureAdminToken() {
  BLZ_ASSIGN_OR_RETURN(int64_t n, db_->CountTokens("admin"));
  if (n > 0) return std::optional<std::string>();
  Result<std::string> token = db_->CreateToken("admin");
  // Replicas starting together on one database: the first creates it, the others find it.
  if (!token.ok() && token.status().code() == Code::kAlreadyExists) {
    return std::optional<std::string>();
  }
  BLZ_RETURN_IF_ERROR(token.status());
  return std::optional<std::string>(std::move(*token));
}

uint64_t Registry::patches_computed() const { return patches_computed_.load(); }

std::string Registry::SessionPath(const std::string& uuid) const {
  return blobs_->uploads_dir() + "/session-" + uuid;
}

Status Registry::PurgeStaleUploads(bool orphans) {
  const int64_t now = int64_t(std::time(nullptr));
  last_upload_purge_.store(now);
  const int64_t old_cutoff = now - int64_t(options_.upload_max_age.count());
  // Idle: no chunk for options_.upload_idle_timeout (the row's `updated`, written by every
  // chunk on any replica).
  const int64_t idle_cutoff = now - int64_t(std::chrono::duration_cast<std::chrono::seconds>(
                                                options_.upload_idle_timeout)
                                                .count());
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> stale, db_->ListUploadsStartedBy(old_cutoff));
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> idle, db_->ListUploadsIdleSince(idle_cutoff));
  stale.insert(stale.end(), idle.begin(), idle.end());
  for (const std::string& uuid : stale) {
    KeyedMutex::Lock lock(&upload_locks_, uuid);
    // Judged again under the lock: a chunk may have arrived meanwhile.
    Result<store::UploadRecord> up = db_->GetUpload(uuid);
    if (!up.ok()) continue;  // finished or cancelled meanwhile
    if (up->started > old_cutoff && up->updated > idle_cutoff) continue;
    BLZ_RETURN_IF_ERROR(db_->DeleteUpload(uuid));
    (void)blobs_->DeleteUploadParts(uuid);  // best effort: the orphan pass finds leftovers
    RemoveAll(SessionPath(uuid));           // a session file of an older version
  }
  // Local parts (fs: the parts; s3: copies of those this replica received) whose session is
  // gone, e.g. finished on another replica. A session's row is created before its parts.
  std::error_code dir_ec;
  for (const auto& entry : std::filesystem::directory_iterator(blobs_->uploads_dir(), dir_ec)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("parts-", 0) != 0) continue;
    Result<store::UploadRecord> up = db_->GetUpload(fname.substr(6));
    if (!up.ok() && up.status().code() == Code::kNotFound) {
      (void)blobs_->DeleteUploadParts(fname.substr(6));
    }
  }
  if (!orphans) return Status::Ok();
  // Parts whose session is gone (a replica stopped between storing a part and its row's end).
  // A session's row is created before any of its parts, so this never takes a live one's.
  if (Result<std::vector<std::string>> sessions = blobs_->ListUploadPartSessions();
      sessions.ok()) {
    for (const std::string& uuid : *sessions) {
      Result<store::UploadRecord> up = db_->GetUpload(uuid);
      if (!up.ok() && up.status().code() == Code::kNotFound) {
        (void)blobs_->DeleteUploadParts(uuid);
      }
    }
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(blobs_->uploads_dir(), ec)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("session-", 0) != 0) continue;
    // Session files of an older version: the bytes of a session now recorded in the row and
    // the store; a session still open across the upgrade restarts its upload.
    RemoveAll(entry.path().string());
  }
  return Status::Ok();
}

Status Registry::BackfillStructuralHashes() {
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> archives, db_->ArchivesWithoutStructure());
  for (const std::string& digest : archives) {
    Result<store::BlobInfo> blob = storage_->File(digest);
    if (!blob.ok()) continue;  // the archive is gone: the version stays without a structure
    Result<std::string> hash = ArchiveStructuralHash(blob->path, digest);
    if (!hash.ok()) continue;  // pushed before identification was required; stays without
    BLZ_RETURN_IF_ERROR(db_->SetStructuralHash(digest, *hash));
  }
  return Status::Ok();
}

// ---- routing ----

std::optional<Registry::Route> Registry::Prepare(const RequestHead& head, Response* error) {
  Result<Target> target = ParseTarget(head.target);
  if (!target.ok()) {
    *error = ErrorResponse(OciError::kBadRequest, target.status().message());
    return std::nullopt;
  }
  const std::vector<std::string>& c = target->components;
  // Names come from the still-encoded components (registry/wire.h Target): "org%2fmodel" is
  // an invalid name, not "org/model".
  const std::vector<std::string>& raw = target->raw_components;
  if (c.empty() || c[0] != "v2") {
    *error = ErrorResponse(OciError::kNotFound, "no such endpoint: " + target->path);
    return std::nullopt;
  }
  Route route;
  route.method = head.method;
  const size_t n = c.size();
  bool found = true;
  if (n == 1 || (n == 2 && c[1].empty())) {
    route.kind = Kind::kPing;
  } else if (n == 2 && c[1] == "_catalog") {
    route.kind = Kind::kCatalog;
  } else if (n == 4 && c[1] == "_blz" && c[2] == "structures") {
    route.kind = Kind::kStructures;
    route.ref = c[3];
  } else if (n == 3 && c[1] == "_blz" && c[2] == "storage") {
    route.kind = Kind::kStorage;
  } else if (n == 3 && c[1] == "_blz" && c[2] == "gc") {
    route.kind = Kind::kGc;
  } else if (n == 3 && c[1] == "_blz" && c[2] == "token") {
    route.kind = Kind::kToken;
  } else if (n == 3 && c[1] == "_blz" && c[2] == "tokens") {
    route.kind = Kind::kTokens;
  } else if (n == 4 && c[1] == "_blz" && c[2] == "tokens") {
    route.kind = Kind::kTokenName;
    route.ref = c[3];
  } else if (n == 3 && c[1] == "_blz" && c[2] == "repositories") {
    route.kind = Kind::kRepositories;
  } else if (n >= 4 && c[n - 2] == "blz" &&
             (c[n - 1] == "versions" || c[n - 1] == "version" || c[n - 1] == "stats" ||
              c[n - 1] == "patch-report")) {
    route.kind = c[n - 1] == "versions"  ? Kind::kVersions
                 : c[n - 1] == "version" ? Kind::kVersion
                 : c[n - 1] == "stats"   ? Kind::kStats
                                         : Kind::kPatchReport;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 2] == "blz" && (c[n - 1] == "delta" || c[n - 1] == "delta-report")) {
    route.kind = c[n - 1] == "delta" ? Kind::kDelta : Kind::kDeltaReport;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "diff") {
    route.kind = Kind::kDiff;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "bases") {
    route.kind = Kind::kBases;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 2] == "tags" && c[n - 1] == "list") {
    route.kind = Kind::kTags;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 2] == "referrers") {
    route.kind = Kind::kReferrers;
    route.name = Join(raw, 1, n - 2);
    route.ref = c[n - 1];
  } else if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "patch") {
    route.kind = Kind::kPatch;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 3] == "blobs" && c[n - 2] == "uploads") {
    route.kind = c[n - 1].empty() ? Kind::kUploadStart : Kind::kUploadSession;
    route.name = Join(raw, 1, n - 3);
    route.ref = c[n - 1];
  } else if (n >= 4 && c[n - 2] == "blobs" && c[n - 1] == "uploads") {
    route.kind = Kind::kUploadStart;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 2] == "blobs") {
    route.kind = Kind::kBlob;
    route.name = Join(raw, 1, n - 2);
    route.ref = c[n - 1];
  } else if (n >= 4 && c[n - 2] == "manifests") {
    route.kind = Kind::kManifest;
    route.name = Join(raw, 1, n - 2);
    route.ref = c[n - 1];
  } else {
    found = false;
  }
  if (!found) {
    *error = ErrorResponse(OciError::kNotFound, "no such endpoint: " + target->path);
    return std::nullopt;
  }
  route.target = std::move(*target);

  if (!MethodAllowed(route.kind, head.method)) {
    *error = ErrorResponse(OciError::kUnsupported,
                           "method " + head.method + " is not supported on " + route.target.path);
    error->Set("Allow", std::string(AllowedMethods(route.kind)));
    return std::nullopt;
  }

  if (route.kind != Kind::kPing && route.kind != Kind::kCatalog &&
      route.kind != Kind::kStructures && route.kind != Kind::kStorage &&
      route.kind != Kind::kGc && route.kind != Kind::kToken && route.kind != Kind::kTokens &&
      route.kind != Kind::kTokenName && route.kind != Kind::kRepositories) {
    Status name_ok = ValidateRepositoryName(route.name);
    if (!name_ok.ok()) {
      *error = ErrorResponse(OciError::kNameInvalid, name_ok.message(),
                             json{{"name", route.name}});
      return std::nullopt;
    }
  }

  // Credentials and scopes (registry/auth.h): 401 with a challenge, or 403 DENIED.
  if (std::optional<Response> denied = auth_->CheckAs(head, AccessNeedFor(route),
                                                      &route.caller)) {
    *error = std::move(*denied);
    return std::nullopt;
  }
  route.principal = route.caller.Describe();
  route.client = ClientKey(route.caller, head);
  if (route.kind == Kind::kUploadStart) {
    if (std::optional<std::string> from = route.Query("from");
        from.has_value() && ValidateRepositoryName(*from).ok()) {
      AccessNeed source;
      source.kind = AccessNeed::Kind::kRepository;
      source.repository = *from;
      source.actions = kActionPull;
      route.mount_source_readable = !auth_->Check(head, source, nullptr).has_value();
    }
  }
  return route;
}

BodyPlan Registry::PlanBody(const RequestHead& head) {
  try {
    return PlanBodyUnchecked(head);
  } catch (const std::exception& e) {
    BodyPlan plan;
    plan.reject = ErrorResponse(OciError::kUnknown, std::string("internal error: ") + e.what());
    SetRegistryHeaders(&*plan.reject);
    return plan;
  }
}

BodyPlan Registry::PlanBodyUnchecked(const RequestHead& head) {
  BodyPlan plan;
  plan.kind = BodyPlan::Kind::kMemory;
  plan.limit = kMaxIgnoredBodyBytes;
  if (hub::IsHubTarget(head.target)) {  // the Hugging Face Hub API (registry/hub/hub_api.h)
    plan.limit = hub::kMaxHubBodyBytes;
    plan.heavy = hub::IsHeavyHubRequest(head);
    return plan;
  }
  Response error;
  std::optional<Route> route = Prepare(head, &error);
  auto reject = [&](Response r) {
    SetRegistryHeaders(&r);
    plan.reject = std::move(r);
    return plan;
  };
  if (!route.has_value()) return reject(std::move(error));
  switch (route->kind) {
    case Kind::kBlob:  // a GET may rebuild an archive from its full patch
    case Kind::kPatch:
      plan.heavy = head.method == "GET";
      break;
    case Kind::kDiff:  // ?async=1 answers at once (the computation runs in the background)
    case Kind::kStats:
    case Kind::kPatchReport:
      plan.heavy = head.method == "GET" && !IsAsync(*route);
      break;
    case Kind::kDelta:  // a HEAD computes the delta too (its size and digest are the answer)
    case Kind::kDeltaReport:
      plan.heavy = !IsAsync(*route);
      break;
    case Kind::kManifest:  // a PUT verifies the archive and identifies its structure
    case Kind::kUploadSession:  // a closing PUT hashes the whole blob
      plan.heavy = head.method == "PUT";
      break;
    case Kind::kGc:  // lists and removes blobs
    case Kind::kStorage:  // a blob-store stat per archive (storage_accounting.h)
      plan.heavy = true;
      break;
    case Kind::kUploadStart:  // a monolithic upload (?digest=) hashes the blob
      plan.heavy = route->Query("digest").has_value();
      break;
    default:
      break;
  }

  bool file_body = false;
  if (route->kind == Kind::kUploadStart && route->Query("digest").has_value()) {
    file_body = true;
    // Hashed as it arrives (issue 28); a patch's digest is its result's, checked after apply.
    if (!route->Query("blz-patch-from").has_value()) plan.hash = std::make_shared<BodyHash>();
  } else if (route->kind == Kind::kUploadSession &&
             (head.method == "PATCH" || head.method == "PUT")) {
    // Refuse early, before the client sends gigabytes: unknown session, out-of-order chunk.
    Result<store::UploadRecord> up = IsUuid(route->ref)
                                         ? db_->GetUpload(route->ref)
                                         : Result<store::UploadRecord>(NotFound("bad uuid"));
    if (!up.ok() || up->repository != route->name) {
      return reject(ErrorResponse(OciError::kBlobUploadUnknown,
                                  "upload session '" + route->ref + "' is unknown"));
    }
    if (std::optional<std::string> cr = head.Get("Content-Range"); cr.has_value()) {
      const uint64_t size = up->size;  // the row's offset: the same on every replica
      std::optional<ByteRange> r = ParseChunkRange(*cr);
      if (!r.has_value() || r->first != size) {
        Response err = ErrorResponse(OciError::kRangeInvalid,
                                     "chunk Content-Range '" + *cr + "' does not continue at byte " +
                                         std::to_string(size));
        err.Set("Location", "/v2/" + route->name + "/blobs/uploads/" + route->ref);
        err.Set("Range", UploadRange(size));
        err.Set("Docker-Upload-UUID", route->ref);
        return reject(std::move(err));
      }
    }
    file_body = true;
    // A body of known length continues the session file when that holds every byte so far
    // (fs): written in place, so the closing PUT links one file instead of copying each chunk.
    if (head.content_length.has_value() && !head.chunked) {
      plan.session_file = LockSessionFile(route->ref, &*up);
      plan.session_offset = up->size;
    }
    if (up->patch_from.empty()) plan.hash = TakeUploadHash(route->ref, *up);
  } else if (route->kind == Kind::kManifest && head.method == "PUT") {
    plan.limit = options_.max_manifest_bytes;
  }
  if (file_body) {
    plan.kind = BodyPlan::Kind::kFile;
    plan.limit = options_.max_blob_bytes;
    plan.file_path = blobs_->NewTempPath("body");
  }
  if (head.content_length.has_value() && *head.content_length > plan.limit) {
    plan.file_path.clear();
    plan.hash = nullptr;
    plan.session_file = nullptr;
    plan.kind = BodyPlan::Kind::kMemory;
    return reject(ErrorResponse(OciError::kTooLarge,
                                "request body of " + std::to_string(*head.content_length) +
                                    " bytes exceeds the limit of " + std::to_string(plan.limit),
                                json{{"limit", plan.limit}}));
  }
  return plan;
}

Response Registry::Handle(const Request& request) {
  Response res;
  try {
    Response error;
    if (hub::IsHubTarget(request.head.target)) {  // the Hugging Face Hub API
      res = hub::HandleHub(hub::HubContext{db_.get(), version_files_.get(), auth_.get(),
                                           options_.private_mode, options_.public_url},
                           request);
    } else {
      std::optional<Route> route = Prepare(request.head, &error);
      res = route.has_value() ? Dispatch(*route, request) : std::move(error);
      if (route.has_value()) res.principal = route->principal;
    }
  } catch (const std::exception& e) {
    res = ErrorResponse(OciError::kUnknown, std::string("internal error: ") + e.what());
  }
  SetRegistryHeaders(&res);
  if (request.head.method == "HEAD") res.head_only = true;
  return res;
}

Response Registry::Dispatch(const Route& route, const Request& request) {
  const std::string& m = route.method;
  switch (route.kind) {
    case Kind::kPing: return Ping(route);
    case Kind::kCatalog: return Catalog(route);
    case Kind::kBlob:
      if (m == "DELETE") return DeleteBlob(route);
      return GetBlob(route, request.head);
    case Kind::kUploadStart: return StartUpload(route, request);
    case Kind::kUploadSession:
      if (m == "GET") return UploadStatus(route);
      if (m == "PATCH") return PatchUpload(route, request);
      if (m == "PUT") return FinishUpload(route, request);
      return CancelUpload(route);
    case Kind::kManifest:
      if (m == "PUT") return PutManifest(route, request);
      if (m == "DELETE") return DeleteManifest(route);
      return GetManifest(route, request.head);
    case Kind::kTags: return ListTags(route);
    case Kind::kReferrers: return ListReferrers(route);
    case Kind::kPatch: return GetPatch(route, request.head);
    case Kind::kDiff: return Async(route, request.head, &Registry::GetValueDiff);
    case Kind::kBases: return GetBases(route, request.head);
    case Kind::kStructures: return ListStructure(route);
    case Kind::kStorage: return GetStorage(route);
    case Kind::kGc: return RunGc(route);
    case Kind::kToken: return auth_->IssueToken(request.head, request.head.target);
    case Kind::kTokens:
      if (m == "POST") return CreateApiToken(request);
      return ListApiTokens();
    case Kind::kTokenName: return RevokeApiToken(route);
    case Kind::kRepositories: return ListRepositorySummaries(route, request.head);
    case Kind::kVersions: return ListVersionSummaries(route);
    case Kind::kVersion: return GetVersionDetail(route, request.head);
    case Kind::kStats: return Async(route, request.head, &Registry::GetVersionStats);
    case Kind::kPatchReport: return Async(route, request.head, &Registry::GetPatchReport);
    case Kind::kDelta: return Async(route, request.head, &Registry::GetDelta);
    case Kind::kDeltaReport: return Async(route, request.head, &Registry::GetDeltaReport);
  }
  return ErrorResponse(OciError::kNotFound, "no such endpoint");
}

Result<GcReport> Registry::CollectGarbage(bool dry_run) {
  std::lock_guard lock(gc_mu_);
  // One collector at a time across replicas; a dry run only reads, so it needs no lease.
  std::unique_ptr<SharedJobs::Hold> lease;
  if (!dry_run) {
    Result<std::unique_ptr<SharedJobs::Hold>> held = shared_jobs_->TryHold("gc");
    if (!held.ok()) {
      return Status(held.status().code(),
                    "garbage collection: " + held.status().message());
    }
    lease = std::move(*held);
  }
  // The lossy-delta cache's budget too (it may have been lowered since the last computation).
  if (!dry_run) EvictLossyDeltas(store::LossyDeltaRecord{});
  // Chains first (docs/storage.md, "Chains"): dependents of archives nobody references any
  // more get another form, so that the collection below can take those archives.
  uint64_t rebased = 0;
  uint64_t rebase_failed = 0;
  // A re-base pass that cannot even list the links is an error of the collection, not a
  // silent skip: the orphans' parents then stay, and the operator must see why.
  Status rebase = dry_run ? Status::Ok() : storage_->RebaseOrphans(&rebased, &rebase_failed);
  GcOptions o;
  o.grace = options_.gc_grace;
  o.dry_run = dry_run;
  if (lease) o.collector = lease->owner();
  Result<GcReport> report = registry::CollectGarbage(*blobs_, db_.get(), &blob_locks_, o);
  if (report.ok()) {
    report->chain_links_rebased = rebased;
    report->chain_rebases_failed = rebase_failed;
    if (!rebase.ok()) {
      report->errors.push_back("re-basing orphaned chain links: " + rebase.ToString());
    }
  }
  if (report.ok() && !dry_run) metrics_.RecordGc(report->bytes_freed);
  if (lease) {
    if (report.ok()) {
      lease->Finish("removed " + std::to_string(report->blobs_removed) + " blobs, " +
                    std::to_string(report->bytes_freed) + " bytes");
    } else {
      lease->Fail(report.status().ToString());
    }
  }
  return report;
}

// ---- endpoints ----

Response Registry::Ping(const Route&) {
  Response res;
  res.body = "{}";
  res.Set("Content-Type", "application/json");
  return res;
}

Response Registry::Catalog(const Route& route) {
  auto page_args = ParsePagination(route);
  if (!page_args.ok()) return ErrorResponse(page_args.status(), ErrorContext::kGeneral);
  auto [limit, last] = *page_args;
  // Only the repositories the caller may pull (a token of org-a/* sees nothing of org-b).
  Result<std::vector<std::string>> names = db_->ListRepositoryNames("");
  if (!names.ok()) return ErrorResponse(names.status(), ErrorContext::kGeneral);
  std::vector<std::string> readable =
      internal::PullableNames(route, std::move(*names), options_.private_mode);
  auto begin = last.empty() ? readable.begin()
                            : std::upper_bound(readable.begin(), readable.end(), last);
  const size_t available = size_t(readable.end() - begin);
  const size_t count = limit.has_value() ? size_t(std::min<uint64_t>(*limit, available)) : available;
  std::vector<std::string> items(begin, begin + ptrdiff_t(count));
  Response res;
  res.body = json{{"repositories", items}}.dump();
  res.Set("Content-Type", "application/json");
  if (count < available && !items.empty()) {
    res.Set("Link", "</v2/_catalog?n=" + std::to_string(*limit) + "&last=" + items.back() +
                        ">; rel=\"next\"");
  }
  return res;
}

Response Registry::RunGc(const Route& route) {
  const std::optional<std::string> dry = route.Query("dry_run");
  if (dry.has_value() && *dry != "true" && *dry != "false" && *dry != "1" && *dry != "0") {
    return ErrorResponse(OciError::kBadRequest, "dry_run must be true or false");
  }
  const bool dry_run = dry.has_value() && (*dry == "true" || *dry == "1");
  Result<GcReport> report = CollectGarbage(dry_run);
  if (!report.ok()) return ErrorResponse(report.status(), ErrorContext::kGeneral);
  Response res;
  res.body = json{{"dry_run", report->dry_run},
                  {"blobs_total", report->blobs_total},
                  {"blobs_marked", report->blobs_marked},
                  {"blobs_removed", report->blobs_removed},
                  {"bytes_freed", report->bytes_freed},
                  {"blobs_too_young", report->blobs_too_young},
                  {"derived_forgotten", report->derived_forgotten},
                  {"chain_links_rebased", report->chain_links_rebased},
                  {"chain_rebases_failed", report->chain_rebases_failed},
                  {"removed", report->removed},
                  {"errors", report->errors},
                  {"seconds", report->seconds}}
                 .dump();
  res.Set("Content-Type", "application/json");
  return res;
}

}  // namespace blz::registry
