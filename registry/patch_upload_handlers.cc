// Patch uploads (issue 27, docs/registry-api.md "Patch uploads"): a blz extension of the OCI
// upload API. POST /v2/<name>/blobs/uploads/?blz-patch-from=<base archive digest> opens a
// session (or, with ?digest=, takes the whole patch at once) whose bytes are a patch
// (patcher/patch.h) from that base to the blob named by the closing ?digest=. The registry
// applies it to its own copy of the base and publishes the result only when it is exactly that
// digest. The session itself is an ordinary one (chunks, offsets, replicas: upload_handlers.cc);
// its base is recorded in its row (migrations/0011_upload_patch_from.sql).
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "store/blob_store.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;

// `message` with server-side paths replaced by what they hold.
std::string ScrubPaths(std::string message,
                       const std::vector<std::pair<std::string, std::string>>& names) {
  for (const auto& [path, name] : names) {
    if (path.empty()) continue;
    for (size_t pos = message.find(path); pos != std::string::npos;
         pos = message.find(path, pos + name.size())) {
      message.replace(pos, path.size(), name);
    }
  }
  return message;
}

}  // namespace

std::optional<Response> Registry::CheckPatchBase(const Route& route, const std::string& base) {
  if (!options_.apply_patch) {
    return ErrorResponse(OciError::kUnsupported,
                         "this registry does not take patch uploads (blz-patch-from)",
                         json{{"blz_patch_from", base}});
  }
  if (!ParseDigest(base).ok()) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "blz-patch-from needs an archive digest (sha256:<64 lower-case hex>), "
                         "not '" + base + "'",
                         json{{"blz_patch_from", base}});
  }
  // A version of a repository the caller may read; one it may not read answers exactly as an
  // unknown digest does (ReadableVersionOf decides without per-repository lookups).
  Result<store::VersionRecord> v = ReadableVersionOf(route, base);
  if (!v.ok()) {
    if (v.status().code() != Code::kNotFound) {
      return ErrorResponse(v.status(), ErrorContext::kUpload);
    }
    return ErrorResponse(OciError::kBlobUnknown,
                         "base archive " + base +
                             " is not a model version this registry holds that you may read; "
                             "upload the blob itself",
                         json{{"blz_patch_from", base}, {"blz_reason", "unknown base"}});
  }
  return std::nullopt;
}

Response Registry::PublishPatched(const Route& route, const std::string& base,
                                  const std::string& patch_file, const std::string& digest,
                                  bool* discard) {
  *discard = false;
  const json detail = {{"digest", digest}, {"blz_patch_from", base}};
  if (!ParseDigest(digest).ok()) {
    *discard = true;
    return ErrorResponse(OciError::kDigestInvalid,
                         "a patch upload rebuilds a model archive: ?digest= must be "
                         "sha256:<64 lower-case hex>, not '" + digest + "'",
                         detail);
  }
  // Checked again: the base may have been deleted, or the caller's access revoked, since the
  // session was opened.
  if (std::optional<Response> refused = CheckPatchBase(route, base)) {
    *discard = refused->status >= 400 && refused->status < 500;
    return std::move(*refused);
  }
  std::string base_path;
  Response error;
  if (!ArchiveFile(base, &base_path, &error)) return error;  // rebuilt if stored as a full patch
  const std::string out = blobs_->NewTempPath("patched");
  ScopedRemoveAll out_guard(out);  // removed on every path (gone after a successful Publish)
  Status s = options_.apply_patch(base_path, base, patch_file, digest, options_.max_blob_bytes,
                                  out);
  if (!s.ok()) {
    const std::string message = ScrubPaths(
        s.message(), {{patch_file, "the uploaded patch"}, {base_path, "base archive " + base},
                      {out, "the rebuilt archive"}});
    switch (s.code()) {
      case Code::kDigestMismatch:
        *discard = true;
        return ErrorResponse(OciError::kDigestInvalid,
                             "the patch does not produce " + digest + ": " + message, detail);
      case Code::kCorruption:
      case Code::kUnsupported:
      case Code::kInvalidArgument:
      case Code::kNotFound:  // a truncated patch reads as "missing" pieces
        *discard = true;
        return ErrorResponse(OciError::kBlobUploadInvalid,
                             "the uploaded patch cannot be applied to base " + base + ": " +
                                 message,
                             detail);
      case Code::kTooLarge:
        *discard = true;
        return ErrorResponse(OciError::kTooLarge, message, detail);
      default:
        return ErrorResponse(Status(s.code(), message), ErrorContext::kUpload);
    }
  }
  uint64_t target_size = 0;
  {
    KeyedMutex::Lock blob_lock(&blob_locks_, digest);  // publish to link: see garbage collection
    // Touched before the bytes are relied on, as in any upload (registry/garbage_collector.h).
    if (Status t = db_->TouchBlob(digest); !t.ok()) return ErrorResponse(t, ErrorContext::kUpload);
    Result<store::BlobInfo> info = blobs_->Publish(out, digest);  // re-hashes what it stores
    if (!info.ok()) {
      *discard = info.status().code() == Code::kDigestMismatch;
      return ErrorResponse(OciErrorFor(info.status(), ErrorContext::kUpload),
                           ScrubPaths(info.status().message(), {{out, "the rebuilt archive"}}),
                           detail);
    }
    Status r = db_->RecordBlob(info->digest, info->size);
    if (r.ok()) r = db_->LinkBlob(route.name, info->digest);
    if (!r.ok()) return ErrorResponse(r, ErrorContext::kUpload);
    target_size = info->size;
  }
  KeepPushedPatch(route.name, base, digest, patch_file, target_size);
  Response res = internal::Empty(201);
  res.Set("Location", "/v2/" + route.name + "/blobs/" + digest);
  res.Set("Docker-Content-Digest", digest);
  res.Set("Blz-Patch-From", base);
  return res;
}

void Registry::KeepPushedPatch(const std::string& repository, const std::string& base,
                               const std::string& digest, const std::string& patch_file,
                               uint64_t target_size) {
  auto log = [&](const std::string& line) {
    if (options_.storage.log) options_.storage.log(line);
  };
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(patch_file, ec);
  if (ec || size >= target_size) return;  // a patch no smaller than the archive is no saving
  Result<std::string> hex = Sha256FileHex(patch_file);
  if (!hex.ok()) {
    log("push: the patch " + base + " -> " + digest + " is not kept: " + hex.status().ToString());
    return;
  }
  const std::string patch_digest = MakeDigest(*hex);
  KeyedMutex::Lock lock(&blob_locks_, patch_digest);  // publish to record: see GC
  Status s = db_->TouchBlob(patch_digest);
  // Hashed just above, `size` bytes: Publish would read it all again.
  Result<store::BlobInfo> blob =
      s.ok() ? blobs_->PublishHashed(patch_file, patch_digest, patch_digest, size)
             : Result<store::BlobInfo>(s);
  if (blob.ok()) s = db_->RecordBlob(blob->digest, blob->size);
  if (blob.ok() && s.ok()) {
    s = db_->RecordPatch(repository,
                         store::PatchRecord{base, digest, blob->digest, blob->size});
  }
  if (!blob.ok() || !s.ok()) {
    log("push: the patch " + base + " -> " + digest + " is not kept: " +
        (blob.ok() ? s : blob.status()).ToString());
  }
}

}  // namespace blz::registry
