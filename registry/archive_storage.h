// How the registry stores model archives: as full patches (patcher/patch.h CreateFullPatch:
// every tensor coded without a base, byte planes + zstd), not as raw bytes. Specified in
// docs/registry-api.md ("Storage"); summary:
//
// - A pushed archive is first stored raw (the upload is verified by SHA-256 as every blob is).
//   After its manifest PUT, a background thread computes the archive's full patch, verifies it
//   (decodes it completely: it must rebuild exactly the archive's SHA-256), publishes it as a
//   blob and records it in the metadata DB (table `patches`, from_digest = "": a row there
//   always means "verified"). Only then is the raw blob deleted. The full patch is also what
//   GET /v2/<name>/blz/patch?to=<digest> (no from) serves; a request that comes first computes
//   it the same way.
// - Whoever needs the raw bytes of an archive whose raw blob was dropped (blob GET/Range, patch
//   and value-diff computation, structural hashes) gets a copy rebuilt from the full patch into
//   a bounded cache, <data>/cache/sha256/<hex>, written atomically and published only after its
//   SHA-256 matched. HEAD needs no rebuild (the size is in the full patch's header).
// - Crash safety (kill -9 at any point): the raw blob is deleted only after the full patch is
//   durable (fsynced, renamed, recorded in the DB) and verified; temporary files live in
//   <data>/uploads (removed at start) or are the cache's "<hex>.tmp-*" files (removed at start);
//   archives still raw at start are queued again.
// - Files handed out (a path returned by File()) are not deleted for `grace`: the HTTP session
//   opens a response's file after the handler returns. Once open, deletion does not matter.
//   Across replicas (issue 25): a raw blob handed out, streamed or redirected to on any replica
//   sharing the metadata DB is recorded there (MetadataDb::MarkRawArchiveServed, table
//   raw_archive_reads, kept for 2 * grace and renewed after grace), and DropRaw records its
//   delete there in the same conditional statement that checks for reads
//   (BeginRawArchiveDrop): a read that comes first keeps the blob; one that comes during the
//   delete waits for it and then finds the blob gone. Replicas' clocks are assumed to agree
//   to well within `grace`.
// - Integrity of what is stored (docs/registry-api.md, "Storage integrity"): files handed out
//   (File, GetFullPatch, CheckStoredBlob) of at most options.verify_on_read_bytes are re-hashed
//   before they are served, once per process and file version (size, mtime, inode); a stored
//   blob that no longer matches its digest is moved to <data>/quarantine/ (BlobStore::Quarantine)
//   and the request fails (kCorruption) instead of serving wrong bytes; a damaged cached copy is
//   deleted and rebuilt. A rebuild that fails because the full patch is damaged quarantines the
//   full patch. Larger files are left to ScrubStorage (`blz serve --verify-storage`) and to the
//   checks of whoever applies them.
// - Chains (registry/archive_chains.cc; docs/storage.md, "Chains"): an archive may instead be
//   stored as a verified patch from a parent archive (table archive_chains), when that is
//   clearly smaller than its full patch and the chain stays short (options.max_chain_depth)
//   and cheap to rebuild; OpenReader reads it in place (decoding a range link by link), File
//   writes it into the cache in one pass of that reader. The full
//   patch of a chained archive is forgotten once its raw blob is dropped.
// - VerifyArchive checks an archive's data completely (formats::BlzArchive::Verify) before the
//   registry accepts a manifest that references it; the result is remembered per digest.
//
// Thread safety: every method may be called from any thread. One computation per archive at a
// time (a mutex per digest); different archives proceed in parallel.
#ifndef BLZ_REGISTRY_ARCHIVE_STORAGE_H_
#define BLZ_REGISTRY_ARCHIVE_STORAGE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/file_util.h"
#include "core/status.h"
#include "patcher/archive_reader.h"
#include "registry/background_jobs.h"
#include "registry/keyed_mutex.h"
#include "store/blob_store.h"
#include "store/metadata_db.h"

