// Garbage collection of the blob store (docs/registry-api.md, "Deletes and garbage
// collection"): online, mark and sweep.
//
// Mark, from one snapshot of the metadata DB (MetadataDb::ReadGcRoots): every blob that a
// manifest of any repository references (config and layers, table manifest_blobs), every
// model version's archive, every blob linked into a repository less than `grace` ago (a push in
// progress: its manifest is not there yet), and the cached patches, full patches and value
// diffs, statistics and lossy deltas whose archives are all marked (the rows of the others are
// forgotten: their versions are gone, so nobody can ask for them). Chains (docs/storage.md,
// "Chains"; table archive_chains): a marked archive stored as a chain link marks its link's
// patch and its parent, transitively (the parent's raw blob or stored form stays); links of
// unmarked archives are forgotten (deepest first); the full patch of a chained archive is a
// cache and is forgotten. Re-basing links whose parent is no longer referenced happens before
// the collection (ArchiveStorage::RebaseOrphans, from Registry::CollectGarbage). The rows of
// archive_tensors (large tensors by content, for choosing chain parents) of archives that are
// nobody's version are forgotten.
// Sweep: every published blob that is not marked is deleted by
// MetadataDb::DeleteBlobUnlessTouched, under its lock: the deletion is recorded
// (gc_deletions, 'deleting'), then one transaction flips the blob out of `blobs` unless a push
// touched it since the collection started marking (MetadataDb::StartGcMark increments the
// DB's garbage-collection epoch; RecordBlob, LinkBlob and TouchBlob write the current epoch to
// blobs.touched: a counter, not a clock, so replicas' clocks need not agree), checks again that nothing references it (young links included), and
// removes its file if it was last written more than `grace` ago (BlobStore::RemoveIfOlder)
// before committing; its links go with it. Bytes count as freed only once the removal
// succeeded. A removal that fails rolls the transaction back and leaves the deletion recorded
// as 'failed' with its error (and in GcReport::errors); the next collection retries it, and
// forgets recorded deletions whose bytes are gone (a collector killed after removing them).
// Upload sessions (<data>/uploads) and the rebuilt-archive cache (<data>/cache) are not
// touched.
//
// Safe while the registry serves: in one process, everything that makes a blob referenced (a
// manifest PUT from its blob checks to its commit, an upload from its publish to its link, a
// mount) holds the blob's lock in `blob_locks`, so the re-check under that lock cannot be
// overtaken. Across replicas of one metadata DB (issue 25), a push touches the blob's row
// before it relies on the bytes (an upload: TouchBlob before publishing; a manifest PUT or
// mount: LinkBlob in its transaction), and the delete's transaction holds the row (SQLite: the
// write lock; PostgreSQL: the row lock of its DELETE) from the check until the bytes are gone:
// a touch either lands first (the blob is kept) or waits and then finds the row gone (the
// upload then publishes its own bytes). Not yet closed across replicas: a manifest PUT that
// checked a blob's file before another replica's collector removed it still commits (its
// transaction touches the row but does not fail when the row is gone). One
// collection at a time cluster-wide is Registry::CollectGarbage's job (the lease "gc").
// Blobs published without the lock (computed patches, before their row is recorded) are
// young.
#ifndef BLZ_REGISTRY_GARBAGE_COLLECTOR_H_
#define BLZ_REGISTRY_GARBAGE_COLLECTOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "registry/keyed_mutex.h"
#include "store/blob_store.h"
#include "store/metadata_db.h"

namespace blz::registry {

struct GcOptions {
  std::chrono::milliseconds grace{std::chrono::hours(1)};
  bool dry_run = false;  // report what would be removed; remove nothing, forget nothing
  // Who collects, recorded with each deletion (gc_deletions.collector): the lease owner.
  std::string collector = "gc";
  // Tests: runs after the marking (the snapshot is read), before the sweep.
  std::function<void()> after_mark;
};

struct GcReport {
  bool dry_run = false;
  uint64_t blobs_total = 0;      // published blobs found
  uint64_t blobs_marked = 0;     // of those, referenced (at the snapshot or the re-check)
  uint64_t blobs_removed = 0;    // unreferenced and removed (or, dry run: would be)
  uint64_t bytes_freed = 0;      // their bytes
  uint64_t blobs_too_young = 0;  // unreferenced but within the grace period: kept
  uint64_t derived_forgotten = 0;  // cached patches and value diffs whose archives are gone
  // Set by Registry::CollectGarbage, which re-bases orphaned chain links before collecting
  // (ArchiveStorage::RebaseOrphans; 0 in a dry run). A link re-based onto a new parent leaves
  // the full patch computed on the way as young garbage: the next collection takes it.
  uint64_t chain_links_rebased = 0;
  uint64_t chain_rebases_failed = 0;  // those links stay, and so do their parents
  std::vector<std::string> removed;  // digests removed, sorted
  // Blobs that could not be removed (the sweep goes on); and a re-base pass that failed as a
  // whole (the links could not be listed), as "re-basing orphaned chain links: ..." (the
  // collection itself still runs).
  std::vector<std::string> errors;
  double seconds = 0;
};

// One collection. `blob_locks`: the registry's per-digest locks (see above). Errors: those of
// ReadGcRoots and ListDigests (nothing removed then); a blob that cannot be checked or removed
// is reported in GcReport::errors and the sweep goes on.
Result<GcReport> CollectGarbage(const store::BlobStore& blobs, store::MetadataDb* db,
                                KeyedMutex* blob_locks, const GcOptions& options);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_GARBAGE_COLLECTOR_H_
