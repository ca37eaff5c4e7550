// The registry's metadata: repositories, manifests, tags, model versions (with their structural
// hashes), computed patches and value diffs, API tokens and open upload sessions, in one SQL
// database: a SQLite file (<data>/blz.db, the default) or PostgreSQL, through the
// engine-neutral seam store/sql.h (one driver folder per engine).
//
// Schema: migrations/*.sql for SQLite, migrations/postgres/*.sql for PostgreSQL
// (store/migrations.h). Open() applies pending migrations (PostgreSQL's under an advisory lock,
// so replicas starting together apply each once), refuses a DB newer than the binary
// (kUnsupported); SQLite gets WAL journaling, a 5 s busy timeout and foreign keys.
//
// Thread safety: every public method may be called from any thread. Each call leases one
// connection of a bounded pool (store/sql_pool.h) for its whole duration. SQLite: exactly one
// connection, so calls are serialized as before (waiting without a bound). PostgreSQL: up to
// `pool=N` connections (a parameter of the URL, default 8; `pool_timeout=SECONDS`, default 10,
// bounds the wait for a free one, then kUnavailable), so concurrent calls of one process run in
// parallel exactly as calls of several replicas do, with the same locks.
// Writing a method: its first line leases the connection,
//     BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
// (instead of the former `std::lock_guard lock(mu_);`), and the body uses `db_` as a
// sql::Database (`db_.Prepare(...)`, `Transaction::Begin(&db_)`); a private helper that runs
// statements takes it as its first parameter, `sql::Database& db_`. Keep no per-connection or
// per-call state in members, and never call a public method while holding a lease (SQLite's one
// connection would wait for itself). Several processes may share the
// database: SQLite's file (WAL + busy timeout; one writer at a time), or PostgreSQL (READ
// COMMITTED; the methods whose reads decide their writes serialize on a named advisory lock,
// sql::Transaction::LockKey, across every process and replica).
//
// Names and digests are not validated here (the registry does that); digests are stored as
// "sha256:<hex>" text. Errors: kNotFound for a missing row, kIOError / kUnavailable (busy, a
// lost connection, a PostgreSQL serialization failure or deadlock) for database failures.
#ifndef BLZ_STORE_METADATA_DB_H_
#define BLZ_STORE_METADATA_DB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "store/sql.h"
#include "store/sql_pool.h"

