#include "registry/registry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <ctime>
#include <filesystem>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "formats/identify.h"
#include "formats/json_strict.h"
#include "formats/structural_hash.h"
#include "formats/value_diff_json.h"
#include "registry/errors.h"
#include "registry/wire.h"

namespace blz::registry {

struct Registry::Route {
  enum class Kind : uint8_t {
    kPing,           // /v2/
    kCatalog,        // /v2/_catalog
    kBlob,           // /v2/<name>/blobs/<digest>
    kUploadStart,    // /v2/<name>/blobs/uploads/
    kUploadSession,  // /v2/<name>/blobs/uploads/<uuid>
    kManifest,       // /v2/<name>/manifests/<reference>
    kTags,           // /v2/<name>/tags/list
    kPatch,          // /v2/<name>/blz/patch
    kDiff,           // /v2/<name>/blz/diff
    kStructures,     // /v2/_blz/structures/<structural hash>
    kStorage,        // /v2/_blz/storage
  };
  Kind kind = Kind::kPing;
  std::string method;
  std::string name;
  std::string ref;  // blob digest, upload uuid, manifest reference or structural hash
  Target target;

  std::optional<std::string> Query(const std::string& key) const {
    auto it = target.query.find(key);
    if (it == target.query.end()) return std::nullopt;
    return it->second;
  }
};

namespace {

using json = nlohmann::json;
using Kind = Registry::Route::Kind;

constexpr char kApiVersionHeader[] = "Docker-Distribution-API-Version";
constexpr char kApiVersion[] = "registry/2.0";

bool IsWriteMethod(std::string_view m) {
  return m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE";
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
    case Kind::kBlob: return "GET, HEAD";
    case Kind::kUploadStart: return "POST";
    case Kind::kUploadSession: return "GET, PATCH, PUT, DELETE";
    case Kind::kManifest: return "GET, HEAD, PUT";
    case Kind::kTags: return "GET";
    case Kind::kPatch: return "GET, HEAD";
    case Kind::kDiff: return "GET, HEAD";
    case Kind::kStructures: return "GET";
    case Kind::kStorage: return "GET";
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

// A random version-4-style UUID: 8-4-4-4-12 lower-case hex digits.
std::string NewUuid() {
  std::string hex = RandomHex(16);
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

bool IsUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    bool dash_pos = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_pos != (s[i] == '-')) return false;
    if (!dash_pos && !IsLowerHex(s.substr(i, 1), 1)) return false;
  }
  return true;
}

Result<uint64_t> FileSizeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IOError(path + ": cannot stat: " + std::strerror(errno));
  }
  return uint64_t(st.st_size);
}

// Appends all of `src` to `dst` (both regular files) in the kernel where possible.
Status AppendFile(const std::string& src, const std::string& dst) {
  int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return IOError(src + ": cannot open: " + std::strerror(errno));
  // Not O_APPEND: copy_file_range refuses such descriptors. Write from the end instead.
  int out = ::open(dst.c_str(), O_WRONLY | O_CLOEXEC);
  if (out < 0 || ::lseek(out, 0, SEEK_END) < 0) {
    Status s = IOError(dst + ": cannot open for appending: " + std::strerror(errno));
    ::close(in);
    if (out >= 0) ::close(out);
    return s;
  }
  Status status;
  bool fallback = false;
  while (!fallback) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) {
        fallback = true;
        break;
      }
      status = IOError(dst + ": append failed: " + std::strerror(errno));
      break;
    }
  }
  if (fallback) {
    std::vector<char> buf(1 << 20);
    while (true) {
      ssize_t n = ::read(in, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = IOError(src + ": read failed: " + std::strerror(errno));
        break;
      }
      if (n == 0) break;
      const char* p = buf.data();
      size_t left = size_t(n);
      while (left > 0) {
        ssize_t w = ::write(out, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) break;
        p += w;
        left -= size_t(w);
      }
      if (left > 0) {
        status = IOError(dst + ": write failed: " + std::strerror(errno));
        break;
      }
    }
  }
  ::close(in);
  if (::close(out) != 0 && status.ok()) status = IOError(dst + ": close failed");
  return status;
}

// Upload progress as the OCI spec's Range header: "0-<last byte>" ("0-0" when empty).
std::string UploadRange(uint64_t size) { return "0-" + std::to_string(size == 0 ? 0 : size - 1); }

// The headers every upload-session response carries: where to send the next chunk and how many
// bytes the session holds (Range per the spec; Blz-Upload-Offset because "0-0" is ambiguous).
void SetUploadProgress(Response* res, const std::string& name, const std::string& uuid,
                       uint64_t size) {
  res->Set("Location", "/v2/" + name + "/blobs/uploads/" + uuid);
  res->Set("Range", UploadRange(size));
  res->Set("Docker-Upload-UUID", uuid);
  res->Set("Blz-Upload-Offset", std::to_string(size));
}

Response UnknownUpload(const std::string& uuid) {
  return ErrorResponse(OciError::kBlobUploadUnknown, "upload session '" + uuid + "' is unknown");
}

