// Blob uploads: POST /v2/<name>/blobs/uploads/ (sessions and monolithic uploads) and
// GET, PATCH, PUT, DELETE /v2/<name>/blobs/uploads/<uuid> (docs/registry-api.md).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {

namespace {

using json = nlohmann::json;
using internal::Empty;
using internal::FileSizeOf;
using internal::IsUuid;
using internal::UploadRange;

// A random version-4-style UUID: 8-4-4-4-12 lower-case hex digits.
std::string NewUuid() {
  std::string hex = RandomHex(16);
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
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

}  // namespace

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
  if (!digest.has_value()) {
    if (route.Query("mount").has_value()) {
      if (std::optional<Response> mounted = TryMount(route)) return std::move(*mounted);
    }
    // Open a session (also when a ?mount= cannot be served: the spec's fallback).
    if (int64_t now = int64_t(std::time(nullptr)); now - last_upload_purge_.load() >= 3600) {
      (void)PurgeStaleUploads(/*orphans=*/false);  // best effort: a failure must not block uploads
    }
    const std::string uuid = NewUuid();
    auto create = [&] {
      return db_->CreateUpload(uuid, route.name, route.client, options_.max_uploads_per_token,
                               options_.max_uploads_per_repository);
    };
    Status s = WriteFileAtomic(SessionPath(uuid), "");
    if (s.ok()) s = create();
    if (s.code() == Code::kTooLarge &&
        int64_t(std::time(nullptr)) - last_upload_purge_.load() >= 60) {
      // At a cap: first drop the idle sessions (at most once a minute), then try again.
      (void)PurgeStaleUploads(/*orphans=*/false);
      s = create();
    }
    if (!s.ok()) {
      RemoveAll(SessionPath(uuid));
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
    return res;
  }
  // Monolithic upload: the body is the whole blob.
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
  KeyedMutex::Lock blob_lock(&blob_locks_, *digest);  // publish to link: see garbage collection
  // Touched before the bytes are relied on: another replica's collector keeps them, or has
  // removed them already and Publish puts ours (registry/garbage_collector.h).
  if (Status t = db_->TouchBlob(*digest); !t.ok()) {
    if (!own_temp.empty()) RemoveAll(own_temp);
    return ErrorResponse(t, ErrorContext::kUpload);
  }
  Result<store::BlobInfo> info = blobs_->Publish(body_file, *digest);
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
      own_temp = blobs_->NewTempPath("body");
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
  if (!digest.has_value() || !IsValidOciDigest(*digest)) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "closing PUT needs ?digest=sha256:<64 hex> or sha512:<128 hex>",
                         json{{"digest", digest.value_or("")}});
  }
  uint64_t size = 0;
  Response error;
  if (!AppendChunk(route, request, &size, &error)) return error;
  const std::string session = SessionPath(route.ref);
  KeyedMutex::Lock blob_lock(&blob_locks_, *digest);  // publish to link: see garbage collection
  // Touched first, as in the monolithic upload above.
  if (Status t = db_->TouchBlob(*digest); !t.ok()) {
    return ErrorResponse(t, ErrorContext::kUpload);
  }
  Result<store::BlobInfo> info = blobs_->Publish(session, *digest);
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
  if (s.ok()) s = db_->LinkBlob(route.name, info->digest);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kUpload);
  return BlobCreated(route.name, info->digest);
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

}  // namespace blz::registry
