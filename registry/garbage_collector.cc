#include "registry/garbage_collector.h"

#include <algorithm>
#include <unordered_set>

#include "core/file_util.h"
#include "registry/oci_manifest.h"

namespace blz::registry {

Result<GcReport> CollectGarbage(const store::BlobStore& blobs, store::MetadataDb* db,
                                const GcOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // The cutoff is taken before the snapshot: a blob written after it is young.
  const auto cutoff = std::chrono::system_clock::now() - options.grace;
  BLZ_ASSIGN_OR_RETURN(store::GcRoots roots, db->ReadGcRoots());
  GcReport report;
  report.dry_run = options.dry_run;

  std::unordered_set<std::string> marked(roots.linked.begin(), roots.linked.end());
  marked.insert(roots.archives.begin(), roots.archives.end());
  for (const store::GcRoots::Manifest& m : roots.manifests) {
    // Stored manifests passed ParseOciManifest when they were pushed.
    Result<OciManifest> parsed = ParseOciManifest(m.content, m.media_type);
    if (!parsed.ok()) continue;
    if (parsed->config.has_value()) marked.insert(parsed->config->digest);
    for (const OciDescriptor& layer : parsed->layers) marked.insert(layer.digest);
  }
  const std::unordered_set<std::string> archives_alive = marked;
  auto keep_derived = [&](const char* kind, const std::vector<store::GcRoots::Derived>& rows) {
    for (const store::GcRoots::Derived& row : rows) {
      const bool alive = archives_alive.count(row.to_digest) > 0 &&
                         (row.from_digest.empty() || archives_alive.count(row.from_digest) > 0);
      if (alive) {
        marked.insert(row.blob_digest);
        continue;
      }
      ++report.derived_forgotten;
      if (options.dry_run) continue;
      if (Status s = db->ForgetDerived(kind, row); !s.ok()) {
        report.errors.push_back(s.ToString());
        marked.insert(row.blob_digest);  // still listed: keep its blob
      }
    }
  };
  keep_derived("patches", roots.patches);
  keep_derived("value_diffs", roots.value_diffs);

  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> stored, blobs.ListDigests());
  std::sort(stored.begin(), stored.end());
  report.blobs_total = stored.size();
  for (const std::string& digest : stored) {
    if (marked.count(digest) > 0) {
      ++report.blobs_marked;
      continue;
    }
    if (options.dry_run) {
      Result<store::BlobInfo> info = blobs.Stat(digest);
      Result<std::chrono::system_clock::time_point> mtime =
          info.ok() ? FileModifiedTime(info->path) : Result<std::chrono::system_clock::time_point>(info.status());
      if (!mtime.ok()) continue;  // removed meanwhile
      if (*mtime >= cutoff) {
        ++report.blobs_too_young;
        continue;
      }
      ++report.blobs_removed;
      report.bytes_freed += info->size;
      report.removed.push_back(digest);
      continue;
    }
    Result<uint64_t> freed = blobs.RemoveIfOlder(digest, cutoff);
    if (!freed.ok()) {
      if (freed.status().code() == Code::kUnavailable) {
        ++report.blobs_too_young;
      } else {
        report.errors.push_back(freed.status().ToString());
      }
      continue;
    }
    ++report.blobs_removed;
    report.bytes_freed += *freed;
    report.removed.push_back(digest);
    if (Status s = db->ForgetBlob(digest); !s.ok()) report.errors.push_back(s.ToString());
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace blz::registry