namespace blz::registry {

// The patcher operations archive storage needs; injected (like PatchFunction) so tests can
// substitute them. Empty functions disable full patches and compression.
struct FullPatchFunctions {
  // Writes the full patch of the .blz archive at `archive_path`, whose verified digest is
  // `archive_digest` (recorded, not recomputed), to `out_path` (which must not exist). Stops
  // early with a non-OK status once *cancel becomes true.
  std::function<Status(const std::string& archive_path, const std::string& archive_digest,
                       const std::string& out_path, const std::atomic<bool>* cancel)>
      create;
  // Decodes the full patch at `patch_path` completely, writing nothing; OK only if it rebuilds
  // exactly the archive at `archive_path`, whose verified digest is `archive_digest`
  // ("sha256:<hex>"; the patch must name it).
  std::function<Status(const std::string& patch_path, const std::string& archive_path,
                       const std::string& archive_digest)>
      verify;
  // Rebuilds the archive from the full patch at `patch_path` into `out_path` (must not exist),
  // atomically, checking before it appears that its SHA-256 is `archive_digest`.
  std::function<Status(const std::string& patch_path, const std::string& archive_digest,
                       const std::string& out_path)>
      rebuild;
  // The size in bytes of the archive the (full or chain) patch at `patch_path` rebuilds.
  std::function<Result<uint64_t>(const std::string& patch_path)> archive_size;

  // Chains (docs/storage.md, "Chains"); both empty = no chains. (A chain is read through
  // patcher::PatchReader, ArchiveStorage::OpenReader.) The parent comes as a reader
  // (ArchiveStorage::OpenParent: its file in the cache, or its stored form read in place).
  // Writes the patch from the archive `base` reads to the archive at `target_path` (digest
  // `target_digest`) to `out_path` (must not exist); stops early once *cancel.
  std::function<Status(std::shared_ptr<const patcher::ArchiveReader> base,
                       const std::string& target_path, const std::string& target_digest,
                       const std::string& out_path, const std::atomic<bool>* cancel)>
      diff;
  // Decodes the patch at `patch_path` against `base` completely, writing nothing; OK only if
  // it is a patch from base->archive_digest() that rebuilds exactly `target_digest`: compared
  // byte for byte with the verified archive at `target_path` when one is given, else hashed.
  std::function<Status(std::shared_ptr<const patcher::ArchiveReader> base,
                       const std::string& patch_path, const std::string& target_digest,
                       const std::string& target_path)>
      verify_patch;