namespace blz::store {

struct ManifestRecord {
  std::string digest;
  std::string media_type;
  std::string content;  // byte-exact as pushed
};

// A manifest push: stored under (repository, digest); `tag` (if not empty) moves to it; when
// `archive_digest` is not empty the archive is recorded as a version of the repository.
struct ManifestPut {
  std::string repository;
  std::string digest;
  std::string media_type;
  std::string content;
  std::string tag;
  std::string archive_digest;
  uint64_t archive_size = 0;
  // The archive's structural hash (64 lower-case hex, formats/identify.h); "" = unknown (NULL).
  // Re-pushing a version whose hash is unknown records it.
  std::string structural_hash;
  // For the referrers API: the digest of the manifest's subject ("" = none), its artifact type
  // ("" = none) and its annotations as JSON object text ("" = none).
  std::string subject_digest;
  std::string artifact_type;
  std::string annotations;
  // Blobs the manifest references, linked into the repository in the same transaction.
  std::vector<std::string> blobs;
};

// A manifest that names another as its subject (OCI referrers API).
struct ReferrerRecord {
  std::string digest;
  std::string media_type;
  uint64_t size = 0;
  std::string artifact_type;  // "" = none
  std::string annotations;    // JSON object text; "" = none
};

// What garbage collection marks from (MetadataDb::GcRoots), read in one consistent snapshot.
struct GcRoots {
  struct Derived {  // a cached patch (from = "" for a full patch) or value diff
    std::string from_digest;
    std::string to_digest;
    std::string blob_digest;
  };
  // Blobs a manifest of any repository references, archives of model versions, and blobs
  // linked into a repository recently (a push in progress).
  std::vector<std::string> referenced;
  std::vector<Derived> patches;
  std::vector<Derived> value_diffs;
  // Cached version statistics: from_digest "", to_digest = the archive.
  std::vector<Derived> version_stats;
  // Cached lossy deltas (one entry per row; several parameter sets may share from -> to).
  std::vector<Derived> lossy_deltas;
  // Chain links (table archive_chains): from = the parent, to = the chained archive, blob = the
  // patch. A kept archive keeps its parent and the parent's stored form.
  std::vector<Derived> chains;
};

// What DeleteManifest removed.
struct ManifestDeletion {
  std::vector<std::string> tags;  // tags that pointed at the manifest, now gone
  std::string archive_digest;     // the model version it was, "" when it was not one
};

struct VersionRecord {
  std::string repository;
  std::string archive_digest;
  std::string manifest_digest;
  uint64_t archive_size = 0;
  int64_t created = 0;  // Unix seconds
  std::string structural_hash;  // "" when unknown (a version-1 row not yet backfilled)
};

// A version listed under its structure: one entry per tag pointing at the version's manifest,
// or one with tag = nullopt when no tag does.
struct StructureVersion {
  std::string repository;
  std::optional<std::string> tag;
  std::string archive_digest;
  std::string manifest_digest;
};

// Position in a structure listing: entries are ordered by (repository, tag or "" when
// untagged, archive digest), bytewise; a listing continues after this key. All empty = start.
struct StructureCursor {
  std::string repository;
  std::string tag;
  std::string archive_digest;
};

struct StructurePage {
  std::vector<StructureVersion> items;
  bool more = false;  // entries exist after items.back()
};

// A cached value diff (the JSON of `blz diff --values --json`) between two archives.
struct ValueDiffRecord {
  std::string from_digest;  // archive a
  std::string to_digest;    // archive b
  std::string diff_digest;  // the JSON blob
  uint64_t diff_size = 0;
};

// Cached tensor statistics (the JSON of `blz inspect --stats --json`) of one archive.
struct VersionStatsRecord {
  std::string archive_digest;
  std::string stats_digest;  // the JSON blob
  uint64_t stats_size = 0;
};

// What storage accounting reads (MetadataDb::ReadStorageInventory; registry/storage_accounting.h).
struct StorageInventory {
  // Model versions (repository, archive_digest, manifest_digest, archive_size, created; no
  // structural hash), ordered by repository, then oldest first (as ListVersions).
  std::vector<VersionRecord> versions;
  // The blobs a repository's manifests reference that are not one of its model archives
  // (configs, other layers, the blobs of non-model manifests), once per (repository, blob),
  // with the size recorded in `blobs`; ordered by (repository, digest).
  struct Blob {
    std::string repository;
    std::string digest;
    uint64_t size = 0;
  };
  std::vector<Blob> other_blobs;
};

// A tag and the manifest it points at.
struct TagTarget {
  std::string tag;
  std::string manifest_digest;
};

struct PatchRecord {
  std::string from_digest;   // base archive
  std::string to_digest;     // target archive
  std::string patch_digest;  // the patch blob
  uint64_t patch_size = 0;
};

// A cached lossy delta (a .wdelta, patcher/lossy/lossy_delta.h) between two archives.
struct LossyDeltaRecord {
  std::string from_digest;   // base archive
  std::string to_digest;     // target archive
  std::string params;        // canonical "strategy=<s>[&<option>=<value>...]" (the key's third part)
  std::string delta_digest;  // the .wdelta blob
  uint64_t delta_size = 0;
  std::string report;        // the measured report (DeltaReportJson) as JSON object text
};

// The scope of tokens made before scopes existed (the admin token): every action everywhere.
inline constexpr char kFullAccessScope[] = "*:pull,push,delete,admin";

// An API token's row (never the token itself: only its SHA-256 is stored).
struct TokenRecord {
  int64_t id = 0;  // stable row id (access tokens name it, registry/auth.h)
  std::string name;
  // What it may do, as text in the grammar of registry/scope.h (the store does not parse it).
  std::string scope;
  int64_t created = 0;                // Unix seconds
  std::optional<int64_t> expires;     // Unix seconds; nullopt = never
  std::optional<int64_t> revoked;     // Unix seconds; nullopt = active

