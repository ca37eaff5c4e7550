// The blz extensions (docs/registry-api.md): patches and full patches (GET /v2/<name>/blz/patch),
// value diffs (GET /v2/<name>/blz/diff) and structure listings (GET /v2/_blz/structures/<hash>),
// with the cache of computed blobs they share. The storage status: registry/storage_handlers.cc.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "formats/value_diff_json.h"
#include "registry/auth.h"
#include "registry/background_jobs.h"
#include "registry/errors.h"
#include "registry/rate_limiter.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {

namespace {
using json = nlohmann::json;
using internal::ParsePagination;
using internal::ReplaceAll;
using internal::ServeFile;
}  // namespace

Response Registry::GetPatch(const Route& route, const RequestHead& head) {
  std::optional<std::string> from = route.Query("from");
  std::optional<std::string> to = route.Query("to");
  if (!from.has_value() && to.has_value() && ParseDigest(*to).ok()) {
    return GetFullPatch(route, head, *to);
  }
  std::string paths[2];
  // A cached patch (a chain link among them) is served without rebuilding either archive;
  // one to compute reads them as stored when it can (CachedPatch).
  const bool cached = from.has_value() && to.has_value() && db_->FindPatch(*from, *to).ok();
  const bool lazy = cached || static_cast<bool>(options_.create_patch_from_readers);
  if (Response error; !ResolveFromTo(route, head, from, to,
                                     "patch needs ?to=<archive digest> and, for a patch from a "
                                     "base, ?from=<archive digest>",
                                     paths, &error, lazy)) {
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

  if (std::optional<Response> throttled =
          ThrottleComputation(route, db_->FindPatch(*from, *to).ok())) {
    return std::move(*throttled);
  }
  bool compute_failed = false;
  Result<CachedBlob> computed = CachedPatch(route, *from, *to, paths, &compute_failed);
  if (!computed.ok()) return CachedPatchError(computed.status(), compute_failed);
  return serve(computed->blob, computed->hit);
}

std::optional<Response> Registry::ThrottleComputation(const Route& route, bool cached) {
  if (cached || route.caller.grants.IsAdmin()) return std::nullopt;
  const uint64_t wait = computations_->Take(route.client, std::chrono::steady_clock::now());
  if (wait == 0) return std::nullopt;
  char per_minute[32];
  std::snprintf(per_minute, sizeof(per_minute), "%g", options_.computations_per_minute);
  Response res = ErrorResponse(
      OciError::kTooManyRequests,
      "too many new computations (patches, diffs, statistics, lossy deltas not cached yet) "
      "from this client: at most " + std::to_string(options_.computation_burst) +
          " at once and " + per_minute +
          " per minute; retry in " + std::to_string(wait) + " s",
      json{{"retry_after", wait}});
  res.Set("Retry-After", std::to_string(wait));
  return res;
}

Response Registry::CachedPatchError(const Status& status, bool compute_failed) const {
  if (!compute_failed) return ErrorResponse(status, ErrorContext::kPatch);
  if (!options_.create_patch) return ErrorResponse(OciError::kUnsupported, status.message());
  return ErrorResponse(OciError::kUnknown, "computing the patch failed: " + status.ToString());
}

Result<Registry::CachedBlob> Registry::CachedPatch(const Route& route, const std::string& from,
                                                   const std::string& to,
                                                   const std::string paths[2],
                                                   bool* compute_failed) {
  auto compute = [&]() {
    return ComputeCached(
        &patch_locks_, from + ">" + to, "patch",
        [&]() -> Result<std::string> {
          BLZ_ASSIGN_OR_RETURN(store::PatchRecord cached, db_->FindPatch(from, to));
          return cached.patch_digest;
        },
        [&](const std::string& out) -> Status {
          if (!options_.create_patch) return Unsupported("this server cannot compute patches");
          std::string files[2] = {paths[0], paths[1]};
          if (files[0].empty() && files[1].empty() && options_.create_patch_from_readers) {
            // Read as stored: an archive kept only as a full patch or a chain link is decoded
            // chunk by chunk as the diff reaches it, never rebuilt into the cache.
            Status in_place = PatchInPlace(from, to, out);
            if (in_place.code() != Code::kUnsupported) return in_place;
          }
          for (int i = 0; i < 2; ++i) {  // resolved lazily (GetPatch): rebuilt only now
            if (!files[i].empty()) continue;
            BLZ_ASSIGN_OR_RETURN(store::BlobInfo blob, storage_->File(i == 0 ? from : to));
            files[i] = blob.path;
          }
          return options_.create_patch(files[0], from, files[1], to, out);
        },
        [&](const store::BlobInfo& blob) {
          return db_->RecordPatch(route.name, store::PatchRecord{from, to, blob.digest, blob.size});
        },
        compute_failed);
  };
  Result<CachedBlob> computed = RecomputeIfDamaged(compute);
  if (computed.ok()) {
    if (!computed->hit) patches_computed_.fetch_add(1);
    metrics_.RecordComputed(Metrics::Computed::kPatch, computed->hit);
  }
  return computed;
}

Status Registry::PatchInPlace(const std::string& from, const std::string& to,
                              const std::string& out) {
  const std::string* digests[2] = {&from, &to};
  // kUnsupported: this server stores no patches (the caller rebuilds files instead). Siblings
  // share their parent's reader and its decoded chunks (ArchiveStorage::OpenReaders).
  BLZ_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const patcher::ArchiveReader>> readers,
                       storage_->OpenReaders({from, to}));
  Status s = options_.create_patch_from_readers(readers[0], readers[1], out);
  for (const std::string* d : digests) s = storage_->NameForms(s, *d);  // no server paths
  if (s.code() == Code::kCorruption) {
    // A damaged stored patch is quarantined, as a rebuild would (the next request is answered
    // from what remains, or 404).
    for (const std::string* d : digests) {
      if (Status q = storage_->QuarantineDamagedForms(*d); !q.ok()) return q;
    }
  }
  return s;
}