std::optional<std::string> BearerToken(const RequestHead& head) {
  std::optional<std::string> auth = head.Get("Authorization");
  if (!auth.has_value()) return std::nullopt;
  std::string_view v = *auth;
  constexpr std::string_view kScheme = "bearer ";
  if (v.size() <= kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = v[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != kScheme[i]) return std::nullopt;
  }
  v.remove_prefix(kScheme.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return std::string(v);
}

std::string MediaTypeOf(std::string_view content_type) {
  size_t semi = content_type.find(';');
  std::string_view t = content_type.substr(0, semi);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  return std::string(t);
}

// The config and layer a blz manifest references (docs/registry-api.md).
struct ManifestRefs {
  std::string config_digest;
  uint64_t config_size = 0;
  std::string layer_digest;
  uint64_t layer_size = 0;
};

Status ParseDescriptor(const json& d, std::string_view field, std::string_view media_type,
                       std::string* digest, uint64_t* size) {
  if (!d.is_object()) return InvalidArgument(std::string(field) + " must be an object");
  auto mt = d.find("mediaType");
  if (mt == d.end() || !mt->is_string() || mt->get<std::string>() != media_type) {
    return InvalidArgument(std::string(field) + ".mediaType must be \"" +
                           std::string(media_type) + "\"");
  }
  auto dg = d.find("digest");
  if (dg == d.end() || !dg->is_string() || !ParseDigest(dg->get<std::string>()).ok()) {
    return InvalidArgument(std::string(field) + ".digest must be \"sha256:<64 lower-case hex>\"");
  }
  auto sz = d.find("size");
  if (sz == d.end() || !sz->is_number_unsigned()) {
    return InvalidArgument(std::string(field) + ".size must be a non-negative integer");
  }
  *digest = dg->get<std::string>();
  *size = sz->get<uint64_t>();
  return Status::Ok();
}

// Checks the manifest's shape. Errors: kInvalidArgument (-> MANIFEST_INVALID).
Result<ManifestRefs> ParseBlzManifest(std::string_view body,
                                      const std::optional<std::string>& content_type) {
  // Strict: valid UTF-8, no NUL (nlohmann would stop reading there), no duplicate keys.
  Result<json> parsed = formats::ParseJsonStrict(body, "manifest", 0);
  if (!parsed.ok()) return InvalidArgument(parsed.status().message());
  json m = std::move(parsed).value();
  if (!m.is_object()) return InvalidArgument("manifest must be a JSON object");
  auto sv = m.find("schemaVersion");
  if (sv == m.end() || !sv->is_number_integer() || sv->get<int64_t>() != 2) {
    return InvalidArgument("manifest schemaVersion must be 2");
  }
  std::string media_type;
  auto mt = m.find("mediaType");
  if (mt != m.end()) {
    if (!mt->is_string()) return InvalidArgument("manifest mediaType must be a string");
    media_type = mt->get<std::string>();
  }
  if (content_type.has_value() && !content_type->empty()) {
    std::string ct = MediaTypeOf(*content_type);
    if (!media_type.empty() && ct != media_type) {
      return InvalidArgument("Content-Type '" + ct + "' does not match the manifest mediaType '" +
                             media_type + "'");
    }
    if (media_type.empty()) media_type = ct;
  }
  if (media_type != kOciManifestMediaType) {
    return InvalidArgument("unsupported manifest media type '" + media_type +
                           "': blz stores " + kOciManifestMediaType);
  }
  auto at = m.find("artifactType");
  if (at != m.end() && (!at->is_string() || at->get<std::string>() != kBlzArtifactType)) {
    return InvalidArgument(std::string("manifest artifactType must be \"") + kBlzArtifactType +
                           "\"");
  }
  ManifestRefs refs;
  auto config = m.find("config");
  if (config == m.end()) return InvalidArgument("manifest has no config");
  BLZ_RETURN_IF_ERROR(ParseDescriptor(*config, "config", kBlzConfigMediaType,
                                      &refs.config_digest, &refs.config_size));
  auto layers = m.find("layers");
  if (layers == m.end() || !layers->is_array() || layers->size() != 1) {
    return InvalidArgument("manifest must have exactly one layer (the .blz archive)");
  }
  BLZ_RETURN_IF_ERROR(ParseDescriptor((*layers)[0], "layers[0]", kBlzArchiveMediaType,
                                      &refs.layer_digest, &refs.layer_size));
  return refs;
}

// 200 / 206 / 416 for a stored file, honouring a single-range Range header.
Response ServeFile(const std::string& path, uint64_t size, const RequestHead& head,
                   std::string content_type) {
  Response res;
  res.Set("Accept-Ranges", "bytes");
  RangeRequest range = ParseRangeHeader(head.Get("Range"), size);
  switch (range.kind) {
    case RangeRequest::Kind::kUnsatisfiable: {
      Response err = ErrorResponse(OciError::kRangeInvalid,
                                   "requested range not satisfiable for " +
                                       std::to_string(size) + " bytes",
                                   json{{"size", size}});
      err.Set("Content-Range", "bytes */" + std::to_string(size));
      return err;
    }
    case RangeRequest::Kind::kPartial:
      res.status = 206;
      res.file_offset = range.range.first;
      res.file_length = range.range.length();
      res.Set("Content-Range", "bytes " + std::to_string(range.range.first) + "-" +
                                   std::to_string(range.range.last) + "/" + std::to_string(size));
      break;
    case RangeRequest::Kind::kWhole:
      res.status = 200;
      res.file_offset = 0;
      res.file_length = size;
      break;
  }
  res.file_path = path;
  res.Set("Content-Type", std::move(content_type));
  return res;
}

Response Empty(int status) {
  Response res;
  res.status = status;
  return res;
}

// A (limit, last) pair from ?n=&last=. Errors: kInvalidArgument.
Result<std::pair<std::optional<uint64_t>, std::string>> ParsePagination(
    const Registry::Route& route) {
  std::optional<uint64_t> limit;
  if (auto n = route.Query("n"); n.has_value()) {
    limit = ParseUint(*n);
    if (!limit.has_value()) return InvalidArgument("query parameter n must be a non-negative integer");
    if (*limit > kMaxPageSize) limit = kMaxPageSize;
  }
  return std::make_pair(limit, route.Query("last").value_or(""));
}

// `text` with every occurrence of `from` replaced by `to` (server-side paths by digests, so
// that error messages sent to clients do not reveal the data directory).
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

// The structural hash (64 lower-case hex, formats/identify.h) of the .blz archive stored at
// `path` under `digest`. Reads the archive's header only. Errors: those of BlzArchive::Open and
// StructuralInputFromArchive, naming `digest` instead of `path`.
Result<std::string> ArchiveStructuralHash(const std::string& path, const std::string& digest) {
  Status error;
  Result<formats::BlzArchive> archive = formats::BlzArchive::Open(path);
  if (archive.ok()) {
    Result<formats::StructuralInput> input = formats::StructuralInputFromArchive(*archive);
    if (input.ok()) return formats::StructuralHash(*input);
    error = input.status();
  } else {
    error = archive.status();
  }
  return Status(error.code(), ReplaceAll(error.message(), path, digest));
}

}  // namespace

