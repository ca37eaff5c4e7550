// Blob uploads: POST /v2/<name>/blobs/uploads/ (sessions and monolithic uploads) and
// GET, PATCH, PUT, DELETE /v2/<name>/blobs/uploads/<uuid> (docs/registry-api.md).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "store/blob_store.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {

namespace {

using json = nlohmann::json;
using internal::Empty;
using internal::IsUuid;
using internal::UploadRange;

// A random version-4-style UUID: 8-4-4-4-12 lower-case hex digits.
std::string NewUuid() {
  std::string hex = RandomHex(16);
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

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

// 201 Created for a blob now readable at /v2/<name>/blobs/<digest>.
Response BlobCreated(const std::string& name, const std::string& digest) {
  Response res = Empty(201);
  res.Set("Location", "/v2/" + name + "/blobs/" + digest);
  res.Set("Docker-Content-Digest", digest);
  return res;
}

// The digest a hash computed while the bytes arrived gives for a blob named `expected` (an
// OCI digest), or "" when it cannot tell (no hash; a sha512 name: only SHA-256 is computed).
std::string ReceivedDigest(const std::shared_ptr<BodyHash>& hash, const std::string& expected) {
  if (hash == nullptr || expected.rfind("sha256:", 0) != 0) return "";
  return MakeDigest(hash->sha.FinishHex());
}

// Publishes `file` (under the store's uploads) as blob `digest`: without reading it again when
// its bytes were hashed as they arrived (`hash`, over `hashed` bytes), else hashed now.
Result<store::BlobInfo> PublishReceived(const store::BlobStore& blobs, const std::string& file,
                                        const std::string& digest,
                                        const std::shared_ptr<BodyHash>& hash) {
  const uint64_t hashed = hash != nullptr ? hash->bytes : 0;
  const std::string computed = ReceivedDigest(hash, digest);
  if (computed.empty()) return blobs.Publish(file, digest);
  return blobs.PublishHashed(file, digest, computed, hashed);
}

}  // namespace

std::shared_ptr<BodyHash> Registry::TakeUploadHash(const std::string& uuid,
                                                   const store::UploadRecord& up) {
  std::lock_guard<std::mutex> lock(upload_hashes_mu_);
  auto it = upload_hashes_.find(uuid);
  if (up.size == 0 && up.parts.empty()) {
    if (it != upload_hashes_.end()) upload_hashes_.erase(it);
    return std::make_shared<BodyHash>();
  }
  if (it == upload_hashes_.end()) return nullptr;
  std::shared_ptr<BodyHash> hash = std::move(it->second.hash);
  const bool matches = hash != nullptr && !up.parts.empty() && it->second.part == up.parts.back() &&
                       hash->bytes == up.size;
  upload_hashes_.erase(it);
  return matches ? hash : nullptr;
}

void Registry::KeepUploadHash(const std::string& uuid, const std::string& part,
                              std::shared_ptr<BodyHash> hash) {
  constexpr size_t kMaxKept = 1024;  // open sessions hashed at once; beyond, PUT re-hashes
  std::lock_guard<std::mutex> lock(upload_hashes_mu_);
  if (upload_hashes_.size() >= kMaxKept && upload_hashes_.count(uuid) == 0) {
    upload_hashes_.erase(upload_hashes_.begin());
  }
  upload_hashes_[uuid] = KeptUploadHash{part, std::move(hash)};
}

void Registry::DropUploadHash(const std::string& uuid) {
  std::lock_guard<std::mutex> lock(upload_hashes_mu_);
  upload_hashes_.erase(uuid);
}

std::shared_ptr<store::UploadSessionFile> Registry::LockSessionFile(const std::string& uuid,
                                                                    store::UploadRecord* up) {
  // Judged first from the row already read: no file is created for a session that cannot use it.
  if (!store::SessionFileHoldsAll(up->parts, up->size)) return nullptr;
  Result<std::unique_ptr<store::UploadSessionFile>> file = blobs_->LockSessionFile(uuid);
  if (!file.ok()) return nullptr;
  // Read again under the lock: a chunk recorded before it moved the offset. Only the lock's
  // holder writes the file; a chunk recorded as an ordinary part after this (another request
  // at the same offset) makes this body's bytes garbage past the last part, and its handler
  // answers 416 (AppendChunk).
  Result<store::UploadRecord> now = db_->GetUpload(uuid);
  if (!now.ok() && now.status().code() == Code::kNotFound) {
    file->reset();
    (void)blobs_->DeleteUploadParts(uuid);  // finished or purged since: the file just made goes
    return nullptr;
  }
  if (!now.ok() || now->repository != up->repository ||
      !store::SessionFileHoldsAll(now->parts, now->size) || (*file)->size() < now->size) {
    return nullptr;
  }
  *up = std::move(*now);
  return std::shared_ptr<store::UploadSessionFile>(std::move(*file));
}

std::optional<Response> Registry::TryMount(const Route& route) {
  const std::string digest = *route.Query("mount");
  if (!IsValidOciDigest(digest)) return std::nullopt;
  KeyedMutex::Lock blob_lock(&blob_locks_, digest);  // check to link: see garbage collection
  // Touched before the checks: another replica's collector either keeps the blob or has
  // already removed it with its links (then nothing is mounted).
  if (!db_->TouchBlob(digest).ok()) return std::nullopt;
  const std::optional<std::string> from = route.Query("from");
  Result<bool> readable = false;
  if (from.has_value()) {
    // Only from a repository that holds the blob and that the caller may read (Prepare checked
    // pull access to ?from=).
    if (!route.mount_source_readable) return std::nullopt;
    readable = db_->BlobLinked(*from, digest);
  } else if (!options_.private_mode) {
    // Automatic mount: every repository of a public registry is readable by anyone, so a blob
    // linked anywhere may be linked here too.
    readable = db_->BlobLinkedAnywhere(digest);
  }
  if (!readable.ok()) return ErrorResponse(readable.status(), ErrorContext::kUpload);
  if (!*readable || !storage_->Stat(digest).ok()) return std::nullopt;
  if (Status s = db_->LinkBlob(route.name, digest); !s.ok()) {
    // Collected since the checks (another replica): no mount, the client uploads it.
    if (s.code() == Code::kNotFound) return std::nullopt;
    return ErrorResponse(s, ErrorContext::kUpload);
  }
  return BlobCreated(route.name, digest);
}

// REQUIRES: the session's upload lock is held.
bool Registry::UploadSessionBelongs(const Route& route) {
  Result<store::UploadRecord> up = db_->GetUpload(route.ref);
  return up.ok() && up->repository == route.name;
}

Response Registry::StartUpload(const Route& route, const Request& request) {
  std::optional<std::string> digest = route.Query("digest");
  // A patch upload (registry/patch_upload_handlers.cc): the base is checked before any byte
  // is taken.
  const std::string patch_from = route.Query("blz-patch-from").value_or("");
  if (route.Query("blz-patch-from").has_value()) {
    if (std::optional<Response> refused = CheckPatchBase(route, patch_from)) {
      return std::move(*refused);
    }
  }
  if (!digest.has_value()) {
    if (route.Query("mount").has_value() && patch_from.empty()) {
      if (std::optional<Response> mounted = TryMount(route)) return std::move(*mounted);
    }
    // Open a session (also when a ?mount= cannot be served: the spec's fallback).
    if (int64_t now = int64_t(std::time(nullptr)); now - last_upload_purge_.load() >= 3600) {
      (void)PurgeStaleUploads(/*orphans=*/false);  // best effort: a failure must not block uploads
    }
    const std::string uuid = NewUuid();
    auto create = [&] {
      return db_->CreateUpload(uuid, route.name, route.client, options_.max_uploads_per_token,
                               options_.max_uploads_per_repository, patch_from);
    };
    // The session is its row (offset 0, no parts): any replica continues it.
    Status s = create();
    if (s.code() == Code::kTooLarge &&
        int64_t(std::time(nullptr)) - last_upload_purge_.load() >= 60) {
      // At a cap: first drop the idle sessions (at most once a minute), then try again.
      (void)PurgeStaleUploads(/*orphans=*/false);
      s = create();
    }
    if (!s.ok()) {
      if (s.code() == Code::kTooLarge) {
        // Too many open sessions (docs/registry-api.md, "Quotas and limits").
        Response res = ErrorResponse(OciError::kTooManyRequests, s.message(),
                                     json{{"repository", route.name}});
        res.Set("Retry-After", "60");
        return res;
      }
      return ErrorResponse(s, ErrorContext::kUpload);
    }
    Response res = Empty(202);
    SetUploadProgress(&res, route.name, uuid, 0);
    if (!patch_from.empty()) res.Set("Blz-Patch-From", patch_from);
    return res;
  }
  // Monolithic upload: the body is the whole blob (or, with blz-patch-from, the whole patch).
  if (!IsValidOciDigest(*digest)) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid digest '" + *digest + "'",
                         json{{"digest", *digest}});
  }
  std::string body_file = request.body_file;
  std::string own_temp;
  if (body_file.empty()) {  // body in memory (callers that skipped PlanBody)
    own_temp = blobs_->NewTempPath("body");
    Status s = WriteFileAtomic(own_temp, request.body);
    if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
    body_file = own_temp;
  }
  if (!patch_from.empty()) {
    bool discard = false;
    Response res = PublishPatched(route, patch_from, body_file, *digest, &discard);
    if (!own_temp.empty()) RemoveAll(own_temp);
    return res;
  }
  KeyedMutex::Lock blob_lock(&blob_locks_, *digest);  // publish to link: see garbage collection
  // Touched before the bytes are relied on: another replica's collector keeps them, or has
  // removed them already and Publish puts ours (registry/garbage_collector.h).
  if (Status t = db_->TouchBlob(*digest); !t.ok()) {
    if (!own_temp.empty()) RemoveAll(own_temp);
    return ErrorResponse(t, ErrorContext::kUpload);
  }
  Result<store::BlobInfo> info =
      own_temp.empty() ? PublishReceived(*blobs_, body_file, *digest, request.body_hash)
                       : blobs_->Publish(body_file, *digest);
  if (!own_temp.empty()) RemoveAll(own_temp);
  if (!info.ok()) {
    return ErrorResponse(OciErrorFor(info.status(), ErrorContext::kUpload),
                         info.status().message(), json{{"digest", *digest}});
  }
  Status s = db_->RecordBlob(info->digest, info->size);
  if (s.ok()) s = db_->LinkBlob(route.name, info->digest);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
  return BlobCreated(route.name, info->digest);
}