  bool complete() const { return create && verify && rebuild && archive_size; }
  bool chains() const { return complete() && diff && verify_patch; }
};

// blz::patcher's implementation (CreateFullPatch, VerifyPatchAgainst, ApplyFullPatch,
// ReadPatchInfo; CreatePatchFromReaders and PatchReader + VerifyReader for chains);
// defined in registry/patch_function.cc.
FullPatchFunctions PatcherFullPatchFunctions();

struct ArchiveStorageOptions {
  // Replace each raw archive blob by its verified full patch. When false, full patches are
  // still computed (and cached) but raw archives are kept.
  bool drop_raw_archives = true;
  // Compress archives in a background thread after their manifest PUT (and, at start, those
  // still raw). When false, only GetFullPatch / Compress (and the full-patch endpoint) do.
  bool background = true;
  // Soft bound on the bytes of rebuilt archives kept in <data>/cache (files within `grace` of
  // their last use are kept even over the bound).
  uint64_t cache_bytes = 8ull << 30;
  // How long a file handed out by File() stays on disk at least (see the file comment).
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  // Stored files (raw blobs, full patches, patches, cached archives) of at most this many bytes
  // are re-hashed before they are served (once per process and file version); larger ones are
  // checked by ScrubStorage only. 0 disables the check.
  uint64_t verify_on_read_bytes = 64ull << 20;
  // Receives one line per archive compressed (and per failure); may be empty.
  std::function<void(const std::string&)> log;
  // Full patches are computed once across the replicas of the metadata DB (job key
  // "fullpatch:<digest>", registry/background_jobs.h SharedJobs); chain links and re-bases
  // too ("chain:<digest>", "rebase:<digest>").
  LeaseOptions job_leases;
  // Chains (docs/storage.md, "Chains"; `blz serve --max-chain-depth`): an archive may be
  // stored as a verified patch from a parent archive when that patch is smaller than
  // chain_max_fraction of its full patch, the chain has at most max_chain_depth links (0 = no
  // chains) and rebuilding it reads at most chain_rebuild_factor times the archive's size of
  // stored bytes (the root's stored form plus every link). Otherwise the full patch stays.
  uint32_t max_chain_depth = 4;
  double chain_max_fraction = 0.8;
  double chain_rebuild_factor = 4.0;
  // Parents tried per archive (each costs one diff and one verification), best ranked first.
  size_t chain_candidates = 2;
};

// Counters since the storage was opened, and the cache's state.
struct StorageStatus {
  uint64_t pending = 0;     // archives queued (or postponed) for compression, or in progress
  std::string compressing;  // the archive being compressed now ("" when idle)
  uint64_t compressed = 0;  // raw archive blobs replaced by their full patch
  uint64_t failed = 0;      // compressions that failed (the raw blob was kept)
  uint64_t full_patches_computed = 0;
  // archives rebuilt into the cache: from their full patch by File(), or copied by a whole
  // blob GET that streamed them from their stored form (CacheCopy)
  uint64_t rebuilds = 0;
  uint64_t cache_bytes = 0;
  uint64_t cache_entries = 0;
  uint64_t cache_limit = 0;
  uint64_t quarantined = 0;  // stored blobs found damaged on read and moved to quarantine
  uint64_t chained = 0;      // archives stored as a chain link by this process
  uint64_t rebased = 0;      // chain links re-based (new parent or full patch)
  uint64_t chain_rebuilds = 0;  // archives rebuilt from their chain into the cache by File()
  uint64_t chain_patches_reused = 0;  // links that reused a recorded (pushed) patch
};

// What ArchiveStorage::VerifyChains found.
struct ChainScrubReport {
  uint64_t links = 0;                // chain links checked
  uint64_t verified = 0;             // rebuilt exactly (every link up to its root)
  std::vector<std::string> broken;   // "<archive digest>: <why>"
};

// What ScrubStorage found.
struct StorageScrubReport {
  store::ScrubReport blobs;         // <data>/blobs (damaged blobs: moved to <data>/quarantine)
  uint64_t cache_checked = 0;       // rebuilt archives in <data>/cache re-hashed
  uint64_t cache_bytes = 0;         // their bytes
  std::vector<std::string> cache_removed;  // digests of damaged cached archives (deleted)
};

// `blz serve --verify-storage`: re-hashes every blob of the data directory
// (store::BlobStore::Scrub: each damaged one is moved to <data>/quarantine/, so later requests
// answer 404 BLOB_UNKNOWN, or recompute it when it was a computed patch) and every archive in
// <data>/cache (a damaged one is deleted: it is rebuilt from its full patch on demand). Run
// before the registry opens the directory. `log` (may be empty) gets a line per finding.
// `storage_url`: the blob store (store/open_blob_store.h; "" = the data directory's).
// Errors: kIOError (a directory cannot be listed), those of store::OpenBlobStore.
Result<StorageScrubReport> ScrubStorage(const std::string& data_dir,
                                        const std::function<void(const std::string&)>& log,
                                        std::string_view storage_url = {});

class ArchiveStorage {
 public:
  // Creates <data_dir>/cache/sha256 when missing, removes temporary files left there and
  // indexes the cached archives. `blobs` and `db` must outlive the storage. Starts the
  // background thread when options.background and `functions` are complete.
  static Result<std::unique_ptr<ArchiveStorage>> Open(store::BlobStore* blobs,
                                                      store::MetadataDb* db,
                                                      const std::string& data_dir,
                                                      FullPatchFunctions functions,
                                                      ArchiveStorageOptions options);
  // Stops the background thread, cancelling a compression in progress (nothing is lost: the
  // archive is still raw and is queued again at the next start).
  ~ArchiveStorage();
  ArchiveStorage(const ArchiveStorage&) = delete;
  ArchiveStorage& operator=(const ArchiveStorage&) = delete;