  // Neither revoked nor expired at `now` (Unix seconds).
  bool ActiveAt(int64_t now) const {
    return !revoked.has_value() && (!expires.has_value() || now < *expires);
  }
};

struct UploadRecord {
  std::string uuid;
  std::string repository;
  int64_t started = 0;  // Unix seconds
  // Shared by replicas (migrations/0009_upload_parts.sql): the bytes received so far, the names
  // of the stored chunks in order (BlobStore::PutUploadPart, or a range of the fs session file:
  // store::SessionFilePartName), when the last chunk arrived.
  uint64_t size = 0;
  std::vector<std::string> parts;
  int64_t updated = 0;  // Unix seconds
  // A patch upload (migrations/0011_upload_patch_from.sql): the base archive's digest the
  // session's bytes are a patch against; "" for an ordinary upload.
  std::string patch_from;
};

// How an archive whose raw blob was dropped is stored (table archive_chains,
// migrations/0012_archive_chains.sql; docs/storage.md, "Chains").
struct ChainLink {
  std::string archive_digest;
  std::string parent_digest;  // the archive the patch applies to
  std::string patch_digest;   // the verified patch parent -> archive (a blob)
  uint64_t patch_size = 0;
  uint64_t depth = 1;          // links to apply (1 = the parent is stored whole); upper bound
  uint64_t rebuild_bytes = 0;  // stored bytes read to rebuild it (root form + links); bound
};

// An archive's stored form (MetadataDb::FindStoredForm), for at-rest accounting: a chain link,
// or its full patch (parent_digest "" and depth 0).
struct StoredForm {
  std::string parent_digest;  // "" = a full patch (no base)
  std::string patch_digest;   // the blob holding the form
  uint64_t patch_size = 0;
  uint64_t depth = 0;         // 0 = a full patch
};

// One page of a lexically ordered listing (bytewise order).
struct Page {
  std::vector<std::string> items;
  bool more = false;  // entries exist after items.back()
};

// One file of a model version as the Hugging Face Hub API lists it (table version_files,
// migrations/0010_version_files.sql; registry/hub/version_files.h computes the values).
struct VersionFileRecord {
  std::string path;
  uint64_t size = 0;
  std::string sha256;   // 64 lower-case hex
  std::string git_oid;  // 40 lower-case hex
  bool lfs = false;
};

// One tensor of an archive by content (table archive_tensors,
// migrations/0014_archive_tensors.sql): what chain storage matches identical tensors by.
struct ArchiveTensorRecord {
  uint64_t position = 0;  // index in the archive header's tensors
  std::string sha256;     // 64 lower-case hex: SHA-256 of the tensor's bytes
  uint64_t length = 0;    // bytes
};

// An archive holding tensors identical to another's (MetadataDb::ListArchivesSharingTensors).
struct SharedTensors {
  std::string archive_digest;
  uint64_t bytes = 0;  // the other archive's tensor bytes this one also holds
};

// -- replicas (store/metadata_db_replicas.cc) --

// A lease row of the jobs table (migrations/0008_replicas.sql).
struct JobRecord {
  std::string key;
  std::string state;  // "running", "done" or "failed"
  std::string owner;  // who holds (running) or last held it
  int64_t lease_expires = 0;  // Unix seconds; running and past it = abandoned
  int64_t attempts = 0;       // acquisitions so far (takeovers and retries included)
  std::string error;          // state "failed": why
  std::string result;         // state "done": what the job produced ("" = nothing)
};

// What TryAcquireJob found.
enum class JobAcquire : uint8_t {
  kAcquired,  // the caller now holds the lease (new, retried after a failure, taken over from
              // a holder whose lease expired, or redone)
  kHeld,      // another owner holds an unexpired lease: wait, then look again
  kDone,      // finished: JobRecord::result is its result
};

struct JobAcquisition {
  JobAcquire outcome = JobAcquire::kHeld;
  JobRecord job;  // the row as the call left it
};

// A blob garbage collection is deleting or failed to delete (table gc_deletions).
struct GcDeletionRecord {
  std::string digest;
  std::string state;      // "deleting" or "failed"
  std::string collector;  // the collector's owner id
  int64_t since = 0;      // Unix seconds
  int64_t attempts = 0;
  std::string error;      // state "failed": why
};

// What DeleteBlobUnlessTouched did.
enum class BlobDeletion : uint8_t {
  kDeleted,   // the bytes are gone (remove() confirmed) and the rows forgotten
  kKept,      // referenced, or touched by a push since marking: nothing removed
  kTooYoung,  // remove() refused (kUnavailable: written within the grace period): kept
};

class MetadataDb {
 public:
  // Opens the database `url` names and migrates it to the latest schema:
  //   "sqlite:PATH" or a plain path -> the SQLite file PATH (created when missing);
  //   "postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?...]" or "postgres://..." -> PostgreSQL;
  //   blz's own query parameters, taken out before libpq sees the URL: pool=N (1..1000, the
  //   most connections this MetadataDb opens, default 8) and pool_timeout=SECONDS (how long a
  //   call waits for a free one, default 10).
  // Errors: kInvalidArgument (unknown scheme, a bad pool or pool_timeout), kUnsupported (DB
  // newer than the binary),
  // kCorruption (not a DB), kIOError; PostgreSQL's connection errors (kUnavailable,
  // kUnauthorized, kNotFound; store/postgres/connection.h). No message holds a password.
  static Result<std::unique_ptr<MetadataDb>> Open(const std::string& url);

  // The schema version (SQLite: PRAGMA user_version; PostgreSQL: schema_migrations).
  Result<int64_t> SchemaVersion();
  // "sqlite" or "postgresql".
  std::string_view engine() const { return pool_->engine(); }
  // The database for messages: the SQLite file's path, or "postgresql://USER@HOST:PORT/DB"
  // (never a password).
  const std::string& label() const { return pool_->label(); }
  // The pool's bound (1 on SQLite) and the connections open now.
  size_t max_connections() const { return pool_->max_connections(); }
  size_t open_connections() { return pool_->open_connections(); }
  // Readiness (GET /readyz): runs `SELECT 1`. On PostgreSQL a dropped connection is
  // re-established first (store/postgres/sql_driver.cc), so a server that came back answers
  // again. Errors: the driver's (kUnavailable for a server that is down), naming the database.
  Status Ping();
  // The statements run so far and their wall time (sql::QueryStats; blz_metadata_query_seconds).
  sql::QueryStats query_stats() const { return pool_->query_stats(); }