bool Registry::CheckChunk(const Route& route, const Request& request, uint64_t size,
                          uint64_t* chunk, Response* error) {
  *chunk = request.body.size();
  if (request.session_file != nullptr) {
    *chunk = request.session_length;
  } else if (!request.body_file.empty()) {
    Result<uint64_t> n = FileSizeOf(request.body_file);
    if (!n.ok()) {
      *error = ErrorResponse(n.status(), ErrorContext::kGeneral);
      return false;
    }
    *chunk = *n;
  }
  auto fail_range = [&](const std::string& msg) {
    *error = ErrorResponse(OciError::kRangeInvalid, msg);
    SetUploadProgress(error, route.name, route.ref, size);
    return false;
  };
  if (std::optional<std::string> cr = request.head.Get("Content-Range"); cr.has_value()) {
    std::optional<ByteRange> r = ParseChunkRange(*cr);
    if (!r.has_value()) return fail_range("malformed chunk Content-Range '" + *cr + "'");
    if (r->first != size) {
      return fail_range("chunk starts at byte " + std::to_string(r->first) +
                        " but the upload has " + std::to_string(size) + " bytes");
    }
    if (r->length() != *chunk) {
      return fail_range("chunk Content-Range '" + *cr + "' announces " +
                        std::to_string(r->length()) + " bytes but the body has " +
                        std::to_string(*chunk));
    }
  }
  uint64_t total = 0;
  if (!CheckedAdd(size, *chunk, &total) || total > options_.max_blob_bytes) {
    *error = ErrorResponse(OciError::kTooLarge, "upload would exceed the blob size limit of " +
                                                    std::to_string(options_.max_blob_bytes) +
                                                    " bytes");
    return false;
  }
  return true;
}

