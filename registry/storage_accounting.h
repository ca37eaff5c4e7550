// Bytes at rest against the models' own size (issue 27): what GET /v2/_blz/storage
// (registry/storage_handlers.cc) and the blz_storage_model_bytes / blz_storage_at_rest_bytes
// gauges (registry/metrics_handlers.cc) report. docs/registry-api.md ("Bytes at rest") is the
// user-facing description.
//
// Definitions:
// - model bytes of a version: its archive's size (what a full copy costs). A repository's:
//   the sum over its versions. The total's: over the distinct archives (an archive that is a
//   version of several repositories counts once, as a content-addressed store keeps it once).
// - bytes at rest of an archive: the blob that stores it in its stored form (AtRest below):
//   the raw archive blob while it is raw; its full patch once the raw blob was dropped
//   (registry/archive_storage.h). A full patch of an archive that is still raw is a cache (it
//   is not counted, like patches, value diffs and statistics).
// - other bytes: the other blobs a repository's manifests reference (configs, other layers),
//   at their recorded size.
// - at rest = archives at rest + other bytes. Per repository: everything it references,
//   so a blob referenced by two repositories is in both (and in `shared_bytes` of both); the
//   total counts every blob once.
//
// Cost: one ReadStorageInventory (two SQL queries) plus, per distinct archive, one blob-store
// Stat (a stat(2) on the file driver, a HEAD on S3) and, when the raw blob is gone, one
// primary-key lookup of the full patch and one more Stat. Nothing is cached here;
// StorageAccountCache bounds how often /metrics pays it.
#ifndef BLZ_REGISTRY_STORAGE_ACCOUNTING_H_
#define BLZ_REGISTRY_STORAGE_ACCOUNTING_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "store/blob_store.h"
#include "store/metadata_db.h"

namespace blz::registry {

// How an archive is stored.
enum class StoredForm : uint8_t {
  kRaw,        // its own blob (a push not compressed yet, or drop_raw_archives off)
  kFullPatch,  // its verified full patch (table patches, from_digest = "")
  kChain,      // a verified patch against a parent version (table archive_chains): the link's
               // patch only; the parent is counted as itself
  kMissing,    // neither is stored (lost, or quarantined): 0 bytes at rest
};
// "raw", "full_patch", "chain", "missing": the names the endpoint and the docs use.
std::string_view StoredFormName(StoredForm form);

// One archive at rest.
struct ArchiveAtRest {
  std::string archive_digest;
  StoredForm form = StoredForm::kMissing;
  uint64_t bytes = 0;     // the bytes of `blob`; 0 when missing
  std::string blob;       // the blob that stores it ("" when missing); the archive's own
                          // digest when raw
  std::string parent;     // kChain: the archive the patch applies to
  uint64_t depth = 0;     // kChain: links to apply to rebuild it (1: the parent is stored whole)
};

// THE per-archive computation (every figure of this file goes through it; a new stored form
// is added here only): the raw blob when the store has it (Stat), else its chain link's patch
// (MetadataDb::FindChainLink) when that blob is present, else the full patch recorded in `db`
// when its blob is present, else kMissing. A chained archive's full patch, kept as a cache until
// the next garbage collection forgets it, is not counted. Errors: the blob store's and the DB's other
// than kNotFound (kIOError, kUnavailable).
Result<ArchiveAtRest> AtRest(const store::BlobStore& blobs, store::MetadataDb& db,
                             const std::string& archive_digest);

// Figures of a set of archives and blobs (a repository, or the total).
struct StorageFigures {
  uint64_t model_bytes = 0;            // archives' own sizes
  uint64_t archive_at_rest_bytes = 0;  // their stored forms
  uint64_t other_bytes = 0;            // configs and other layers
  uint64_t versions = 0;               // version rows (total: of every repository counted)
  uint64_t archives = 0;               // distinct archives
  uint64_t blobs = 0;                  // distinct blobs at rest (archive forms + other)
  std::map<std::string, uint64_t> forms;  // StoredFormName -> archives in that form

  uint64_t at_rest_bytes() const { return archive_at_rest_bytes + other_bytes; }
  // at_rest_bytes / model_bytes; nullopt when model_bytes is 0.
  std::optional<double> ratio() const;
};

struct RepositoryStorage {
  std::string name;
  StorageFigures figures;
  // Bytes at rest of the blobs this repository references that another accounted repository
  // references too (each such blob is in the figures of every one of them).
  uint64_t shared_bytes = 0;
  struct Version {
    store::VersionRecord version;
    ArchiveAtRest at_rest;
  };
  std::vector<Version> archives;  // oldest first
};

struct StorageAccount {
  std::vector<RepositoryStorage> repositories;  // by name
  StorageFigures total;  // over `repositories`, every archive and blob once
};

// Accounts the repositories `include` accepts (every one when it is empty), or only
// `only_repository` when not empty: one ReadStorageInventory, then AtRest once per distinct
// archive. Shared blobs are those of two or more accounted repositories (so a caller who sees
// only some repositories learns nothing about the others). Errors: those of the DB and of
// AtRest.
Result<StorageAccount> AccountStorage(const store::BlobStore& blobs, store::MetadataDb& db,
                                      const std::function<bool(std::string_view)>& include = {},
                                      std::string_view only_repository = {});

// How long /metrics reuses an account of every repository.
inline constexpr std::chrono::seconds kStorageAccountTtl{30};

// The last AccountStorage of every repository, reused for `ttl`, so that scrapes every few
// seconds do not stat every archive each time. Thread-safe; one computation at a time (a
// concurrent Get waits for it).
class StorageAccountCache {
 public:
  explicit StorageAccountCache(std::chrono::milliseconds ttl = kStorageAccountTtl) : ttl_(ttl) {}
  Result<std::shared_ptr<const StorageAccount>> Get(const store::BlobStore& blobs,
                                                    store::MetadataDb& db);

 private:
  using Clock = std::chrono::steady_clock;
  std::chrono::milliseconds ttl_;
  std::mutex mu_;
  std::shared_ptr<const StorageAccount> last_;
  Clock::time_point computed_;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_STORAGE_ACCOUNTING_H_