  // -- blobs --
  // Records a published blob (idempotent).
  Status RecordBlob(std::string_view digest, uint64_t size);

  // -- repositories, manifests, tags, versions --
  // Stores a manifest, moves its tag and records its version, all in one transaction. Creates
  // the repository on first use. kNotFound when one of put.blobs has no row any more (a
  // collection on any replica removed it after the caller checked it: nothing is stored).
  // Re-pushing identical content is a no-op, also when another
  // replica pushes it at the same moment (PostgreSQL: a unique violation retries the
  // transaction; kUnavailable if it keeps colliding).
  Status PutManifest(const ManifestPut& put);
  // kNotFound when the repository has no manifest with this digest.
  Result<ManifestRecord> GetManifest(std::string_view repository, std::string_view digest);
  // The manifest digest a tag points at. kNotFound when the repository or tag is unknown.
  Result<std::string> ResolveTag(std::string_view repository, std::string_view tag);
  Result<bool> RepositoryExists(std::string_view repository);
  // Tags of `repository` after `last` (exclusive; "" = from the start), at most `limit`
  // (nullopt = all). kNotFound when the repository is unknown.
  Result<Page> ListTags(std::string_view repository, std::optional<uint64_t> limit,
                        std::string_view last);
  // Repository names after `last`, at most `limit`.
  Result<Page> ListRepositories(std::optional<uint64_t> limit, std::string_view last);
  // kNotFound when `archive_digest` is not a version of `repository`.
  Result<VersionRecord> FindVersion(std::string_view repository, std::string_view archive_digest);
  // Versions of a repository, oldest first.
  Result<std::vector<VersionRecord>> ListVersions(std::string_view repository);
  // Every repository's version record of one archive (the same archive may be a version of
  // several repositories), ordered by repository name. Empty when it is nobody's version.
  Result<std::vector<VersionRecord>> ListVersionsOfArchive(std::string_view archive_digest);

  // -- structural hashes --
  // Archive digests of versions (of any repository) whose structural hash is unknown, sorted.
  Result<std::vector<std::string>> ArchivesWithoutStructure();
  // Records `structural_hash` for every version of `archive_digest` whose hash is unknown.
  Status SetStructuralHash(std::string_view archive_digest, std::string_view structural_hash);
  // Versions (of every repository) whose archive has `structural_hash`, in the StructureCursor
  // order, after `after`, at most `limit` entries (nullopt = all). An unknown hash gives an
  // empty page.
  Result<StructurePage> ListStructureVersions(std::string_view structural_hash,
                                              std::optional<uint64_t> limit,
                                              const StructureCursor& after);

  // -- storage accounting (store/metadata_db_accounting.cc) --
  // Every model version and every other blob manifests reference (StorageInventory), in one
  // snapshot; `repository` not empty: only that repository's. Two queries (a scan of
  // `versions` and of `manifest_blobs`), no per-row statements.
  Result<StorageInventory> ReadStorageInventory(std::string_view repository = "");

  // -- value diffs --
  // kNotFound when no value diff from -> to was recorded.
  Result<ValueDiffRecord> FindValueDiff(std::string_view from_digest, std::string_view to_digest);
  // Records (or replaces) the value diff from -> to.
  Status RecordValueDiff(const ValueDiffRecord& diff);

  // -- browsing (store/metadata_db_browse.cc) --
  // Every repository name containing `contains` (a plain substring, bytewise; "" = all),
  // sorted bytewise.
  Result<std::vector<std::string>> ListRepositoryNames(std::string_view contains);
  // Every tag of `repository` with its manifest digest, sorted by tag. Empty when the
  // repository is unknown.
  Result<std::vector<TagTarget>> ListTagTargets(std::string_view repository);
  // kNotFound when no statistics of `archive_digest` were recorded.
  Result<VersionStatsRecord> FindVersionStats(std::string_view archive_digest);
  // Records (or replaces) the statistics of an archive.
  Status RecordVersionStats(const VersionStatsRecord& stats);

  // -- files of versions (store/metadata_db_files.cc) --
  // The files recorded for `archive_digest`, in archive order. Empty when none were recorded.
  Result<std::vector<VersionFileRecord>> ListVersionFiles(std::string_view archive_digest);
  // Records the files of `archive_digest` (positions 0..n-1) in one transaction; a concurrent or
  // earlier recording of the same archive wins (the rows depend only on the archive's bytes).
  Status RecordVersionFiles(std::string_view archive_digest,
                            const std::vector<VersionFileRecord>& files);