namespace {

// A part's name: its offset (zero-padded, so names sort like offsets) and random bytes, so two
// chunks sent at the same offset through two replicas never overwrite each other's part.
std::string PartName(uint64_t offset) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%020llu", static_cast<unsigned long long>(offset));
  return std::string(buf) + "-" + RandomHex(8);
}

}  // namespace

bool Registry::AppendChunk(const Route& route, const Request& request,
                           const store::UploadRecord& up, uint64_t* new_size, Response* error) {
  uint64_t chunk = 0;
  if (!CheckChunk(route, request, up.size, &chunk, error)) return false;
  *new_size = up.size + chunk;
  if (chunk == 0) return true;
  std::string part;
  if (request.session_file != nullptr) {
    // Written in place (BodyPlan::session_file) at the offset the row had when the body began.
    if (request.session_offset != up.size) {
      *error = ErrorResponse(OciError::kRangeInvalid,
                             "chunk was written at byte " + std::to_string(request.session_offset) +
                                 " but the upload has meanwhile received " +
                                 std::to_string(up.size) + " bytes");
      SetUploadProgress(error, route.name, route.ref, up.size);
      return false;
    }
    part = store::SessionFilePartName(up.size, *new_size);
  } else {
    std::string body_file = request.body_file;
    std::optional<ScopedRemoveAll> own_temp;
    if (body_file.empty()) {
      body_file = blobs_->NewTempPath("body");
      own_temp.emplace(body_file);
      Status s = WriteFileAtomic(body_file, request.body);
      if (!s.ok()) {
        *error = ErrorResponse(s, ErrorContext::kUpload);
        return false;
      }
    }
    // The bytes go to the shared store first, then the row moves the offset, conditionally: of
    // two chunks at one offset (through two replicas) exactly one is recorded; the other's part
    // is left for DeleteUploadParts (finish, cancel, purge) and its sender gets 416.
    part = PartName(up.size);
    if (Status s = blobs_->PutUploadPart(route.ref, part, body_file); !s.ok()) {
      *error = ErrorResponse(s, ErrorContext::kUpload);
      return false;
    }
  }
  Status s = db_->AdvanceUpload(route.ref, up.size, *new_size, part);
  if (s.code() == Code::kNotFound) {
    (void)blobs_->DeleteUploadParts(route.ref);  // finished, cancelled or purged meanwhile
    *error = UnknownUpload(route.ref);
    return false;
  }
  if (s.code() == Code::kInvalidArgument) {
    Result<store::UploadRecord> now = db_->GetUpload(route.ref);
    *error = ErrorResponse(OciError::kRangeInvalid,
                           "chunk starts at byte " + std::to_string(up.size) +
                               " but the upload has meanwhile received more: " + s.message());
    SetUploadProgress(error, route.name, route.ref, now.ok() ? now->size : up.size);
    return false;
  }
  if (!s.ok()) {
    *error = ErrorResponse(s, ErrorContext::kUpload);
    return false;
  }
  // The hash went through exactly this body, continuing the state of the parts before it.
  if (request.body_hash != nullptr &&
      (!request.body_file.empty() || request.session_file != nullptr) &&
      request.body_hash->bytes == *new_size) {
    KeepUploadHash(route.ref, part, request.body_hash);
  }
  return true;
}