  // Can this server compute full patches (are the functions complete)?
  bool enabled() const { return functions_.complete(); }

  // A blob as clients see it: a stored blob, or an archive whose raw blob was dropped (its
  // size from the full patch's header; `path` is the cached copy, or "" when there is none).
  // Errors: kInvalidArgument (malformed digest), kNotFound, kIOError.
  Result<store::BlobInfo> Stat(std::string_view digest);

  // A file holding the blob's exact bytes: the stored blob, or the cached copy of a dropped
  // archive (rebuilt from its full patch now if needed; verified before it appears). The path
  // stays valid for at least options.grace. Errors: as Stat; kCorruption / kDigestMismatch
  // when the full patch does not rebuild the archive.
  Result<store::BlobInfo> File(std::string_view digest);

  // File() without the rebuild: the stored blob or an intact cached copy (marked as handed out,
  // as File), or nullopt when the archive is stored only as a patch (read it in place through
  // ReadForms, patcher/patch_reader.h). Errors as File, never a rebuild's.
  Result<std::optional<store::BlobInfo>> FileIfStored(std::string_view digest);

  // A copy of an archive written into the cache by a reader that produces its bytes in order
  // anyway (a whole blob GET streamed from its stored form, registry/blob_handlers.cc), so
  // the next whole read is served from the file. Append the bytes in order; Publish once they
  // were checked to hash to the digest (then it is renamed into place, fsynced, and indexed as
  // File's copies are). Destroyed unpublished (a client gone, a failed check), it is removed.
  // Used by one thread at a time.
  class CacheCopy {
   public:
    ~CacheCopy();
    CacheCopy(const CacheCopy&) = delete;
    CacheCopy& operator=(const CacheCopy&) = delete;
    // Errors: kIOError (the write; the copy is then given up, the read goes on without).
    Status Append(ByteSpan bytes);
    // Errors: kIOError, kInvalidArgument (not every byte was appended). A copy that File()
    // published meanwhile wins; this one is then dropped (OK).
    Status Publish();

   private:
    friend class ArchiveStorage;
    CacheCopy(ArchiveStorage* storage, std::string digest, uint64_t size, AtomicFile file)
        : storage_(storage), digest_(std::move(digest)), size_(size), file_(std::move(file)) {}
    ArchiveStorage* storage_;
    std::string digest_;
    uint64_t size_;
    AtomicFile file_;
    bool done_ = false;
  };
  // After a read of `digest` through OpenReader failed with kCorruption: re-hashes every
  // patch of its stored forms (whatever its size) and quarantines a damaged one, as File()'s
  // rebuild does. Returns the quarantine's kCorruption status, or OK when every blob is intact
  // (the damage was elsewhere). Hashes up to the chain's stored bytes: call it only on errors.
  Status QuarantineDamagedForms(const std::string& digest);
  // A cache copy of the archive `digest` of `size` bytes, or null when there is no point or no
  // room: the archive is cached already or being copied by another reader, the cache is
  // disabled (cache_bytes 0) or smaller than the archive, or the file cannot be created.
  std::unique_ptr<CacheCopy> StartCacheCopy(const std::string& digest, uint64_t size);

