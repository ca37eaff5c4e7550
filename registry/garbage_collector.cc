#include "registry/garbage_collector.h"

#include <algorithm>
#include <ctime>
#include <unordered_map>
#include <unordered_set>

#include "core/failpoint.h"
#include "core/file_util.h"

namespace blz::registry {

Result<GcReport> CollectGarbage(const store::BlobStore& blobs, store::MetadataDb* db,
                                KeyedMutex* blob_locks, const GcOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // The cutoff is taken before the snapshot: a blob written or linked after it is young.
  const auto cutoff = std::chrono::system_clock::now() - options.grace;
  const int64_t young_after = int64_t(std::chrono::system_clock::to_time_t(cutoff));
  // Pushes that touch a blob from now on keep it (DeleteBlobUnlessTouched); a dry run deletes
  // nothing, so it does not start an epoch.
  int64_t mark = 0;
  if (!options.dry_run) {
    BLZ_ASSIGN_OR_RETURN(mark, db->StartGcMark());
  }
  BLZ_ASSIGN_OR_RETURN(store::GcRoots roots, db->ReadGcRoots(young_after));
  GcReport report;
  report.dry_run = options.dry_run;
  // Deletions a previous collector recorded and did not finish (it died after removing the
  // bytes, or removing them failed): forgotten when the bytes are gone; otherwise the sweep
  // below retries them (or finds them referenced again).
  if (!options.dry_run) {
    BLZ_ASSIGN_OR_RETURN(std::vector<store::GcDeletionRecord> pending, db->ListGcDeletions());
    for (const store::GcDeletionRecord& d : pending) {
      Result<store::BlobInfo> info = blobs.Stat(d.digest);
      if (info.ok()) continue;
      if (info.status().code() != Code::kNotFound) {
        report.errors.push_back(info.status().ToString());
        continue;
      }
      KeyedMutex::Lock lock(blob_locks, d.digest);
      Status s = db->ForgetBlob(d.digest);
      if (s.ok()) s = db->ResolveGcDeletion(d.digest);
      if (!s.ok()) report.errors.push_back(s.ToString());
    }
  }

  std::unordered_set<std::string> marked(roots.referenced.begin(), roots.referenced.end());
  // Archives stored as chains (docs/storage.md, "Chains"): a kept archive keeps its parent
  // (raw blob or stored form), transitively, and its link's patch. Re-basing the dependents of
  // archives nobody references any more is ArchiveStorage::RebaseOrphans' job, before this.
  std::unordered_map<std::string, const store::GcRoots::Derived*> link_of;
  for (const store::GcRoots::Derived& row : roots.chains) link_of[row.to_digest] = &row;
  std::unordered_set<std::string> chained_alive;
  for (const std::string& root : roots.referenced) {
    std::string at = root;
    for (auto it = link_of.find(at); it != link_of.end(); it = link_of.find(at)) {
      if (!chained_alive.insert(at).second) break;  // walked already (or a cycle)
      marked.insert(it->second->blob_digest);
      at = it->second->from_digest;
      marked.insert(at);  // the parent's raw blob, when it is still stored raw
    }
  }
  const std::unordered_set<std::string> alive = marked;
  auto keep_derived = [&](const char* kind, const std::vector<store::GcRoots::Derived>& rows) {
    for (const store::GcRoots::Derived& row : rows) {
      // The full patch of an archive stored as a chain link is only a cache (computed for a
      // pull without a base): each collection forgets it, unless it is what the archive's
      // dependents' chains end in (MetadataDb::ForgetDerived keeps it then).
      const bool cache_of_chained = std::string_view(kind) == "patches" &&
                                    row.from_digest.empty() &&
                                    chained_alive.count(row.to_digest) > 0;
      if (!cache_of_chained && alive.count(row.to_digest) > 0 &&
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
  // Links of archives nobody keeps are forgotten first, each after every link stored against
  // its archive (ForgetDerived keeps a link that is still a parent, and BlobReferenced then
  // keeps its blob). The order follows the links themselves, not their recorded depth: an
  // archive chained after others were chained on it is deeper than its dependents' rows say.
  std::unordered_map<std::string, size_t> dependents;  // archive -> dead links naming it parent
  std::vector<const store::GcRoots::Derived*> ready;
  for (const store::GcRoots::Derived& row : roots.chains) {
    if (chained_alive.count(row.to_digest) == 0) ++dependents[row.from_digest];
  }
  for (const store::GcRoots::Derived& row : roots.chains) {
    if (chained_alive.count(row.to_digest) == 0 && dependents[row.to_digest] == 0) {
      ready.push_back(&row);
    }
  }
  while (!ready.empty()) {
    const store::GcRoots::Derived& row = *ready.back();
    ready.pop_back();
    ++report.derived_forgotten;
    if (!options.dry_run) {
      if (Status s = db->ForgetDerived("archive_chains", row); !s.ok()) {
        report.errors.push_back(s.ToString());
        marked.insert(row.blob_digest);
      }
    }
    // Its parent's own link is next once nothing else dead is stored against the parent.
    auto parent = link_of.find(row.from_digest);
    if (parent != link_of.end() && chained_alive.count(row.from_digest) == 0 &&
        --dependents[row.from_digest] == 0) {
      ready.push_back(parent->second);
    }
  }
  // (Before the patches: a dead parent's full patch row is kept while a link names the
  // parent, so forgetting the links first lets one collection drain a whole dead chain.)
  keep_derived("patches", roots.patches);
  keep_derived("value_diffs", roots.value_diffs);
  keep_derived("version_stats", roots.version_stats);
  keep_derived("lossy_deltas", roots.lossy_deltas);
  // Tensors by content of archives that are nobody's version (chain storage's parent lookup).
  if (!options.dry_run) {
    if (Status s = db->ForgetUnversionedArchiveTensors(); !s.ok()) {
      report.errors.push_back(s.ToString());
    }
  }
  if (options.after_mark) options.after_mark();
  if (!options.dry_run) FailPoint("gc-after-forget");
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
    // its check to its commit: in this process, the answer below cannot change. Other
    // replicas' pushes touch the blob's row first, which the delete's transaction checks.
    KeyedMutex::Lock lock(blob_locks, digest);
    uint64_t freed = 0;
    Result<store::BlobDeletion> deletion = db->DeleteBlobUnlessTouched(
        digest, young_after, mark, options.collector, int64_t(std::time(nullptr)),
        [&]() { return blobs.RemoveIfOlder(digest, cutoff); }, &freed);
    if (!deletion.ok()) {  // recorded in gc_deletions as failed; the next collection retries
      report.errors.push_back(deletion.status().ToString());
      continue;
    }
    switch (*deletion) {
      case store::BlobDeletion::kKept:
        ++report.blobs_marked;
        break;
      case store::BlobDeletion::kTooYoung:
        ++report.blobs_too_young;
        break;
      case store::BlobDeletion::kDeleted:
        ++report.blobs_removed;
        report.bytes_freed += freed;  // counted once the store confirmed the removal
        report.removed.push_back(digest);
        if (report.blobs_removed == 1) FailPoint("gc-after-first-delete");
        break;
    }
  }
  // A recorded deletion of a blob found referenced again (marked) is resolved.
  if (!options.dry_run) {
    Result<std::vector<store::GcDeletionRecord>> left = db->ListGcDeletions();
    if (!left.ok()) {
      report.errors.push_back(left.status().ToString());
    } else {
      for (const store::GcDeletionRecord& d : *left) {
        if (marked.count(d.digest) == 0) continue;
        if (Status s = db->ResolveGcDeletion(d.digest); !s.ok()) {
          report.errors.push_back(s.ToString());
        }
      }
    }
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace blz::registry