  // Records the listed tensors of `archive_digest` in one transaction (rows already recorded
  // stay: they depend only on the archive's bytes).
  Status RecordArchiveTensors(std::string_view archive_digest,
                              const std::vector<ArchiveTensorRecord>& tensors);
  // True when tensors of `archive_digest` were recorded.
  Result<bool> HasArchiveTensors(std::string_view archive_digest);
  // The archives of model versions (any repository) with no tensors recorded, each once, in
  // digest order: one query for what a start lists (ArchiveStorage::ScheduleAll).
  Result<std::vector<std::string>> ListVersionArchivesWithoutTensors();
  // The model versions' archives (rows of `versions`, any repository) holding tensors with the
  // same SHA-256 and length as tensors recorded for `archive_digest`, at most `limit`, most
  // shared bytes first (ties: by digest). A tensor of `archive_digest` counts once per other
  // archive, however many twins it has there. Empty when nothing is shared or nothing was
  // recorded.
  Result<std::vector<SharedTensors>> ListArchivesSharingTensors(std::string_view archive_digest,
                                                                uint64_t limit);
  // Forgets the tensors of archives that are no model version of any repository (garbage
  // collection calls it; an archive pushed again is recorded again when it is compressed).
  Status ForgetUnversionedArchiveTensors();

  // -- patches --
  // kNotFound when no patch from -> to was recorded.
  Result<PatchRecord> FindPatch(std::string_view from_digest, std::string_view to_digest);
  // Records (or replaces) the patch from -> to; `repository` may be empty.
  Status RecordPatch(std::string_view repository, const PatchRecord& patch);

  // -- archive chains (store/metadata_db_chains.cc; docs/storage.md, "Chains") --
  // The chain link of `archive_digest`. kNotFound when it is not stored as one.
  Result<ChainLink> FindChainLink(std::string_view archive_digest);
  // The stored form of an archive: its chain link if it has one, else its full patch (the
  // `patches` row from ""). kNotFound when it has neither (stored raw, or unknown). The query
  // for at-rest accounting.
  Result<StoredForm> FindStoredForm(std::string_view archive_digest);
  // Every chain link, ordered by archive digest.
  Result<std::vector<ChainLink>> ListChainLinks();
  // The chain links whose parent is `parent_digest`, ordered by archive digest.
  Result<std::vector<ChainLink>> ListChainChildren(std::string_view parent_digest);
  // Records `link` (replacing the archive's former link, if any) and the patch as the
  // `patches` row (parent, archive), in one transaction (lock "chains") that first checks that
  // the parent is still a model version of some repository (or, `replacing` not empty, that
  // the archive's current link still names `replacing` as its parent: a re-base), that the
  // parent's chain does not pass through the archive, that it is no deeper than link.depth - 1
  // now, and (`replacing` empty) that no link names the archive as its parent. Errors:
  // kAlreadyExists (the parent's chain reaches the archive: a cycle; or other links are stored
  // against the archive), kNotFound (the parent is no longer a version, its chain grew past
  // link.depth - 1, or the link being replaced changed), database errors.
  Status RecordChainLink(const ChainLink& link, std::string_view replacing = "");
  // Re-base onto the archive's full patch: drops the chain link of `archive_digest` if its
  // parent is still `parent_digest`, in one transaction (lock "chains") that checks that the
  // archive's full patch (the `patches` row from "") is recorded. Errors: kNotFound (no full
  // patch recorded), database errors; OK when the link is already gone or changed.
  Status DropChainLink(std::string_view archive_digest, std::string_view parent_digest);

  // -- lossy deltas (store/metadata_db_deltas.cc) --
  // kNotFound when no delta from -> to with `params` was recorded.
  Result<LossyDeltaRecord> FindLossyDelta(std::string_view from_digest,
                                          std::string_view to_digest, std::string_view params);
  // Records (or replaces) the delta (from, to, params); it counts as used now.
  Status RecordLossyDelta(const LossyDeltaRecord& delta);
  // Marks the delta (from, to, params) used now (eviction is least recently used first).
  Status TouchLossyDelta(std::string_view from_digest, std::string_view to_digest,
                         std::string_view params);
  // While the cached deltas' delta_size sum exceeds `max_bytes`, forgets the least recently
  // used one (never (keep_from, keep_to, keep_params)), in one transaction. Returns the rows
  // forgotten (their blobs may now be unreferenced).
  Result<std::vector<LossyDeltaRecord>> EvictLossyDeltas(uint64_t max_bytes,
                                                         std::string_view keep_from,
                                                         std::string_view keep_to,
                                                         std::string_view keep_params);

