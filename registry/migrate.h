// `blz admin migrate` (issue 25): copies a whole registry, its metadata database and its blob
// store, from one pair of engines to another (typically a single box's SQLite + file to
// PostgreSQL + S3) so that nobody re-pushes. Both sides are opened through the seams
// (store/sql.h OpenDatabase, store/open_blob_store.h OpenBlobStore); the target's migrations
// are applied on open.
//
// What it does, in order (nothing is copied before every check passed):
//   1. Opens both databases and both stores; the file: stores' directories are locked with the
//      data-directory lock of `blz serve` (registry/server.h LockDataDir; also the directory of a
//      SQLite source holding blz.lock), so a registry being
//      served cannot be migrated (nor migrated into). An S3 store is checked (CheckReachable: a
//      wrong key fails here, naming the bucket and S3's code).
//   2. Refuses a target database that holds any row in a copied table (kAlreadyExists, naming
//      the tables) unless `resume`: then rows and blobs already present are skipped, so a
//      migration that stopped half-way continues idempotently.
//   3. Copies every blob of the source store (ListDigests): streamed into the target's
//      temporary directory and published through BlobStore::Publish, which re-hashes it (a
//      digest mismatch fails the run) and on S3 uses a multipart upload for large blobs. A blob
//      already in the target with the same size is skipped.
//   4. Copies every row of the registry's tables (kCopiedTables, in that order, foreign keys
//      first), generically: the column list is read from the catalogs of both databases, values
//      keep their ids and SQLite rowids (PostgreSQL identity columns are written with OVERRIDING
//      SYSTEM VALUE and their sequences are moved past the largest id afterwards). Tokens are
//      copied as their hashes and the settings with the token-signing secret, so every token
//      and access token stays valid. Job leases, upload sessions, GC bookkeeping and the marks
//      of raw archives being read are not copied (kSkippedTables); a table the source holds
//      that is in neither list fails the run (a newer schema must be classified here first).
//   5. Verifies: every copied table has as many rows in the target as in the source; every blob
//      of the source store is in the target store with its size; every blob the target
//      database references (blobs, patches, value diffs, statistics, lossy deltas) is in the
//      target store with its recorded size, unless it was already absent from the source store
//      (counted in MigrateReport::absent_in_source). Any mismatch is kCorruption naming it.
//
// Errors: kInvalidArgument (a URL), kNotFound (a source data directory that does not exist),
// kUnavailable (a data directory in use by `blz serve`; an unreachable server), kUnauthorized
// (refused credentials), kAlreadyExists (non-empty target without resume), kCorruption (the
// verification), kDigestMismatch (a source blob whose bytes do not match its name), the
// engines' errors. Messages never hold a password or a secret key.
#ifndef BLZ_REGISTRY_MIGRATE_H_
#define BLZ_REGISTRY_MIGRATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace blz::registry {

// The tables copied, in this order (referenced tables first).
extern const std::vector<std::string> kCopiedTables;
// The tables deliberately left behind: per-process or transient state.
extern const std::vector<std::string> kSkippedTables;

struct MigrateOptions {
  std::string from_metadata;  // "sqlite:PATH" | "postgresql://..."
  std::string from_storage;   // "file:DIR" | "s3://..."
  std::string to_metadata;
  std::string to_storage;
  // Continue into a target that already holds rows (skip what is present).
  bool resume = false;
  // Where S3 stores keep their temporary files and download cache during the run (created and
  // removed by the run; "" = a fresh directory under $TMPDIR or /tmp).
  std::string work_dir;
  // Progress lines (may be empty).
  std::function<void(const std::string&)> log;
};

struct MigrateTableReport {
  std::string table;
  uint64_t source_rows = 0;
  uint64_t copied = 0;   // rows inserted
  uint64_t present = 0;  // rows already in the target (resume)
};

struct MigrateReport {
  std::vector<MigrateTableReport> tables;
  uint64_t rows_copied = 0;
  uint64_t rows_present = 0;
  uint64_t blobs_copied = 0;
  uint64_t bytes_copied = 0;
  uint64_t blobs_present = 0;  // already in the target with the right size: skipped
  uint64_t bytes_present = 0;
  uint64_t blobs_verified = 0;      // referenced or source blobs checked in the target store
  uint64_t absent_in_source = 0;    // referenced by the database, absent from the source store
  uint64_t sequences_reset = 0;     // PostgreSQL identity sequences moved past the copied ids
  double seconds = 0;
  std::string from_label;  // "<database label>,<store description>" (no password)
  std::string to_label;
  std::string to_metadata_label;  // the target database, named without a password
};

Result<MigrateReport> MigrateRegistry(const MigrateOptions& options);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_MIGRATE_H_