// ---- blz structures and value diffs (docs/registry-api.md) ----

bool Registry::ResolveFromTo(const Route& route, const RequestHead& /*head*/,
                             const std::optional<std::string>& from,
                             const std::optional<std::string>& to, std::string_view usage,
                             std::string paths[2], Response* error, bool lazy) {
  for (const auto* d : {&from, &to}) {
    if (!d->has_value() || !ParseDigest(**d).ok()) {
      *error = ErrorResponse(OciError::kDigestInvalid,
                             std::string(usage) + " (sha256:<64 lower-case hex>)",
                             json{{"from", from.value_or("")}, {"to", to.value_or("")}});
      return false;
    }
  }
  Result<store::VersionRecord> base = ReadableVersionOf(route, *from);
  if (!base.ok()) {
    *error = ErrorResponse(OciErrorFor(base.status(), ErrorContext::kPatch),
                           base.status().message(), json{{"digest", *from}});
    return false;
  }
  return ArchiveFile(*from, &paths[0], error, lazy) &&
         ResolveVersionArchive(route, *to, &paths[1], error, lazy);
}

Result<store::VersionRecord> Registry::ReadableVersionOf(const Route& route,
                                                         const std::string& archive_digest) {
  Result<store::VersionRecord> here = db_->FindVersion(route.name, archive_digest);
  if (here.ok() || here.status().code() != Code::kNotFound) return here;
  BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> elsewhere,
                       db_->ListVersionsOfArchive(archive_digest));
  // Decided from the caller Prepare authenticated, with no per-repository lookups: a version
  // held only by repositories the caller may not read costs what an unknown digest costs (the
  // answers are the same, and so must their timing be: docs/benchmarks.md).
  std::optional<size_t> readable;
  for (size_t i = 0; i < elsewhere.size(); ++i) {
    const bool pull =
        (HeldActions(route.caller, elsewhere[i].repository, options_.private_mode) &
         kActionPull) != 0;
    if (pull && !readable.has_value()) readable = i;
  }
  if (readable.has_value()) return std::move(elsewhere[*readable]);
  return here.status();
}

bool Registry::ResolveVersionArchive(const Route& route, const std::string& digest,
                                     std::string* path, Response* error, bool lazy) {
  Result<store::VersionRecord> v = db_->FindVersion(route.name, digest);
  if (!v.ok()) {
    *error = ErrorResponse(OciErrorFor(v.status(), ErrorContext::kPatch), v.status().message(),
                           json{{"digest", digest}});
    return false;
  }
  return ArchiveFile(digest, path, error, lazy);
}

bool Registry::ArchiveFile(const std::string& digest, std::string* path, Response* error,
                           bool lazy) {
  // Rebuilt if stored as a full patch or a chain; `lazy`: only checked to be stored.
  Result<store::BlobInfo> blob = lazy ? storage_->Stat(digest) : storage_->File(digest);
  if (!blob.ok()) {
    *error = ErrorResponse(OciErrorFor(blob.status(), ErrorContext::kBlob),
                           blob.status().message(), json{{"digest", digest}});
    return false;
  }
  *path = lazy ? std::string() : blob->path;
  return true;
}