  // One stored form of an archive, as ReadForms finds it.
  struct ReadForm {
    enum class Kind { kFile, kFullPatch, kLink };
    std::string digest;  // the archive's
    Kind kind = Kind::kFile;
    // kFile: the archive file (raw blob or intact cached copy, as FileIfStored); kFullPatch:
    // its full patch; kLink: its chain link's patch, from the archive `parent_digest`.
    store::BlobInfo blob;
    std::string parent_digest;  // kLink only
  };
  // How to read the archive `digest` in place, without rebuilding anything (the Hub and Ollama
  // file reads, registry/hub/version_files.h): its stored form, then, while that is a chain
  // link, its parent's, down to the chain's root (an archive file or a full patch); [0] is the
  // archive's own. At each level an archive file is preferred, then a full patch, then a link.
  // Every blob named passed CheckStoredBlob (a damaged one is quarantined: kCorruption); files
  // are marked as handed out (grace). Errors: kUnsupported (no full patches on this server),
  // kNotFound (an archive of the chain is stored in no form), kCorruption (a damaged blob; a
  // chain longer than 64 links), the metadata DB's and the store's.
  Result<std::vector<ReadForm>> ReadForms(const std::string& digest);
  // A reader of the archive as stored (ReadForms, each form opened: an archive file, a full
  // patch, or a chain link over its parent's reader, down to the chain's root); nothing is
  // decoded beyond the patches' headers and prefixes. Errors: ReadForms',
  // patcher::PatchReader::Open's (naming blobs, never server paths), kCorruption (a form that
  // rebuilds another archive than the metadata DB says).
  Result<std::shared_ptr<const patcher::ArchiveReader>> OpenReader(const std::string& digest);
  // OpenReader of each of `digests`, in order, sharing what their chains share: a stored form
  // on two chains (two siblings' common parent) is opened once, and a full patch or link read
  // by more than one of them keeps its last kSharedChunks decoded chunks for the others
  // (patcher::PatchReader::Open's shared_chunks), so that a patch between siblings decodes
  // their parent's chunks once rather than once per side. Errors: OpenReader's.
  static constexpr size_t kSharedChunks = 8;  // 32 MiB at most per shared patch
  Result<std::vector<std::shared_ptr<const patcher::ArchiveReader>>> OpenReaders(
      const std::vector<std::string>& digests);
  // `s` (an error of a read through OpenReader(digest)) with the server paths of the archive's
  // stored forms replaced by their names ("chain link sha256:... of archive sha256:..."), for a
  // message a client may see. `s` as it is when the forms cannot be listed.
  Status NameForms(const Status& s, const std::string& digest);

  // Records that `digest` is being read straight from the blob store (`blz serve --redirect`,
  // a streamed blob GET): its raw blob is not dropped for options.grace, by any replica, as
  // after File. Waits while a drop of it is in progress. Errors: the metadata DB's;
  // kUnavailable when another replica's drop does not end within its lease.
  [[nodiscard]] Status MarkServed(std::string_view digest);

  struct FullPatch {
    store::BlobInfo blob;  // the full patch blob
    bool hit = false;      // it existed already
  };
  // The verified full patch of the archive `archive_digest`, computed (create, verify, publish,
  // record) when missing. Does not drop the raw blob. A stored full patch found damaged
  // (CheckStoredBlob) is quarantined and computed again when the raw archive is still stored.
  // Errors: kUnsupported (disabled), kNotFound (neither the raw archive nor its full patch is
  // stored), kCorruption (the full patch was damaged and cannot be computed again), the
  // patcher's errors (the archive is not a valid .blz, verification failed), kIOError.
  Result<FullPatch> GetFullPatch(const std::string& archive_digest);

  // Verify-on-read for a stored blob about to be served (see the file comment): OK when it is
  // larger than options.verify_on_read_bytes, or was checked already in this version, or
  // hashes to blob.digest now. Otherwise the blob is quarantined and the result is kCorruption
  // ("blob <digest> is damaged on the server's disk ..."; no server paths). Errors also:
  // kNotFound (the file vanished), kIOError.
  Status CheckStoredBlob(const store::BlobInfo& blob);

  // Checks the data of the archive `archive_digest` completely (formats::BlzArchive::Verify:
  // every tensor's xxh3-64 and SHA-256, every file's SHA-256, the stored file headers) on its
  // stored bytes (File). Once an archive passed, later calls return OK at once (remembered for
  // the process's lifetime). Errors: kCorruption (and the other codes of BlzArchive::Open /
  // Verify) naming "archive <digest>", the tensor and the byte offset; those of File.
  Status VerifyArchive(const std::string& archive_digest);