  // -- OCI content: blob links, referrers, deletes (store/metadata_db_content.cc) --
  // Links a blob into a repository (idempotent): it becomes readable there. kNotFound when the
  // blob has no row (RecordBlob): a collection removed it after the caller's checks.
  Status LinkBlob(std::string_view repository, std::string_view digest);
  // Is the blob linked into the repository?
  Result<bool> BlobLinked(std::string_view repository, std::string_view digest);
  // Is the blob linked into any repository?
  Result<bool> BlobLinkedAnywhere(std::string_view digest);
  // Unlinks a blob from a repository; false when it was not linked. The bytes stay in the blob
  // store (garbage collection removes them once nothing references them).
  Result<bool> UnlinkBlob(std::string_view repository, std::string_view digest);
  // Manifests of `repository` whose subject is `subject_digest`, ordered by digest. An unknown
  // repository or subject gives an empty list.
  Result<std::vector<ReferrerRecord>> ListReferrers(std::string_view repository,
                                                    std::string_view subject_digest);
  // Removes a tag (the manifest stays); false when there was no such tag.
  Result<bool> DeleteTag(std::string_view repository, std::string_view tag);
  // Removes a manifest, the tags that point at it and the model version it records, in one
  // transaction. kNotFound when the repository has no manifest with this digest.
  Result<ManifestDeletion> DeleteManifest(std::string_view repository, std::string_view digest);

  // -- garbage collection (store/metadata_db_content.cc) --
  // Everything a blob can be referenced from, in one snapshot; links count when created after
  // `young_after` (Unix seconds).
  Result<GcRoots> ReadGcRoots(int64_t young_after);
  // Is the blob referenced now: by a manifest, as a model archive, as a cached patch, value
  // diff, statistics or lossy delta, as a chain link's patch or parent, or by a link created
  // after `young_after`?
  Result<bool> BlobReferenced(std::string_view digest, int64_t young_after);
  // Forgets a cached patch, value diff, statistics or lossy delta (`kind` "patches",
  // "value_diffs", "version_stats" or "lossy_deltas") or a chain link ("archive_chains")
  // whose blob is still `blob_digest` (a row recomputed meanwhile stays). A full patch (from
  // "") of an archive some chain link names as its parent stays, and so does a chain link
  // whose archive is another link's parent (OK either way: BlobReferenced then keeps the blob).
  Status ForgetDerived(std::string_view kind, const GcRoots::Derived& row);
  // Forgets a blob (after its file was removed): its row in `blobs` and its links.
  Status ForgetBlob(std::string_view digest);

  // -- tokens --
  // Creates a token: 32 random bytes as 64 lower-case hex digits. Only its SHA-256 (hex) is
  // stored; the token itself is returned once and never again. `scope` is stored as given
  // (the registry validates it); `expires` in Unix seconds (nullopt = never).
  // Errors: kAlreadyExists when an unrevoked token has this name.
  Result<std::string> CreateToken(std::string_view name,
                                  std::string_view scope = kFullAccessScope,
                                  std::optional<int64_t> expires = std::nullopt);
  // The row of `token` (a 64-hex token, matched by its SHA-256, compared in constant time),
  // whatever its state (check TokenRecord::ActiveAt). kNotFound for unknown or malformed
  // tokens.
  Result<TokenRecord> FindToken(std::string_view token);
  // The row with this id, whatever its state. kNotFound when there is none.
  Result<TokenRecord> GetTokenById(int64_t id);
  // Is `token` one of the stored tokens, unrevoked and unexpired? Malformed tokens are false.
  Result<bool> VerifyToken(std::string_view token);
  // Number of unrevoked tokens with this name (0 or 1).
  Result<int64_t> CountTokens(std::string_view name);
  // Unrevoked tokens (expired ones included), by name.
  Result<std::vector<TokenRecord>> ListTokens();
  // Revokes the unrevoked token named `name` (its row stays, marked). kNotFound when none.
  Status RevokeToken(std::string_view name);

  // -- upload sessions --
  // Records a session of `repository` opened by `owner` ("" = unknown) unless `owner` already
  // has `max_per_owner` open sessions or `repository` has `max_per_repository` (0 = no cap):
  // then kTooLarge naming the cap that was reached, and nothing is recorded. The count and the
  // insert are one step (one transaction holding the lock "uploads"), so concurrent calls, of
  // this process or any other on the database, never exceed a cap. `patch_from` (not empty)
  // records the session as a patch upload against that base archive (UploadRecord::patch_from).
  Status CreateUpload(std::string_view uuid, std::string_view repository,
                      std::string_view owner = "", uint64_t max_per_owner = 0,
                      uint64_t max_per_repository = 0, std::string_view patch_from = "");
  // kNotFound when there is no such session.
  Result<UploadRecord> GetUpload(std::string_view uuid);
  Status DeleteUpload(std::string_view uuid);
  // The uuids of the sessions started at or before `unix_seconds`, oldest first.
  Result<std::vector<std::string>> ListUploadsStartedBy(int64_t unix_seconds);
  // The uuids of the sessions whose last chunk (or start) was at or before `unix_seconds`.
  Result<std::vector<std::string>> ListUploadsIdleSince(int64_t unix_seconds);
  // Records that session `uuid` received a chunk stored as part `part` (a name without ';'; ""
  // records none): its offset moves from `old_size` to `new_size`, in one conditional UPDATE
  // (`... WHERE uuid = ? AND size = old_size`), the per-session lock of every replica: of two
  // chunks sent at the same offset exactly one is recorded. Errors: kNotFound (no such session),
  // kInvalidArgument (the session's offset is no longer `old_size`: the message names it).
  Status AdvanceUpload(std::string_view uuid, uint64_t old_size, uint64_t new_size,
                       std::string_view part);