// ---- construction ----

Registry::Registry(std::string data_dir, RegistryOptions options, store::BlobStore blobs,
                   std::unique_ptr<store::MetadataDb> db)
    : data_dir_(std::move(data_dir)), options_(std::move(options)), blobs_(std::move(blobs)),
      db_(std::move(db)) {}

Result<std::unique_ptr<Registry>> Registry::Open(const std::string& data_dir,
                                                 RegistryOptions options) {
  BLZ_ASSIGN_OR_RETURN(store::BlobStore blobs, store::BlobStore::Open(data_dir));
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<store::MetadataDb> db,
                       store::MetadataDb::Open(data_dir + "/blz.db"));
  // Temporary files of a previous run (request bodies, computed patches) are garbage; upload
  // sessions ("session-<uuid>") survive restarts.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(blobs.uploads_dir(), ec)) {
    std::string fname = entry.path().filename().string();
    if (fname.rfind("session-", 0) != 0) RemoveAll(entry.path().string());
  }
  std::unique_ptr<Registry> registry(
      new Registry(data_dir, std::move(options), std::move(blobs), std::move(db)));
  BLZ_ASSIGN_OR_RETURN(registry->storage_,
                       ArchiveStorage::Open(&registry->blobs_, registry->db_.get(), data_dir,
                                            registry->options_.full_patch,
                                            registry->options_.storage));
  BLZ_RETURN_IF_ERROR(registry->PurgeStaleUploads(/*orphans=*/true));
  BLZ_RETURN_IF_ERROR(registry->BackfillStructuralHashes());
  BLZ_RETURN_IF_ERROR(registry->storage_->ScheduleAll());
  return registry;
}

Result<std::optional<std::string>> Registry::EnsureAdminToken() {
  BLZ_ASSIGN_OR_RETURN(int64_t n, db_->CountTokens("admin"));
  if (n > 0) return std::optional<std::string>();
  BLZ_ASSIGN_OR_RETURN(std::string token, db_->CreateToken("admin"));
  return std::optional<std::string>(std::move(token));
}

uint64_t Registry::patches_computed() const { return patches_computed_.load(); }

std::string Registry::SessionPath(const std::string& uuid) const {
  return blobs_.uploads_dir() + "/session-" + uuid;
}

Status Registry::PurgeStaleUploads(bool orphans) {
  const int64_t now = int64_t(std::time(nullptr));
  last_upload_purge_.store(now);
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> stale,
                       db_->ListUploadsStartedBy(now - int64_t(options_.upload_max_age.count())));
  for (const std::string& uuid : stale) {
    KeyedMutex::Lock lock(&upload_locks_, uuid);
    BLZ_RETURN_IF_ERROR(db_->DeleteUpload(uuid));
    RemoveAll(SessionPath(uuid));
  }
  if (!orphans) return Status::Ok();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(blobs_.uploads_dir(), ec)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("session-", 0) != 0) continue;
    Result<store::UploadRecord> up = db_->GetUpload(fname.substr(8));
    if (!up.ok() && up.status().code() == Code::kNotFound) RemoveAll(entry.path().string());
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
  } else if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "diff") {
    route.kind = Kind::kDiff;
    route.name = Join(raw, 1, n - 2);
  } else if (n >= 4 && c[n - 2] == "tags" && c[n - 1] == "list") {
    route.kind = Kind::kTags;
    route.name = Join(raw, 1, n - 2);
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

  if (IsWriteMethod(head.method) || options_.private_mode) {
    std::optional<std::string> token = BearerToken(head);
    if (!token.has_value()) {
      *error = ErrorResponse(OciError::kUnauthorized,
                             IsWriteMethod(head.method)
                                 ? "authentication required: send Authorization: Bearer <token>"
                                 : "this registry is private: send Authorization: Bearer <token>");
      return std::nullopt;
    }
    Result<bool> valid = db_->VerifyToken(*token);
    if (!valid.ok()) {
      *error = ErrorResponse(valid.status(), ErrorContext::kGeneral);
      return std::nullopt;
    }
    if (!*valid) {
      *error = ErrorResponse(OciError::kUnauthorized, "invalid token");
      return std::nullopt;
    }
  }

  if (route.kind != Kind::kPing && route.kind != Kind::kCatalog &&
      route.kind != Kind::kStructures && route.kind != Kind::kStorage) {
    Status name_ok = ValidateRepositoryName(route.name);
    if (!name_ok.ok()) {
      *error = ErrorResponse(OciError::kNameInvalid, name_ok.message(),
                             json{{"name", route.name}});
      return std::nullopt;
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
    plan.reject->Set(kApiVersionHeader, kApiVersion);
    return plan;
  }
}

BodyPlan Registry::PlanBodyUnchecked(const RequestHead& head) {
  BodyPlan plan;
  plan.kind = BodyPlan::Kind::kMemory;
  plan.limit = kMaxIgnoredBodyBytes;
  Response error;
  std::optional<Route> route = Prepare(head, &error);
  auto reject = [&](Response r) {
    r.Set(kApiVersionHeader, kApiVersion);
    plan.reject = std::move(r);
    return plan;
  };
  if (!route.has_value()) return reject(std::move(error));
  switch (route->kind) {
    case Kind::kBlob:  // may rebuild an archive from its full patch
    case Kind::kPatch:
    case Kind::kDiff:
      plan.heavy = head.method == "GET";
      break;
    case Kind::kManifest:  // a PUT verifies the archive and identifies its structure
    case Kind::kUploadSession:  // a closing PUT hashes the whole blob
      plan.heavy = head.method == "PUT";
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
      Result<uint64_t> size = FileSizeOf(SessionPath(route->ref));
      std::optional<ByteRange> r = ParseChunkRange(*cr);
      if (size.ok() && (!r.has_value() || r->first != *size)) {
        Response err = ErrorResponse(OciError::kRangeInvalid,
                                     "chunk Content-Range '" + *cr + "' does not continue at byte " +
                                         std::to_string(*size));
        err.Set("Location", "/v2/" + route->name + "/blobs/uploads/" + route->ref);
        err.Set("Range", UploadRange(*size));
        err.Set("Docker-Upload-UUID", route->ref);
        return reject(std::move(err));
      }
    }
    file_body = true;
  } else if (route->kind == Kind::kManifest && head.method == "PUT") {
    plan.limit = options_.max_manifest_bytes;
  }
  if (file_body) {
    plan.kind = BodyPlan::Kind::kFile;
    plan.limit = options_.max_blob_bytes;
    plan.file_path = blobs_.NewTempPath("body");
  }
  if (head.content_length.has_value() && *head.content_length > plan.limit) {
    plan.file_path.clear();
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
    std::optional<Route> route = Prepare(request.head, &error);
    res = route.has_value() ? Dispatch(*route, request) : std::move(error);
  } catch (const std::exception& e) {
    res = ErrorResponse(OciError::kUnknown, std::string("internal error: ") + e.what());
  }
  res.Set(kApiVersionHeader, kApiVersion);
  if (request.head.method == "HEAD") res.head_only = true;
  return res;
}