  // Queues `archive_digest` for background compression (no-op without the background thread).
  void Schedule(const std::string& archive_digest);
  // Queues the archives of every version whose raw blob is still stored (at start), and,
  // when chains are on, those stored as patches whose large tensors are not listed in the
  // metadata DB (archives compressed before migration 0014: RecordStoredTensors, after the
  // compressions, so chain storage finds them as parents by identical tensors).
  Status ScheduleAll();
  // Lists the tensors of at least 64 KiB of the archive `digest` in the metadata DB
  // (archive_tensors), read from the header of its stored form (OpenReader: nothing else is
  // decoded). No-op when they are listed already. Errors: OpenReader's, the metadata DB's.
  Status RecordStoredTensors(const std::string& digest);
  // Compresses now: GetFullPatch, then (options.drop_raw_archives) deletes the raw blob after
  // re-checking the full patch blob's SHA-256. If the raw blob was handed out within `grace`,
  // waits until the grace has passed. OK when there is nothing to do.
  Status Compress(const std::string& archive_digest);
  // Blocks until the background queue is empty and nothing is being compressed (tests).
  void WaitIdle();

  // -- chains (registry/archive_chains.cc; docs/storage.md, "Chains") --
  // Can this server store chains (functions and options)?
  bool chains_enabled() const { return functions_.chains() && options_.max_chain_depth > 0; }
  // Re-bases every chain link whose archive is still referenced (a version, or a blob of a
  // manifest) but whose parent is not: onto another parent (never deeper than before) or onto
  // its full patch; the new form is verified, published and recorded (the link switched in one
  // transaction) before the old parent becomes collectable. Run before garbage collection
  // (Registry::CollectGarbage). One re-base per archive across replicas ("rebase:<digest>").
  // Failures are logged and counted in *failed (the link stays; GC keeps its parent).
  Status RebaseOrphans(uint64_t* rebased = nullptr, uint64_t* failed = nullptr);
  // `blz serve --verify-storage`: rebuilds every chained archive from its chain (through the
  // cache: parents are rebuilt as File does) and decodes its link against it, writing nothing.
  // `log` (may be empty) gets a line per broken chain.
  Result<ChainScrubReport> VerifyChains(const std::function<void(const std::string&)>& log);

  StorageStatus status();

 private:
  ArchiveStorage(store::BlobStore* blobs, store::MetadataDb* db, std::string cache_dir,
                 FullPatchFunctions functions, ArchiveStorageOptions options);
  using Clock = std::chrono::steady_clock;