Result<Registry::CachedBlob> Registry::RecomputeIfDamaged(
    const std::function<Result<CachedBlob>()>& compute) {
  Result<CachedBlob> computed = compute();
  if (computed.ok() && computed->hit &&
      storage_->CheckStoredBlob(computed->blob).code() == Code::kCorruption) {
    computed = compute();
  }
  return computed;
}

Result<Registry::CachedBlob> Registry::ComputeCached(
    KeyedMutex* locks, const std::string& key, std::string_view temp_name,
    const std::function<Result<std::string>()>& find,
    const std::function<Status(const std::string&)>& compute,
    const std::function<Status(const store::BlobInfo&)>& record, bool* compute_failed) {
  *compute_failed = false;
  KeyedMutex::Lock lock(locks, key);  // one thread of this process asks the DB
  std::optional<CachedBlob> result;
  auto check = [&]() -> Result<bool> {
    Result<std::string> cached = find();
    if (cached.ok()) {
      Result<store::BlobInfo> blob = blobs_->LocalFile(*cached);
      if (blob.ok()) {
        result = CachedBlob{std::move(*blob), /*hit=*/true};
        return true;
      }
      return false;  // the blob went missing: compute it again
    }
    if (cached.status().code() != Code::kNotFound) return cached.status();
    return false;
  };
  auto work = [&]() -> Status {
    const std::string temp = blobs_->NewTempPath(temp_name);
    Status s = compute(temp);
    if (!s.ok()) {
      RemoveAll(temp);
      *compute_failed = true;
      return s;
    }
    Result<store::BlobInfo> blob = blobs_->PublishComputed(temp);
    RemoveAll(temp);  // gone after a successful publish; removes leftovers otherwise
    if (!blob.ok()) return blob.status();
    BLZ_RETURN_IF_ERROR(db_->RecordBlob(blob->digest, blob->size));
    BLZ_RETURN_IF_ERROR(record(*blob));
    result = CachedBlob{std::move(*blob), /*hit=*/false};
    return Status::Ok();
  };
  // Across replicas: one computes, the others wait for its lease and then find the result.
  bool ran = false;
  BLZ_RETURN_IF_ERROR(shared_jobs_->Run(std::string(temp_name) + ":" + key, check, work, &ran));
  if (!result.has_value()) return Internal("job '" + key + "' finished without a result");
  return std::move(*result);
}

Response Registry::GetValueDiff(const Route& route, const RequestHead& head) {
  std::optional<std::string> from = route.Query("from");
  std::optional<std::string> to = route.Query("to");
  std::string paths[2];
  if (Response error; !ResolveFromTo(route, head, from, to,
                                     "value diff needs ?from=<archive digest>&to=<archive digest>",
                                     paths, &error)) {
    return error;
  }
  if (std::optional<Response> throttled =
          ThrottleComputation(route, db_->FindValueDiff(*from, *to).ok())) {
    return std::move(*throttled);
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
        options.counters = CurrentJobCounters();  // ?async=1: the poll shows progress
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
  metrics_.RecordComputed(Metrics::Computed::kValueDiff, computed->hit);
  return ServeComputedJson(*computed, head, "Blz-Diff-Cache");
}

Response Registry::ServeComputedJson(const CachedBlob& computed, const RequestHead& head,
                                     const char* cache_header) {
  Response res = ServeFile(computed.blob.path, computed.blob.size, head, "application/json");
  if (res.status < 300) {
    res.Set("Docker-Content-Digest", computed.blob.digest);
    res.Set(cache_header, computed.hit ? "hit" : "miss");
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
  // Only versions of repositories the caller may pull: read the rest of the listing, keep
  // those, then cut the page (a token of org-a/* sees no tag or digest of org-b).
  Result<store::StructurePage> page =
      db_->ListStructureVersions(structure, std::nullopt, after);
  if (!page.ok()) return ErrorResponse(page.status(), ErrorContext::kGeneral);
  std::erase_if(page->items, [&](const store::StructureVersion& v) {
    return !internal::MayPull(route, v.repository, options_.private_mode);
  });
  page->more = limit.has_value() && page->items.size() > *limit;
  if (page->more) page->items.resize(size_t(*limit));
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
  metrics_.RecordComputed(Metrics::Computed::kFullPatch, full->hit);
  Response res = ServeFile(full->blob.path, full->blob.size, head, kBlzPatchMediaType);
  if (res.status < 300) {
    res.Set("Docker-Content-Digest", full->blob.digest);
    res.Set("Blz-Patch-Cache", full->hit ? "hit" : "miss");
  }
  return res;
}

}  // namespace blz::registry