Response Registry::Dispatch(const Route& route, const Request& request) {
  const std::string& m = route.method;
  switch (route.kind) {
    case Kind::kPing: return Ping(route);
    case Kind::kCatalog: return Catalog(route);
    case Kind::kBlob: return GetBlob(route, request.head);
    case Kind::kUploadStart: return StartUpload(route, request);
    case Kind::kUploadSession:
      if (m == "GET") return UploadStatus(route);
      if (m == "PATCH") return PatchUpload(route, request);
      if (m == "PUT") return FinishUpload(route, request);
      return CancelUpload(route);
    case Kind::kManifest:
      if (m == "PUT") return PutManifest(route, request);
      return GetManifest(route);
    case Kind::kTags: return ListTags(route);
    case Kind::kPatch: return GetPatch(route, request.head);
    case Kind::kDiff: return GetValueDiff(route, request.head);
    case Kind::kStructures: return ListStructure(route);
    case Kind::kStorage: return GetStorageStatus();
  }
  return ErrorResponse(OciError::kNotFound, "no such endpoint");
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
  Result<store::Page> page = db_->ListRepositories(limit, last);
  if (!page.ok()) return ErrorResponse(page.status(), ErrorContext::kGeneral);
  Response res;
  res.body = json{{"repositories", page->items}}.dump();
  res.Set("Content-Type", "application/json");
  if (page->more && !page->items.empty()) {
    res.Set("Link", "</v2/_catalog?n=" + std::to_string(*limit) + "&last=" +
                        page->items.back() + ">; rel=\"next\"");
  }
  return res;
}

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

// REQUIRES: the session's upload lock is held.
bool Registry::UploadSessionBelongs(const Route& route) {
  Result<store::UploadRecord> up = db_->GetUpload(route.ref);
  return up.ok() && up->repository == route.name;
}

Response Registry::StartUpload(const Route& route, const Request& request) {
  std::optional<std::string> digest = route.Query("digest");
  if (!digest.has_value()) {
    // Open a session (a cross-repository ?mount= is not supported: fall back to an upload, as
    // the spec allows).
    if (int64_t now = int64_t(std::time(nullptr)); now - last_upload_purge_.load() >= 3600) {
      (void)PurgeStaleUploads(/*orphans=*/false);  // best effort: a failure must not block uploads
    }
    const std::string uuid = NewUuid();
    Status s = WriteFileAtomic(SessionPath(uuid), "");
    if (s.ok()) s = db_->CreateUpload(uuid, route.name);
    if (!s.ok()) {
      RemoveAll(SessionPath(uuid));
      return ErrorResponse(s, ErrorContext::kUpload);
    }
    Response res = Empty(202);
    SetUploadProgress(&res, route.name, uuid, 0);
    return res;
  }
  // Monolithic upload: the body is the whole blob.
  if (!ParseDigest(*digest).ok()) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid digest '" + *digest + "'",
                         json{{"digest", *digest}});
  }
  std::string body_file = request.body_file;
  std::string own_temp;
  if (body_file.empty()) {  // body in memory (callers that skipped PlanBody)
    own_temp = blobs_.NewTempPath("body");
    Status s = WriteFileAtomic(own_temp, request.body);
    if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
    body_file = own_temp;
  }
  Result<store::BlobInfo> info = blobs_.Publish(body_file, *digest);
  if (!own_temp.empty()) RemoveAll(own_temp);
  if (!info.ok()) {
    return ErrorResponse(OciErrorFor(info.status(), ErrorContext::kUpload),
                         info.status().message(), json{{"digest", *digest}});
  }
  Status s = db_->RecordBlob(info->digest, info->size);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
  Response res = Empty(201);
  res.Set("Location", "/v2/" + route.name + "/blobs/" + info->digest);
  res.Set("Docker-Content-Digest", info->digest);
  return res;
}