  // -- replicas: shared settings, job leases, garbage collection's deletions
  //    (store/metadata_db_replicas.cc). Several processes sharing this database agree through
  //    these; times are Unix seconds passed in by the caller (no SQL clock functions). --
  // The value of setting `name`; when it has none, `value` is stored first (INSERT ... ON
  // CONFLICT DO NOTHING, then read back): every caller, in any process, gets the first
  // writer's value.
  Result<std::string> GetOrSetSetting(std::string_view name, std::string_view value);
  // kNotFound when the setting has no value.
  Result<std::string> GetSetting(std::string_view name);

  // Takes the lease of job `key` for `owner` until now + lease_seconds, atomically (one
  // conditional upsert): when there is no row, when the row failed, when its lease expired
  // (lease_expires <= now; a takeover), or when it is done and `redo_done` -> kAcquired
  // (attempts + 1, error and result cleared). Else kHeld (another owner's live lease; the
  // same owner re-acquiring its running job also gets kAcquired) or kDone (result in the row).
  Result<JobAcquisition> TryAcquireJob(std::string_view key, std::string_view owner,
                                       int64_t now, int64_t lease_seconds,
                                       bool redo_done = false);
  // Extends `owner`'s running lease of `key` to now + lease_seconds. kUnavailable when
  // `owner` no longer holds it (its lease expired and another owner took it over).
  Status RenewJobLease(std::string_view key, std::string_view owner, int64_t now,
                       int64_t lease_seconds);
  // Marks `owner`'s running job done with `result`. kUnavailable when `owner` lost the lease
  // (the row is left to its new holder).
  Status FinishJob(std::string_view key, std::string_view owner, std::string_view result,
                   int64_t now);
  // Marks `owner`'s running job failed with `error` (the next TryAcquireJob retries it).
  // kUnavailable when `owner` lost the lease.
  Status FailJob(std::string_view key, std::string_view owner, std::string_view error,
                 int64_t now);
  // kNotFound when the job has no row.
  Result<JobRecord> GetJob(std::string_view key);

  // Raw archive blobs being read (table raw_archive_reads; registry/archive_storage.h), so
  // that no replica drops a raw blob another replica is handing out. Times in Unix
  // milliseconds. Each call is one conditional upsert, atomic against the other.
  // Records that `digest`'s raw blob must stay until at least `until`: true, unless a drop of
  // it is in progress (dropping_until > now): false, nothing recorded (wait for the drop and
  // look again: the blob is then gone).
  Result<bool> MarkRawArchiveServed(std::string_view digest, int64_t now, int64_t until);
  // Before deleting `digest`'s raw blob: when nobody is reading it (served_until <= now) and no
  // other drop is in progress, records the drop until `lease_until` and returns nullopt (go
  // ahead; EndRawArchiveDrop after). Else returns when to try again (the later of the two
  // times), recording nothing.
  Result<std::optional<int64_t>> BeginRawArchiveDrop(std::string_view digest, int64_t now,
                                                     int64_t lease_until);
  // After the drop begun with `lease_until` (done or failed): forgets it, and prunes rows
  // whose times are all before `now`.
  Status EndRawArchiveDrop(std::string_view digest, int64_t lease_until, int64_t now);

  // The SQL value of the current garbage-collection epoch (setting 'gc_epoch', 0 when unset):
  // what a touch writes to blobs.touched.
  static constexpr char kGcEpochSql[] =
      "(SELECT COALESCE(MAX(CAST(value AS BIGINT)), 0) FROM settings WHERE name = 'gc_epoch')";
  // Starts a collection's marking: increments the epoch (in its own committed statement) and
  // returns it. Touches after this call write this epoch or a later one; touches before it
  // wrote an earlier one.
  Result<int64_t> StartGcMark();
  // Notes that a push is about to make `digest` referenced (an upload publishing bytes that
  // may already be stored): sets blobs.touched to the current epoch, so a collection that
  // marked before keeps the blob. No-op when the blob has no row. RecordBlob and LinkBlob
  // touch too.
  Status TouchBlob(std::string_view digest);
  // Garbage collection's delete of one candidate (registry/garbage_collector.h): records
  // (collector, 'deleting') in gc_deletions and commits that; then, in one transaction that
  // holds the blob's row (and, on SQLite, the write lock) until it ends: takes the blob's row
  // out unless it was touched since the collection's StartGcMark() returned `mark` (touched >=
  // mark), checks that nothing references the blob
  // (BlobReferenced with `young_after`), and calls `remove` (which removes the bytes and
  // returns their size; kUnavailable = too young to remove). Outcomes: kDeleted (remove()
  // succeeded; the blob's rows, links and deletion record are gone, *freed = its bytes),
  // kKept / kTooYoung (rolled back; the deletion record is dropped). A failing remove() rolls
  // back too, and the deletion record becomes state 'failed' with the error, which is
  // returned: it stays recorded until a later collection deletes the blob or finds it
  // referenced (ResolveGcDeletion).
  Result<BlobDeletion> DeleteBlobUnlessTouched(std::string_view digest, int64_t young_after,
                                               int64_t mark, std::string_view collector,
                                               int64_t now,
                                               const std::function<Result<uint64_t>()>& remove,
                                               uint64_t* freed);
  // Every recorded deletion ('deleting' left by a collector that died, 'failed'), by digest.
  Result<std::vector<GcDeletionRecord>> ListGcDeletions();
  // Drops the deletion record of `digest` (its blob is gone, or referenced again).
  Status ResolveGcDeletion(std::string_view digest);