  // The recorded, present full patch of `digest`. kNotFound when there is none.
  Result<store::BlobInfo> FindFullPatch(const std::string& digest);
  std::string CachePath(const std::string& digest) const;
  // Records that the raw blob of `d` is being handed out (see the file comment): in served_,
  // and in the metadata DB unless this process did so less than `grace` ago. Waits for a drop
  // in progress here (dropping_) or on another replica. Errors: the DB's; kUnavailable.
  Status HoldRaw(const std::string& d);
  // Deletes the raw blob unless it was served within `grace` (here, or on any replica: the
  // metadata DB's record); then *retry_at is set and nothing is done. The recorded full patch
  // (or chain link) is checked again first, always (CheckStillIntact): the disk may have
  // damaged it since it was verified, and the raw archive is not deleted on the strength of a
  // damaged copy.
  Status DropRaw(const std::string& digest, const store::BlobInfo& full_patch,
                 std::optional<Clock::time_point>* retry_at);
  // Whether the stored copy of `blob` (a full patch or chain link about to be the only copy of
  // an archive) still holds the bytes it was published with. A full patch this process made
  // and published on a local store (fresh_sums_) is checked by size and the xxh3-64 taken in
  // the read that took its SHA-256: damage is what is looked for, and that is a tenth of a
  // SHA-256 pass. Anything else, and every s3 blob, is hashed again (BlobStore::Verify).
  // Errors: kDigestMismatch (damaged), kNotFound, kIOError.
  Status CheckStillIntact(const store::BlobInfo& blob);
  // When `digest`'s raw blob was handed out here less than `grace` ago: the time that grace
  // ends. ServedUntilLocked: the caller holds mu_.
  std::optional<Clock::time_point> ServedUntil(const std::string& digest) const;
  std::optional<Clock::time_point> ServedUntilLocked(const std::string& digest) const;
  // Compresses once (GetFullPatch + DropRaw); *retry_at as DropRaw.
  Status CompressOnce(const std::string& digest, std::optional<Clock::time_point>* retry_at);
  // Removes least recently used cache entries past their grace until under the bound.
  // REQUIRES: mu_ held.
  void EvictLocked(Clock::time_point now);
  // The intact cached copy of `d` (marked used), or nullopt when none is indexed or it was
  // damaged: then it is deleted, under the "cache:<d>" lock (taken unless `have_lock`), so a
  // copy File() is writing is never the one deleted.
  std::optional<store::BlobInfo> CachedCopy(const std::string& d, bool have_lock);
  // Deletes the cached copy of `d` found damaged (`intact`: IntactOnRead's answer) and
  // forgets it.
  void DropDamagedCopy(const std::string& d, const Result<bool>& intact);
  // Indexes the copy of `digest` (`size` bytes) just renamed into the cache (once: a second
  // call for the same copy changes nothing) and evicts past the bound. REQUIRES: mu_ held.
  void IndexCachedLocked(const std::string& digest, uint64_t size, Clock::time_point now);
  void Run();  // the background thread
  // Chains (registry/archive_chains.cc). What TryChain may do.
  struct ChainRequest {
    uint64_t max_depth = 0;  // links in the new chain at most
    std::string exclude;     // never this parent ("" = none)
    std::string replacing;   // as MetadataDb::RecordChainLink ("" = the archive has no link)
    std::string only;        // only this parent ("" = rank every candidate)
  };
  // Tries to store `digest` (its file `archive_path`) as a chain link: candidates ranked by
  // the link size expected from the tensors they hold identically (table archive_tensors) and
  // their structure, then like pull bases, within `request`. *stored: whether a link was
  // recorded. Errors: the metadata DB's (a candidate that fails is skipped and logged).
  Status TryChain(const std::string& digest, const std::string& archive_path,
                  uint64_t full_patch_size, const ChainRequest& request, bool* stored);
  // After the archive `parent` was stored (CompressOnce): the archives stored whole (a full
  // patch: no raw blob, no link, nobody stored against them) that hold at least
  // 1 - chain_max_fraction of their tensor bytes identically in it are tried as links from it
  // (TryChain with request.only = parent), so that a model built from two others (a vision
  // tower and a language model pushed apart) leaves neither's tensors stored twice. Failures
  // are logged; nothing is lost (a link is recorded only verified, the full patch forgotten
  // only after).
  void ChainSharersOnto(const std::string& parent);
  // Is `digest` stored as a chain link (the check of a "chain:<digest>" job)?
  Result<bool> IsChained(const std::string& digest);
  // A chain parent candidate for TryChain's diff and verification. One that fits in a quarter
  // of the cache is rebuilt into it once (File), so the next versions of a series are diffed
  // against that file without decoding it again; a larger one would push the others out of
  // the cache (or not fit) and is read as stored (OpenReader: decoded twice, diff and
  // verification, but nothing written). Errors: File's / OpenReader's.
  Result<std::shared_ptr<const patcher::ArchiveReader>> OpenParent(const std::string& digest);
  // Records the tensors of at least 64 KiB of archive `digest` (whose parsed header is
  // `header`) in the metadata DB's archive_tensors. Errors: the metadata DB's.
  Status RecordTensors(const std::string& digest, const formats::ArchiveHeader& header);
  // After the raw blob of a chained archive was dropped: forgets its full patch (no longer its
  // stored form; garbage collection then removes it).
  void ForgetFullPatchOfChained(const std::string& digest);
  // Rebuilds `digest` from its chain (OpenReader) into `out_path` (File's cache path) in one
  // pass (patcher::WriteArchive). kNotFound when it has no stored form.
  Status RebuildFromChain(const std::string& digest, const std::string& out_path);
  // Re-hashes the patches among `forms` and quarantines the first damaged one (its
  // kCorruption status); OK when all are intact.
  Status QuarantineForms(const std::vector<ReadForm>& forms);
  // OpenReader of forms found already. With `opened` (OpenReaders): a form whose blob is a key
  // is that reader; each form opened is added, and a patch whose blob `uses` counts more than
  // once keeps chunks for its other readers.
  Result<std::shared_ptr<const patcher::ArchiveReader>> OpenForms(
      const std::vector<ReadForm>& forms, const std::map<std::string, int>* uses = nullptr,
      std::map<std::string, std::shared_ptr<const patcher::ArchiveReader>>* opened = nullptr);
  // "chain link <patch> of archive <digest> (from <parent>)", and so on.
  static std::string FormName(const ReadForm& form);
  // Re-bases one link (RebaseOrphans).
  Status Rebase(const store::ChainLink& link);
  // Is the file at `path` (named `digest`, `size` bytes) intact? true also when over the
  // verify-on-read bound; remembered per path and file version.
  // *hashed_inode (may be null) gets the inode of the file hashed (0 when none was).
  Result<bool> IntactOnRead(const std::string& path, const std::string& digest, uint64_t size,
                            uint64_t* hashed_inode = nullptr);
  // Moves a damaged stored blob to quarantine and forgets what was known about it; returns the
  // kCorruption status to report ("<what> ... is damaged ...").
  // `hashed_inode` as for store::BlobStore::Quarantine: a file replaced since is left alone.
  Status QuarantineDamaged(const store::BlobInfo& blob, const std::string& what,
                           uint64_t hashed_inode = 0);
  void Log(const std::string& line) const;