bool Registry::AppendChunk(const Route& route, const Request& request, uint64_t* new_size,
                           Response* error) {
  const std::string session = SessionPath(route.ref);
  Result<uint64_t> size = FileSizeOf(session);
  if (!size.ok()) {
    *error = size.status().code() == Code::kNotFound
                 ? ErrorResponse(OciError::kBlobUploadUnknown,
                                 "upload session '" + route.ref + "' lost its data")
                 : ErrorResponse(size.status(), ErrorContext::kUpload);
    return false;
  }
  std::string body_file = request.body_file;
  std::string own_temp;
  uint64_t chunk = request.body.size();
  if (!body_file.empty()) {
    Result<uint64_t> n = FileSizeOf(body_file);
    if (!n.ok()) {
      *error = ErrorResponse(n.status(), ErrorContext::kGeneral);
      return false;
    }
    chunk = *n;
  }
  auto fail_range = [&](const std::string& msg) {
    *error = ErrorResponse(OciError::kRangeInvalid, msg);
    SetUploadProgress(error, route.name, route.ref, *size);
    return false;
  };
  if (std::optional<std::string> cr = request.head.Get("Content-Range"); cr.has_value()) {
    std::optional<ByteRange> r = ParseChunkRange(*cr);
    if (!r.has_value()) return fail_range("malformed chunk Content-Range '" + *cr + "'");
    if (r->first != *size) {
      return fail_range("chunk starts at byte " + std::to_string(r->first) +
                        " but the upload has " + std::to_string(*size) + " bytes");
    }
    if (r->length() != chunk) {
      return fail_range("chunk Content-Range '" + *cr + "' announces " +
                        std::to_string(r->length()) + " bytes but the body has " +
                        std::to_string(chunk));
    }
  }
  uint64_t total = 0;
  if (!CheckedAdd(*size, chunk, &total) || total > options_.max_blob_bytes) {
    *error = ErrorResponse(OciError::kTooLarge, "upload would exceed the blob size limit of " +
                                                    std::to_string(options_.max_blob_bytes) +
                                                    " bytes");
    return false;
  }
  if (chunk > 0 && *size == 0 && !body_file.empty()) {
    // The first (often the only) chunk: move the streamed body into place instead of copying
    // it; both files are in <data>/uploads, so this is a rename over the empty session file.
    if (::rename(body_file.c_str(), session.c_str()) != 0) {
      *error = ErrorResponse(IOError(session + ": cannot move the uploaded body into place: " +
                                     std::strerror(errno)),
                             ErrorContext::kUpload);
      return false;
    }
  } else if (chunk > 0) {
    if (body_file.empty()) {
      own_temp = blobs_.NewTempPath("body");
      Status s = WriteFileAtomic(own_temp, request.body);
      if (!s.ok()) {
        *error = ErrorResponse(s, ErrorContext::kUpload);
        return false;
      }
      body_file = own_temp;
    }
    Status s = AppendFile(body_file, session);
    if (!own_temp.empty()) RemoveAll(own_temp);
    if (!s.ok()) {
      // Undo a partial append so the session stays consistent with what the client was told.
      if (::truncate(session.c_str(), off_t(*size)) != 0) {
        s = s.WithContext("and truncating back failed");
      }
      *error = ErrorResponse(s, ErrorContext::kUpload);
      return false;
    }
  }
  *new_size = total;
  return true;
}

Response Registry::PatchUpload(const Route& route, const Request& request) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  if (!UploadSessionBelongs(route)) return UnknownUpload(route.ref);
  uint64_t size = 0;
  Response error;
  if (!AppendChunk(route, request, &size, &error)) return error;
  Response res = Empty(202);
  SetUploadProgress(&res, route.name, route.ref, size);
  return res;
}

Response Registry::UploadStatus(const Route& route) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  if (!UploadSessionBelongs(route)) return UnknownUpload(route.ref);
  Result<uint64_t> size = FileSizeOf(SessionPath(route.ref));
  if (!size.ok()) return ErrorResponse(size.status(), ErrorContext::kUpload);
  Response res = Empty(204);
  SetUploadProgress(&res, route.name, route.ref, *size);
  return res;
}

Response Registry::FinishUpload(const Route& route, const Request& request) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  if (!UploadSessionBelongs(route)) return UnknownUpload(route.ref);
  std::optional<std::string> digest = route.Query("digest");
  if (!digest.has_value() || !ParseDigest(*digest).ok()) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "closing PUT needs ?digest=sha256:<64 lower-case hex>",
                         json{{"digest", digest.value_or("")}});
  }
  uint64_t size = 0;
  Response error;
  if (!AppendChunk(route, request, &size, &error)) return error;
  const std::string session = SessionPath(route.ref);
  Result<store::BlobInfo> info = blobs_.Publish(session, *digest);
  if (!info.ok()) {
    if (info.status().code() == Code::kDigestMismatch) {
      // The session's bytes are not the blob the client meant: discard the session.
      RemoveAll(session);
      (void)db_->DeleteUpload(route.ref);
    }
    return ErrorResponse(OciErrorFor(info.status(), ErrorContext::kUpload),
                         info.status().message(), json{{"digest", *digest}});
  }
  Status s = db_->DeleteUpload(route.ref);
  if (s.ok()) s = db_->RecordBlob(info->digest, info->size);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
  Response res = Empty(201);
  res.Set("Location", "/v2/" + route.name + "/blobs/" + info->digest);
  res.Set("Docker-Content-Digest", info->digest);
  return res;
}

Response Registry::CancelUpload(const Route& route) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  if (!UploadSessionBelongs(route)) return UnknownUpload(route.ref);
  RemoveAll(SessionPath(route.ref));
  Status s = db_->DeleteUpload(route.ref);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
  return Empty(204);
}

