#include "registry/garbage_collector.h"

#include <algorithm>
#include <ctime>
#include <unordered_set>

#include "core/file_util.h"

namespace blz::registry {

Result<GcReport> CollectGarbage(const store::BlobStore& blobs, store::MetadataDb* db,
                                KeyedMutex* blob_locks, const GcOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // The cutoff is taken before the snapshot: a blob written or linked after it is young.
  const auto cutoff = std::chrono::system_clock::now() - options.grace;
  const int64_t young_after = int64_t(std::chrono::system_clock::to_time_t(cutoff));
  BLZ_ASSIGN_OR_RETURN(store::GcRoots roots, db->ReadGcRoots(young_after));
  GcReport report;
  report.dry_run = options.dry_run;

  std::unordered_set<std::string> marked(roots.referenced.begin(), roots.referenced.end());
  const std::unordered_set<std::string> alive = marked;
  auto keep_derived = [&](const char* kind, const std::vector<store::GcRoots::Derived>& rows) {
    for (const store::GcRoots::Derived& row : rows) {
      if (alive.count(row.to_digest) > 0 &&
          (row.from_digest.empty() || alive.count(row.from_digest) > 0)) {
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
  keep_derived("version_stats", roots.version_stats);
  keep_derived("lossy_deltas", roots.lossy_deltas);

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
      if (!info.ok()) continue;  // removed meanwhile
      if (info->modified >= cutoff) {
        ++report.blobs_too_young;
        continue;
      }
      ++report.blobs_removed;
      report.bytes_freed += info->size;
      report.removed.push_back(digest);
      continue;
    }
    // Whoever makes a blob referenced (a manifest PUT, an upload, a mount) holds its lock from
    // its check to its commit: under the lock, the answer below cannot change.
    KeyedMutex::Lock lock(blob_locks, digest);
    Result<bool> referenced = db->BlobReferenced(digest, young_after);
    if (!referenced.ok()) {
      report.errors.push_back(referenced.status().ToString());
      continue;
    }
    if (*referenced) {
      ++report.blobs_marked;
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