Response Registry::PatchUpload(const Route& route, const Request& request) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  Result<store::UploadRecord> up = db_->GetUpload(route.ref);
  if (!up.ok() || up->repository != route.name) return UnknownUpload(route.ref);
  uint64_t size = 0;
  Response error;
  if (!AppendChunk(route, request, *up, &size, &error)) return error;
  Response res = Empty(202);
  SetUploadProgress(&res, route.name, route.ref, size);
  return res;
}

Response Registry::UploadStatus(const Route& route) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  Result<store::UploadRecord> up = db_->GetUpload(route.ref);
  if (!up.ok() || up->repository != route.name) return UnknownUpload(route.ref);
  Response res = Empty(204);
  SetUploadProgress(&res, route.name, route.ref, up->size);
  if (!up->patch_from.empty()) res.Set("Blz-Patch-From", up->patch_from);
  return res;
}

Response Registry::FinishUpload(const Route& route, const Request& request) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  Result<store::UploadRecord> up = db_->GetUpload(route.ref);
  if (!up.ok() || up->repository != route.name) return UnknownUpload(route.ref);
  std::optional<std::string> digest = route.Query("digest");
  if (!digest.has_value() || !IsValidOciDigest(*digest)) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "closing PUT needs ?digest=sha256:<64 hex> or sha512:<128 hex>",
                         json{{"digest", digest.value_or("")}});
  }
  uint64_t chunk = 0;
  Response error;
  if (!CheckChunk(route, request, up->size, &chunk, &error)) return error;
  // The blob is assembled here: the stored parts in order, then this request's body (never
  // stored as a part). With no parts the body itself is published (a single PUT: no copy);
  // a session whose bytes are all in its session file, this body included, links that file
  // (no copy either: issue 28).
  auto assembly_failed = [&](const Status& s) {
    if (s.code() == Code::kNotFound) {
      return ErrorResponse(OciError::kBlobUploadUnknown,
                           "upload session '" + route.ref + "' lost its data: " + s.message());
    }
    return ErrorResponse(s, ErrorContext::kUpload);
  };
  std::string assembled;
  std::optional<ScopedRemoveAll> own_temp;
  if (request.session_file != nullptr) {
    if (request.session_offset != up->size) {
      Response res = ErrorResponse(OciError::kRangeInvalid,
                                   "closing chunk was written at byte " +
                                       std::to_string(request.session_offset) +
                                       " but the upload has meanwhile received " +
                                       std::to_string(up->size) + " bytes");
      SetUploadProgress(&res, route.name, route.ref, up->size);
      return res;
    }
    std::vector<std::string> names = up->parts;
    if (chunk > 0) names.push_back(store::SessionFilePartName(up->size, up->size + chunk));
    assembled = blobs_->NewTempPath("session");
    own_temp.emplace(assembled);
    Status s = blobs_->ConcatUploadParts(route.ref, names, assembled, request.session_file.get());
    if (!s.ok()) return assembly_failed(s);
  } else if (up->parts.empty() && !request.body_file.empty()) {
    assembled = request.body_file;
  } else {
    assembled = blobs_->NewTempPath("session");
    own_temp.emplace(assembled);
    Status s = up->parts.empty()
                   ? WriteFileAtomic(assembled, request.body)
                   : blobs_->ConcatUploadParts(route.ref, up->parts, assembled, nullptr);
    if (s.ok() && !up->parts.empty() && chunk > 0) {
      if (!request.body_file.empty()) {
        s = store::AppendFileTo(request.body_file, assembled);
      } else {
        const std::string body = blobs_->NewTempPath("body");
        s = WriteFileAtomic(body, request.body);
        if (s.ok()) s = store::AppendFileTo(body, assembled);
        RemoveAll(body);
      }
    }
    if (!s.ok()) return assembly_failed(s);
  }
  if (!up->patch_from.empty()) {
    // The session's bytes are a patch: applied, checked and published (or refused) there.
    bool discard = false;
    Response res = PublishPatched(route, up->patch_from, assembled, *digest, &discard);
    if (res.status == 201 || discard) {
      (void)db_->DeleteUpload(route.ref);
      (void)blobs_->DeleteUploadParts(route.ref);  // best effort: purges find leftovers
    }
    return res;
  }
  KeyedMutex::Lock blob_lock(&blob_locks_, *digest);  // publish to link: see garbage collection
  // Touched first, as in the monolithic upload above.
  if (Status t = db_->TouchBlob(*digest); !t.ok()) {
    return ErrorResponse(t, ErrorContext::kUpload);
  }
  // Hashed as the chunks arrived (through this replica, in order) and the body of this PUT:
  // no second read. Otherwise (another replica took chunks, a restart, a body in memory)
  // Publish hashes the assembled file.
  std::shared_ptr<BodyHash> hash = request.body_hash;
  if (hash != nullptr &&
      ((request.body_file.empty() && request.session_file == nullptr) ||
       hash->bytes != up->size + chunk)) {
    hash = nullptr;
  }
  Result<store::BlobInfo> info = PublishReceived(*blobs_, assembled, *digest, hash);
  DropUploadHash(route.ref);
  if (!info.ok()) {
    if (info.status().code() == Code::kDigestMismatch) {
      // The session's bytes are not the blob the client meant: discard the session.
      (void)db_->DeleteUpload(route.ref);
      (void)blobs_->DeleteUploadParts(route.ref);
    }
    return ErrorResponse(OciErrorFor(info.status(), ErrorContext::kUpload),
                         info.status().message(), json{{"digest", *digest}});
  }
  // Published from the session file (a link), or from a copy of it that replaced a blob
  // published from it before: the file's name in the session goes first, so that no later
  // writer is ever handed a file that is, or was, the blob (a process killed before the row is
  // deleted leaves a session whose data is gone: its retry gets 404 and uploads again).
  uint64_t first_start = 0, first_end = 0;
  const bool parts_first =
      request.session_file != nullptr ||
      (!up->parts.empty() &&
       store::ParseSessionFilePart(up->parts.front(), &first_start, &first_end));
  if (parts_first) (void)blobs_->DeleteUploadParts(route.ref);
  Status s = db_->DeleteUpload(route.ref);
  // Best effort: purges find leftovers.
  if (s.ok() && !parts_first) (void)blobs_->DeleteUploadParts(route.ref);
  if (s.ok()) s = db_->RecordBlob(info->digest, info->size);
  if (s.ok()) s = db_->LinkBlob(route.name, info->digest);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
  return BlobCreated(route.name, info->digest);
}

Response Registry::CancelUpload(const Route& route) {
  if (!IsUuid(route.ref)) return UnknownUpload(route.ref);
  KeyedMutex::Lock lock(&upload_locks_, route.ref);
  if (!UploadSessionBelongs(route)) return UnknownUpload(route.ref);
  DropUploadHash(route.ref);
  Status s = db_->DeleteUpload(route.ref);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
  (void)blobs_->DeleteUploadParts(route.ref);  // best effort: purges find leftovers
  RemoveAll(SessionPath(route.ref));           // a session file of an older version
  return Empty(204);
}

}  // namespace blz::registry