Response Registry::PutManifest(const Route& route, const Request& request) {
  const std::string& ref = route.ref;
  const bool by_digest = ref.find(':') != std::string::npos;
  if (by_digest && !ParseDigest(ref).ok()) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid manifest digest '" + ref + "'",
                         json{{"digest", ref}});
  }
  if (!by_digest && !IsValidTag(ref)) {
    return ErrorResponse(OciError::kManifestInvalid,
                         "invalid tag '" + ref + "': must match [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}",
                         json{{"tag", ref}});
  }
  std::string body = request.body;
  if (!request.body_file.empty()) {
    Result<std::string> b = ReadSmallFile(request.body_file, options_.max_manifest_bytes);
    if (!b.ok()) return ErrorResponse(b.status(), ErrorContext::kManifest);
    body = std::move(*b);
  }
  if (body.size() > options_.max_manifest_bytes) {
    return ErrorResponse(OciError::kTooLarge, "manifest of " + std::to_string(body.size()) +
                                                  " bytes exceeds the limit of " +
                                                  std::to_string(options_.max_manifest_bytes));
  }
  Result<ManifestRefs> refs = ParseBlzManifest(body, request.head.Get("Content-Type"));
  if (!refs.ok()) return ErrorResponse(refs.status(), ErrorContext::kManifest);

  const std::pair<const std::string*, uint64_t> wanted[] = {
      {&refs->config_digest, refs->config_size}, {&refs->layer_digest, refs->layer_size}};
  for (const auto& [digest, size] : wanted) {
    Result<store::BlobInfo> info = storage_->Stat(*digest);
    if (!info.ok()) {
      if (info.status().code() == Code::kNotFound) {
        return ErrorResponse(OciError::kManifestBlobUnknown,
                             "manifest references blob " + *digest + ", which is not in the registry",
                             json{{"digest", *digest}});
      }
      return ErrorResponse(info.status(), ErrorContext::kManifest);
    }
    if (info->size != size) {
      return ErrorResponse(OciError::kManifestInvalid,
                           "manifest says blob " + *digest + " has " + std::to_string(size) +
                               " bytes, but it has " + std::to_string(info->size),
                           json{{"digest", *digest}});
    }
  }

  const std::string digest = MakeDigest(Sha256Hex(body));
  if (by_digest && digest != ref) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "manifest hashes to " + digest + ", not " + ref, json{{"digest", ref}});
  }
  // Every version records its structure; an archive blz cannot identify is not a version.
  Result<std::string> structural_hash = NotFound("archive blob missing");
  if (Result<store::BlobInfo> layer = storage_->File(refs->layer_digest); layer.ok()) {
    structural_hash = ArchiveStructuralHash(layer->path, refs->layer_digest);
  }
  if (!structural_hash.ok()) {
    const Status& e = structural_hash.status();
    if (e.code() == Code::kIOError || e.code() == Code::kInternal || e.code() == Code::kNotFound) {
      return ErrorResponse(OciError::kUnknown, "identifying the archive failed: " + e.ToString(),
                           json{{"digest", refs->layer_digest}});
    }
    return ErrorResponse(OciError::kManifestInvalid,
                         "layers[0] " + refs->layer_digest +
                             " is not a model archive whose structure blz can identify: " +
                             e.ToString(),
                         json{{"digest", refs->layer_digest}});
  }
  // The archive's data must pass `blz verify` (every tensor's xxh3-64 and SHA-256, every file's
  // SHA-256) before the version exists: a corrupt archive can be neither stored as a full patch
  // nor patched, and clients would receive it. Checked once per archive (remembered).
  if (Status v = storage_->VerifyArchive(refs->layer_digest); !v.ok()) {
    if (v.code() == Code::kIOError || v.code() == Code::kInternal ||
        v.code() == Code::kNotFound || v.code() == Code::kUnavailable) {
      return ErrorResponse(OciError::kUnknown, "verifying the archive failed: " + v.ToString(),
                           json{{"digest", refs->layer_digest}});
    }
    return ErrorResponse(OciError::kManifestInvalid,
                         "layers[0] " + refs->layer_digest +
                             " fails verification, nothing was stored: " + v.ToString(),
                         json{{"digest", refs->layer_digest}});
  }
  store::ManifestPut put;
  put.repository = route.name;
  put.digest = digest;
  put.media_type = kOciManifestMediaType;
  put.content = std::move(body);
  put.tag = by_digest ? "" : ref;
  put.archive_digest = refs->layer_digest;
  put.archive_size = refs->layer_size;
  put.structural_hash = std::move(*structural_hash);
  Status s = db_->PutManifest(put);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kManifest);
  storage_->Schedule(put.archive_digest);  // store it as a full patch, in the background
  Response res = Empty(201);
  res.Set("Location", "/v2/" + route.name + "/manifests/" + digest);
  res.Set("Docker-Content-Digest", digest);
  return res;
}

Response Registry::GetManifest(const Route& route) {
  const std::string& ref = route.ref;
  std::string digest;
  if (ref.find(':') != std::string::npos) {
    if (!ParseDigest(ref).ok()) {
      return ErrorResponse(OciError::kDigestInvalid, "invalid manifest digest '" + ref + "'",
                           json{{"digest", ref}});
    }
    digest = ref;
  } else {
    if (!IsValidTag(ref)) {
      return ErrorResponse(OciError::kManifestUnknown, "invalid tag '" + ref + "'",
                           json{{"tag", ref}});
    }
    Result<std::string> d = db_->ResolveTag(route.name, ref);
    if (!d.ok()) {
      return ErrorResponse(OciErrorFor(d.status(), ErrorContext::kManifest), d.status().message(),
                           json{{"tag", ref}});
    }
    digest = std::move(*d);
  }
  Result<store::ManifestRecord> m = db_->GetManifest(route.name, digest);
  if (!m.ok()) {
    return ErrorResponse(OciErrorFor(m.status(), ErrorContext::kManifest), m.status().message(),
                         json{{"digest", digest}});
  }
  Response res;
  res.body = std::move(m->content);
  res.Set("Content-Type", m->media_type);
  res.Set("Docker-Content-Digest", digest);
  res.Set("ETag", "\"" + digest + "\"");
  return res;
}

Response Registry::ListTags(const Route& route) {
  auto page_args = ParsePagination(route);
  if (!page_args.ok()) return ErrorResponse(page_args.status(), ErrorContext::kGeneral);
  auto [limit, last] = *page_args;
  Result<store::Page> page = db_->ListTags(route.name, limit, last);
  if (!page.ok()) {
    return ErrorResponse(OciErrorFor(page.status(), ErrorContext::kName), page.status().message(),
                         json{{"name", route.name}});
  }
  Response res;
  res.body = json{{"name", route.name}, {"tags", page->items}}.dump();
  res.Set("Content-Type", "application/json");
  if (page->more && !page->items.empty()) {
    res.Set("Link", "</v2/" + route.name + "/tags/list?n=" + std::to_string(*limit) + "&last=" +
                        page->items.back() + ">; rel=\"next\"");
  }
  return res;
}