 private:
  // What a touch writes, read so that it serializes with StartGcMark: SQLite: kGcEpochSql (one
  // writer at a time already). PostgreSQL, inside the caller's transaction: the 'gc_epoch' row
  // read FOR SHARE (created as '0' when missing), as a number literal: a StartGcMark that
  // started first is waited for and its epoch read; one that starts later waits for the
  // touch's commit. (A plain subquery under READ COMMITTED reads the snapshot its statement
  // started with, and could write the epoch a collection had just left.)
  Result<std::string> GcEpochForTouchLocked(sql::Database& db_);
  explicit MetadataDb(std::unique_ptr<sql::Pool> pool) : pool_(std::move(pool)) {}
  // A leased connection (see "Thread safety" above).
  using Conn = sql::Pool::Lease;
  Result<Conn> Acquire() { return pool_->Acquire(); }
  // Runs `attempt` (a whole transaction) again, up to 3 times in all, while it fails with
  // kUnavailable on PostgreSQL (a serialization failure or deadlock rolled it back) or, with
  // `unique_races`, kAlreadyExists (SQLSTATE 23505: a concurrent transaction inserted the same
  // key first; the next attempt sees its committed row, which its upserts take as SQLite's
  // serialized writers would). A unique violation left after the last attempt is returned as
  // kUnavailable (a retryable 503, not a 403). Call it holding a lease: the attempts run on
  // that connection.
  template <typename T, typename F>
  T Retrying(F attempt, bool unique_races = false) {
    for (int i = 0;; ++i) {
      T r = attempt();
      if (r.ok() || engine() != "postgresql") return r;
      const Code code = StatusOf(r).code();
      const bool unique_race = unique_races && code == Code::kAlreadyExists;
      if (code != Code::kUnavailable && !unique_race) return r;
      if (i == 2) {
        if (unique_race) {
          return T(Unavailable("a concurrent write kept colliding: " + StatusOf(r).message()));
        }
        return r;
      }
    }
  }
  static const Status& StatusOf(const Status& s) { return s; }
  template <typename V>
  static Status StatusOf(const Result<V>& r) { return r.status(); }
  // On the caller's leased connection `db_`. kNotFound when absent.
  Result<int64_t> RepositoryIdLocked(sql::Database& db_, std::string_view repository);
  // BlobReferenced's question on `db_` (inside the caller's transaction, if any).
  Result<bool> BlobReferencedLocked(sql::Database& db_, std::string_view digest,
                                    int64_t young_after);
  Status LinkBlobLocked(sql::Database& db_, std::string_view repository, std::string_view digest);
  Status PutManifestLocked(sql::Database& db_, const ManifestPut& put);
  Status CreateUploadLocked(sql::Database& db_, std::string_view uuid,
                            std::string_view repository, std::string_view owner,
                            uint64_t max_per_owner, uint64_t max_per_repository,
                            std::string_view patch_from);
  Result<ManifestDeletion> DeleteManifestLocked(sql::Database& db_, int64_t repository_id,
                                                std::string_view repository,
                                                std::string_view digest);
  Result<std::vector<LossyDeltaRecord>> EvictLossyDeltasLocked(sql::Database& db_,
                                                               uint64_t max_bytes,
                                                               std::string_view keep_from,
                                                               std::string_view keep_to,
                                                               std::string_view keep_params);
  Result<Page> ListLocked(sql::Database& db_, std::string_view sql_prefix,
                          std::optional<int64_t> repository_id, std::optional<uint64_t> limit,
                          std::string_view last);
  // Leases a connection. The uuids `sql` selects with ?1 = `unix_seconds`.
  Result<std::vector<std::string>> ListUploadUuids(std::string_view sql, int64_t unix_seconds);

  // The connections (one on SQLite). No other member: calls share nothing else.
  std::unique_ptr<sql::Pool> pool_;
};

}  // namespace blz::store

#endif  // BLZ_STORE_METADATA_DB_H_