  struct CacheEntry {
    uint64_t size = 0;
    Clock::time_point last_used;
  };

  store::BlobStore* blobs_;
  store::MetadataDb* db_;
  std::string cache_dir_;  // <data>/cache/sha256
  FullPatchFunctions functions_;
  ArchiveStorageOptions options_;
  KeyedMutex locks_;  // "full:<digest>" (full patch, drop), "cache:<digest>" (rebuild)
  std::unique_ptr<SharedJobs> shared_jobs_;  // full patches across replicas
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::map<std::string, Clock::time_point> queue_;  // digest -> not before
  std::string current_;  // being compressed (or its tensors listed) by the thread
  std::set<std::string> unlisted_;  // archives for RecordStoredTensors, when queue_ is empty
  std::unordered_map<std::string, CacheEntry> cache_;
  uint64_t cache_total_ = 0;
  std::unordered_set<std::string> copying_;  // archives a CacheCopy is being written for
  // Raw blobs this process handed out, when it last recorded that in the metadata DB.
  std::unordered_map<std::string, Clock::time_point> served_;
  // Full patches published here, by digest: size and xxh3-64 (CheckStillIntact). Bounded by
  // kMaxFreshSums (cleared when full: a missing entry only means a SHA-256 check).
  struct FreshSum {
    uint64_t size = 0;
    uint64_t xxh3 = 0;
  };
  static constexpr size_t kMaxFreshSums = 4096;
  std::unordered_map<std::string, FreshSum> fresh_sums_;
  // Raw blobs DropRaw decided to delete and is deleting (outside mu_); File waits on
  // dropped_cv_ until they leave.
  std::unordered_set<std::string> dropping_;
  std::condition_variable dropped_cv_;
  std::unordered_map<std::string, uint64_t> sizes_;            // archive sizes from headers
  uint64_t compressed_ = 0, failed_ = 0, computed_ = 0, rebuilds_ = 0, quarantined_ = 0;
  uint64_t chained_ = 0, rebased_ = 0, chain_rebuilds_ = 0, chain_patches_reused_ = 0;
  // Archives whose chain link this process tried already (a retried compression, e.g. after
  // the grace period, does not compute the same patches again).
  std::unordered_set<std::string> chain_tried_;
  struct FileStamp {
    uint64_t size = 0, inode = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  std::unordered_map<std::string, FileStamp> intact_;     // path -> version found intact
  std::unordered_set<std::string> verified_archives_;     // VerifyArchive passed
  std::thread thread_;
};

namespace internal {
// `s` with the server paths of `names` ({path, what it holds}) replaced by what they hold, so
// errors sent to clients do not reveal the data directory (archive_storage.cc,
// archive_chains.cc).
Status ScrubPaths(const Status& s,
                  const std::vector<std::pair<std::string, std::string>>& names);
}  // namespace internal

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_ARCHIVE_STORAGE_H_