Response Registry::GetPatch(const Route& route, const RequestHead& head) {
  std::optional<std::string> from = route.Query("from");
  std::optional<std::string> to = route.Query("to");
  if (!from.has_value() && to.has_value() && ParseDigest(*to).ok()) {
    return GetFullPatch(route, head, *to);
  }
  std::string paths[2];
  if (Response error; !ResolveFromTo(route, from, to,
                                     "patch needs ?to=<archive digest> and, for a patch from a "
                                     "base, ?from=<archive digest>",
                                     paths, &error)) {
    return error;
  }

  auto serve = [&](const store::BlobInfo& patch, bool hit) {
    Response res = ServeFile(patch.path, patch.size, head, kBlzPatchMediaType);
    if (res.status < 300) {
      res.Set("Docker-Content-Digest", patch.digest);
      res.Set("Blz-Patch-Cache", hit ? "hit" : "miss");
    }
    return res;
  };

  bool compute_failed = false;
  auto compute = [&]() {
    return ComputeCached(
        &patch_locks_, *from + ">" + *to, "patch",
        [&]() -> Result<std::string> {
          BLZ_ASSIGN_OR_RETURN(store::PatchRecord cached, db_->FindPatch(*from, *to));
          return cached.patch_digest;
        },
        [&](const std::string& out) -> Status {
          if (!options_.create_patch) return Unsupported("this server cannot compute patches");
          return options_.create_patch(paths[0], *from, paths[1], *to, out);
        },
        [&](const store::BlobInfo& blob) {
          return db_->RecordPatch(route.name,
                                  store::PatchRecord{*from, *to, blob.digest, blob.size});
        },
        &compute_failed);
  };
  Result<CachedBlob> computed = compute();
  // A cached patch damaged on disk is quarantined (verify on read) and computed again.
  if (computed.ok() && computed->hit &&
      storage_->CheckStoredBlob(computed->blob).code() == Code::kCorruption) {
    computed = compute();
  }
  if (!computed.ok()) {
    if (!compute_failed) return ErrorResponse(computed.status(), ErrorContext::kPatch);
    if (!options_.create_patch) {
      return ErrorResponse(OciError::kUnsupported, computed.status().message());
    }
    return ErrorResponse(OciError::kUnknown,
                         "computing the patch failed: " + computed.status().ToString());
  }
  if (!computed->hit) patches_computed_.fetch_add(1);
  return serve(computed->blob, computed->hit);
}

// ---- blz structures and value diffs (docs/registry-api.md) ----

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

bool Registry::ResolveFromTo(const Route& route, const std::optional<std::string>& from,
                             const std::optional<std::string>& to, std::string_view usage,
                             std::string paths[2], Response* error) {
  for (const auto* d : {&from, &to}) {
    if (!d->has_value() || !ParseDigest(**d).ok()) {
      *error = ErrorResponse(OciError::kDigestInvalid,
                             std::string(usage) + " (sha256:<64 lower-case hex>)",
                             json{{"from", from.value_or("")}, {"to", to.value_or("")}});
      return false;
    }
  }
  return ResolveVersionArchive(route, *from, &paths[0], error) &&
         ResolveVersionArchive(route, *to, &paths[1], error);
}

bool Registry::ResolveVersionArchive(const Route& route, const std::string& digest,
                                     std::string* path, Response* error) {
  Result<store::VersionRecord> v = db_->FindVersion(route.name, digest);
  if (!v.ok()) {
    *error = ErrorResponse(OciErrorFor(v.status(), ErrorContext::kPatch), v.status().message(),
                           json{{"digest", digest}});
    return false;
  }
  Result<store::BlobInfo> blob = storage_->File(digest);  // rebuilt if stored as a full patch
  if (!blob.ok()) {
    *error = ErrorResponse(OciErrorFor(blob.status(), ErrorContext::kBlob),
                           blob.status().message(), json{{"digest", digest}});
    return false;
  }
  *path = blob->path;
  return true;
}

Result<Registry::CachedBlob> Registry::ComputeCached(
    KeyedMutex* locks, const std::string& key, std::string_view temp_name,
    const std::function<Result<std::string>()>& find,
    const std::function<Status(const std::string&)>& compute,
    const std::function<Status(const store::BlobInfo&)>& record, bool* compute_failed) {
  *compute_failed = false;
  KeyedMutex::Lock lock(locks, key);
  Result<std::string> cached = find();
  if (cached.ok()) {
    Result<store::BlobInfo> blob = blobs_.Stat(*cached);
    if (blob.ok()) return CachedBlob{std::move(*blob), /*hit=*/true};
    // The blob went missing: compute it again.
  } else if (cached.status().code() != Code::kNotFound) {
    return cached.status();
  }
  const std::string temp = blobs_.NewTempPath(temp_name);
  Status s = compute(temp);
  if (!s.ok()) {
    RemoveAll(temp);
    *compute_failed = true;
    return s;
  }
  Result<store::BlobInfo> blob = blobs_.PublishComputed(temp);
  RemoveAll(temp);  // gone after a successful publish; removes leftovers otherwise
  if (!blob.ok()) return blob.status();
  BLZ_RETURN_IF_ERROR(db_->RecordBlob(blob->digest, blob->size));
  BLZ_RETURN_IF_ERROR(record(*blob));
  return CachedBlob{std::move(*blob), /*hit=*/false};
}

Response Registry::GetValueDiff(const Route& route, const RequestHead& head) {
  std::optional<std::string> from = route.Query("from");
  std::optional<std::string> to = route.Query("to");
  std::string paths[2];
  if (Response error; !ResolveFromTo(route, from, to,
                                     "value diff needs ?from=<archive digest>&to=<archive digest>",
                                     paths, &error)) {
    return error;
  }
  bool compute_failed = false;
  Result<CachedBlob> computed = ComputeCached(
      &diff_locks_, *from + ">" + *to, "diff",
      [&]() -> Result<std::string> {
        BLZ_ASSIGN_OR_RETURN(store::ValueDiffRecord cached, db_->FindValueDiff(*from, *to));
        return cached.diff_digest;
      },
      [&](const std::string& out) -> Status {
        // The document of `blz diff --values --json`, naming the archives by digest.
        formats::ValueDiffJsonOptions options;
        options.a_label = *from;
        options.b_label = *to;
        Result<std::string> doc = formats::ComputeValueDiffJson(paths[0], paths[1], options);
        if (!doc.ok()) {
          return Status(doc.status().code(),
                        ReplaceAll(ReplaceAll(doc.status().message(), paths[0], *from),
                                   paths[1], *to));
        }
        return WriteFileAtomic(out, *doc);
      },
      [&](const store::BlobInfo& blob) {
        return db_->RecordValueDiff(store::ValueDiffRecord{*from, *to, blob.digest, blob.size});
      },
      &compute_failed);
  if (!computed.ok()) {
    if (!compute_failed) return ErrorResponse(computed.status(), ErrorContext::kPatch);
    return ErrorResponse(OciError::kUnknown,
                         "computing the value diff failed: " + computed.status().ToString());
  }
  if (!computed->hit) value_diffs_computed_.fetch_add(1);
  Response res = ServeFile(computed->blob.path, computed->blob.size, head, "application/json");
  if (res.status < 300) {
    res.Set("Docker-Content-Digest", computed->blob.digest);
    res.Set("Blz-Diff-Cache", computed->hit ? "hit" : "miss");
  }
  return res;
}

