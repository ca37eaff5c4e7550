// Garbage collection of the blob store (docs/registry-api.md, "Garbage collection"): online,
// mark and sweep.
//
// Mark: from one snapshot of the metadata DB (MetadataDb::ReadGcRoots), every blob that
//  - a manifest of any repository references (config and layers; a blz model's archive),
//  - is linked into any repository (uploaded or mounted there and not deleted since),
//  - is the archive of a model version,
//  - is a cached patch, full patch or value diff whose archives are all marked (the rows of
//    the others are forgotten: their archives are gone, so nobody can ask for them).
// Sweep: every published blob that is not marked and whose file was last written more than
// `grace` ago is removed (BlobStore::RemoveIfOlder). Upload sessions (<data>/uploads) and the
// rebuilt-archive cache (<data>/cache, bounded on its own) are not touched.
//
// Safe while the registry serves: a push writes its blobs before it links them, and links them
// before its manifest can reference them; a blob published after the snapshot is younger than
// the grace period when the sweep reaches it (its file was just written), so it stays. A blob
// that was linked nowhere at the snapshot can only become linked again through a new upload
// (a mount needs a repository that holds it), which writes a young file. RemoveIfOlder decides
// on the file it removes, so a copy published during the sweep is never lost. The grace
// period must exceed the longest time between a blob's last write and its link (an upload's
// final hash): the default is an hour.
#ifndef BLZ_REGISTRY_GARBAGE_COLLECTOR_H_
#define BLZ_REGISTRY_GARBAGE_COLLECTOR_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "store/blob_store.h"
#include "store/metadata_db.h"

namespace blz::registry {

struct GcOptions {
  std::chrono::milliseconds grace{std::chrono::hours(1)};
  bool dry_run = false;  // report what would be removed; remove nothing, forget nothing
};

struct GcReport {
  bool dry_run = false;
  uint64_t blobs_total = 0;      // published blobs found
  uint64_t blobs_marked = 0;     // of those, referenced
  uint64_t blobs_removed = 0;    // unreferenced and removed (or, dry run: would be)
  uint64_t bytes_freed = 0;      // their bytes
  uint64_t blobs_too_young = 0;  // unreferenced but within the grace period: kept
  uint64_t derived_forgotten = 0;  // cached patches and value diffs whose archives are gone
  std::vector<std::string> removed;  // digests removed, sorted
  std::vector<std::string> errors;   // blobs that could not be removed (the sweep goes on)
  double seconds = 0;
};

// One collection. Errors: those of ReadGcRoots and ListDigests (nothing removed then).
Result<GcReport> CollectGarbage(const store::BlobStore& blobs, store::MetadataDb* db,
                                const GcOptions& options);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_GARBAGE_COLLECTOR_H_