Response Registry::ListStructure(const Route& route) {
  std::string_view hash = route.ref;
  if (hash.substr(0, 7) == "sha256:") hash.remove_prefix(7);
  if (!IsLowerHex(hash, 64)) {
    return ErrorResponse(OciError::kBadRequest,
                         "invalid structural hash '" + route.ref +
                             "': must be 64 lower-case hex digits, optionally prefixed "
                             "\"sha256:\" (see `blz id`)",
                         json{{"structure", route.ref}});
  }
  auto page_args = ParsePagination(route);
  if (!page_args.ok()) return ErrorResponse(page_args.status(), ErrorContext::kGeneral);
  auto [limit, last] = *page_args;
  // ?last= is an entry as the Link header names it: <repository>[:<tag>]@<archive digest>.
  store::StructureCursor after;
  if (!last.empty()) {
    const size_t at = last.find('@');
    const size_t colon = last.find(':');
    bool ok = at != std::string::npos;
    if (ok) {
      after.archive_digest = last.substr(at + 1);
      after.repository = last.substr(0, std::min(at, colon));
      if (colon < at) after.tag = last.substr(colon + 1, at - colon - 1);
      ok = ParseDigest(after.archive_digest).ok() &&
           ValidateRepositoryName(after.repository).ok() &&
           (colon > at || IsValidTag(after.tag));
    }
    if (!ok) {
      return ErrorResponse(OciError::kBadRequest,
                           "query parameter last must be <repository>[:<tag>]@<archive digest>, "
                           "as in the Link header",
                           json{{"last", last}});
    }
  }
  const std::string structure(hash);
  Result<store::StructurePage> page = db_->ListStructureVersions(structure, limit, after);
  if (!page.ok()) return ErrorResponse(page.status(), ErrorContext::kGeneral);
  nlohmann::ordered_json versions = nlohmann::ordered_json::array();
  for (const store::StructureVersion& v : page->items) {
    versions.push_back({{"repository", v.repository},
                        {"tag", v.tag ? nlohmann::ordered_json(*v.tag) : nullptr},
                        {"digest", v.archive_digest},
                        {"manifest_digest", v.manifest_digest}});
  }
  Response res;
  res.body = nlohmann::ordered_json{{"structure", structure}, {"versions", std::move(versions)}}
                 .dump();
  res.Set("Content-Type", "application/json");
  if (page->more && !page->items.empty()) {
    const store::StructureVersion& v = page->items.back();
    res.Set("Link", "</v2/_blz/structures/" + structure + "?n=" + std::to_string(*limit) +
                        "&last=" + v.repository + (v.tag ? ":" + *v.tag : "") + "@" +
                        v.archive_digest + ">; rel=\"next\"");
  }
  return res;
}

// ---- archive storage: full patches, storage status (docs/registry-api.md, "Storage") ----

Response Registry::GetFullPatch(const Route& route, const RequestHead& head,
                                const std::string& to) {
  Result<store::VersionRecord> v = db_->FindVersion(route.name, to);
  if (!v.ok()) {
    return ErrorResponse(OciErrorFor(v.status(), ErrorContext::kPatch), v.status().message(),
                         json{{"digest", to}});
  }
  if (!storage_->enabled()) {
    return ErrorResponse(OciError::kUnsupported, "this server cannot compute full patches");
  }
  // Computed (and verified) once per archive; usually done already by the background thread.
  Result<ArchiveStorage::FullPatch> full = storage_->GetFullPatch(to);
  if (!full.ok()) {
    const Status& e = full.status();
    if (e.code() == Code::kNotFound) {
      return ErrorResponse(OciError::kBlobUnknown, e.message(), json{{"digest", to}});
    }
    if (e.code() == Code::kUnavailable) return ErrorResponse(e, ErrorContext::kPatch);
    return ErrorResponse(OciError::kUnknown, "computing the full patch failed: " + e.ToString(),
                         json{{"digest", to}});
  }
  Response res = ServeFile(full->blob.path, full->blob.size, head, kBlzPatchMediaType);
  if (res.status < 300) {
    res.Set("Docker-Content-Digest", full->blob.digest);
    res.Set("Blz-Patch-Cache", full->hit ? "hit" : "miss");
  }
  return res;
}

Response Registry::GetStorageStatus() {
  const StorageStatus st = storage_->status();
  nlohmann::ordered_json doc = {
      {"full_patches", storage_->enabled()},
      {"drop_raw_archives", storage_->enabled() && options_.storage.drop_raw_archives},
      {"pending", st.pending},
      {"compressing", st.compressing.empty() ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(st.compressing)},
      {"compressed", st.compressed},
      {"failed", st.failed},
      {"full_patches_computed", st.full_patches_computed},
      {"rebuilds", st.rebuilds},
      {"quarantined", st.quarantined},
      {"cache", {{"bytes", st.cache_bytes}, {"entries", st.cache_entries},
                 {"limit", st.cache_limit}}}};
  Response res;
  res.body = doc.dump();
  res.Set("Content-Type", "application/json");
  return res;
}

}  // namespace blz::registry
