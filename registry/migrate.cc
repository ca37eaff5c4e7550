#include "registry/migrate.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "core/file_lock.h"
#include "core/file_util.h"
#include "registry/server.h"
#include "store/blob_store.h"
#include "store/open_blob_store.h"
#include "store/sql.h"

namespace blz::registry {

const std::vector<std::string> kCopiedTables = {
    "repositories",   "blobs",          "manifests",     "tags",
    "versions",       "patches",        "tokens",        "value_diffs",
    "repository_blobs", "manifest_blobs", "version_stats", "lossy_deltas",
    "settings",       "version_files",  "archive_chains", "archive_tensors"};
const std::vector<std::string> kSkippedTables = {"uploads", "jobs", "gc_deletions",
                                                 "raw_archive_reads", "schema_migrations"};

namespace {

namespace fs = std::filesystem;
using store::sql::Database;
using store::sql::Statement;
using store::sql::Transaction;

constexpr int kRowsPerTransaction = 500;

enum class Kind { kInt, kText, kBlob };

struct Column {
  std::string name;
  Kind kind = Kind::kText;
};

Kind KindOf(std::string type) {
  std::transform(type.begin(), type.end(), type.begin(), ::tolower);
  if (type.find("int") != std::string::npos) return Kind::kInt;
  if (type.find("blob") != std::string::npos || type.find("bytea") != std::string::npos) {
    return Kind::kBlob;
  }
  return Kind::kText;
}

bool IsPostgres(Database& db) { return db.engine() == "postgresql"; }

Result<std::vector<std::string>> ListTables(Database& db) {
  const char* sql =
      IsPostgres(db)
          ? "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema() AND table_type = 'BASE TABLE'"
          : "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'";
  BLZ_ASSIGN_OR_RETURN(Statement st, db.Prepare(sql));
  return st.ColumnTexts();
}

// The table's columns as the catalog lists them (SQLite's implicit rowid is not listed).
Result<std::vector<Column>> ListColumns(Database& db, const std::string& table) {
  const char* sql =
      IsPostgres(db)
          ? "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema "
            "= current_schema() AND table_name = ?1 ORDER BY ordinal_position"
          : "SELECT name, type FROM pragma_table_info(?1) ORDER BY cid";
  BLZ_ASSIGN_OR_RETURN(Statement st, db.Prepare(sql));
  BLZ_RETURN_IF_ERROR(st.Bind(1, std::string_view(table)));
  std::vector<Column> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back({st.ColumnText(0), KindOf(st.ColumnText(1))});
  }
  return out;
}

Result<uint64_t> CountRows(Database& db, const std::string& table) {
  BLZ_ASSIGN_OR_RETURN(Statement st, db.Prepare("SELECT COUNT(*) FROM " + table));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Internal(db.label() + ": COUNT(*) of " + table + " returned no row");
  return static_cast<uint64_t>(st.ColumnInt(0));
}

bool Has(const std::vector<Column>& cols, const std::string& name) {
  return std::any_of(cols.begin(), cols.end(), [&](const Column& c) { return c.name == name; });
}

// The columns to copy: the target's, each of which the source must have, and the other way
// round. "rowid" (SQLite's implicit one, or the identity column PostgreSQL tables that need an
// insertion order have) is copied when both sides have one, so ids and insertion order survive.
Result<std::vector<Column>> CopyColumns(Database& from, Database& to, const std::string& table) {
  BLZ_ASSIGN_OR_RETURN(std::vector<Column> src, ListColumns(from, table));
  BLZ_ASSIGN_OR_RETURN(std::vector<Column> dst, ListColumns(to, table));
  if (src.empty()) return Corruption(from.label() + ": table " + table + " has no columns");
  if (dst.empty()) {
    return Corruption(to.label() + ": has no table " + table + " (schema not migrated?)");
  }
  const bool src_rowid = Has(src, "rowid") || !IsPostgres(from);
  const bool dst_rowid = Has(dst, "rowid") || !IsPostgres(to);
  std::vector<Column> out;
  for (const Column& c : dst) {
    if (c.name == "rowid") continue;
    if (!Has(src, c.name)) {
      return Corruption("table " + table + ": column " + c.name + " of " + to.label() +
                        " is missing in " + from.label() + " (schemas differ)");
    }
    out.push_back(c);
  }
  for (const Column& c : src) {
    if (c.name != "rowid" && !Has(dst, c.name)) {
      return Corruption("table " + table + ": column " + c.name + " of " + from.label() +
                        " is missing in " + to.label() + " (schemas differ)");
    }
  }
  if (src_rowid && dst_rowid) out.push_back({"rowid", Kind::kInt});
  return out;
}

Status CopyTable(Database& from, Database& to, const std::string& table,
                 MigrateTableReport* report) {
  BLZ_ASSIGN_OR_RETURN(std::vector<Column> cols, CopyColumns(from, to, table));
  std::string list;
  std::string params;
  for (size_t i = 0; i < cols.size(); ++i) {
    if (i > 0) {
      list += ", ";
      params += ", ";
    }
    list += cols[i].name;
    params += "?" + std::to_string(i + 1);
  }
  const std::string insert = "INSERT INTO " + table + " (" + list + ")" +
                             (IsPostgres(to) ? " OVERRIDING SYSTEM VALUE" : "") + " VALUES (" +
                             params + ") ON CONFLICT DO NOTHING RETURNING 1";
  BLZ_ASSIGN_OR_RETURN(Statement select, from.Prepare("SELECT " + list + " FROM " + table));
  std::optional<Transaction> tx;
  int in_tx = 0;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    ++report->source_rows;
    if (!tx.has_value()) {
      BLZ_ASSIGN_OR_RETURN(Transaction t, Transaction::Begin(&to));
      tx.emplace(std::move(t));
    }
    BLZ_ASSIGN_OR_RETURN(Statement st, to.Prepare(insert));
    for (size_t i = 0; i < cols.size(); ++i) {
      const int p = static_cast<int>(i + 1);
      const int c = static_cast<int>(i);
      if (select.ColumnIsNull(c)) {
        BLZ_RETURN_IF_ERROR(st.BindNull(p));
      } else if (cols[i].kind == Kind::kInt) {
        BLZ_RETURN_IF_ERROR(st.Bind(p, select.ColumnInt(c)));
      } else if (cols[i].kind == Kind::kBlob) {
        BLZ_RETURN_IF_ERROR(st.BindBlob(p, select.ColumnBlob(c)));
      } else {
        BLZ_RETURN_IF_ERROR(st.Bind(p, std::string_view(select.ColumnText(c))));
      }
    }
    BLZ_ASSIGN_OR_RETURN(bool inserted, st.Step());
    if (inserted) {
      ++report->copied;
      BLZ_ASSIGN_OR_RETURN(bool more, st.Step());
      (void)more;
    } else {
      ++report->present;
    }
    if (++in_tx >= kRowsPerTransaction) {
      BLZ_RETURN_IF_ERROR(tx->Commit());
      tx.reset();
      in_tx = 0;
    }
  }
  if (tx.has_value()) BLZ_RETURN_IF_ERROR(tx->Commit());
  return Status::Ok();
}

// Moves every identity sequence of a PostgreSQL target past the largest id copied, so that the
// next repository, token, version or lossy delta gets a fresh id.
Result<uint64_t> ResetSequences(Database& to) {
  if (!IsPostgres(to)) return uint64_t{0};
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      to.Prepare("SELECT table_name, column_name FROM information_schema.columns WHERE "
                 "table_schema = current_schema() AND is_identity = 'YES'"));
  std::vector<std::pair<std::string, std::string>> identities;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    identities.emplace_back(st.ColumnText(0), st.ColumnText(1));
  }
  for (const auto& [table, column] : identities) {
    BLZ_ASSIGN_OR_RETURN(
        Statement set,
        to.Prepare("SELECT setval(pg_get_serial_sequence('" + table + "', '" + column +
                   "'), COALESCE((SELECT MAX(" + column + ") FROM " + table +
                   "), 0) + 1, false)"));
    BLZ_RETURN_IF_ERROR(set.Run());
  }
  return static_cast<uint64_t>(identities.size());
}

// Every (digest, size) the database references in the blob store.
Result<std::map<std::string, uint64_t>> ReferencedBlobs(Database& db) {
  static const char* const kQueries[] = {
      "SELECT digest, size FROM blobs",
      "SELECT patch_digest, patch_size FROM patches",
      "SELECT diff_digest, diff_size FROM value_diffs",
      "SELECT stats_digest, stats_size FROM version_stats",
      "SELECT delta_digest, delta_size FROM lossy_deltas",
  };
  std::map<std::string, uint64_t> out;
  for (const char* q : kQueries) {
    BLZ_ASSIGN_OR_RETURN(Statement st, db.Prepare(q));
    while (true) {
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      out[st.ColumnText(0)] = static_cast<uint64_t>(st.ColumnInt(1));
    }
  }
  return out;
}

bool IsSqliteUrl(const std::string& url) {
  return url.rfind("sqlite:", 0) == 0 || url.find("://") == std::string::npos;
}

std::string SqlitePath(const std::string& url) {
  return url.rfind("sqlite:", 0) == 0 ? url.substr(7) : url;
}

// "file:DIR" -> DIR; anything else -> "".
std::string FileStoreDir(const std::string& url) {
  if (url.rfind("file:", 0) != 0) return std::string();
  std::string dir = url.substr(5);
  if (dir.rfind("//", 0) == 0) dir = dir.substr(2);
  return dir;
}

std::string HumanBytes(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", double(n) / 1e6);
  return buf;
}

// Copies `from_path` into a fresh temporary file of `to` and publishes it as `digest` (the
// seam re-hashes it; S3 uploads large files in parts).
Result<store::BlobInfo> CopyBlob(const store::BlobStore& from, const store::BlobStore& to,
                                 const std::string& digest) {
  BLZ_ASSIGN_OR_RETURN(store::BlobInfo local, from.LocalFile(digest));
  const std::string temp = to.NewTempPath("migrate");
  std::error_code ec;
  fs::copy_file(local.path, temp, fs::copy_options::overwrite_existing, ec);
  if (ec) {
    fs::remove(temp, ec);
    return IOError("cannot copy blob " + digest + " from " + local.path + " to " + temp + ": " +
                   ec.message());
  }
  Result<store::BlobInfo> published = to.Publish(temp, digest);
  if (!published.ok()) fs::remove(temp, ec);
  return published;
}

}  // namespace

Result<MigrateReport> MigrateRegistry(const MigrateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  if (options.from_metadata.empty() || options.from_storage.empty() ||
      options.to_metadata.empty() || options.to_storage.empty()) {
    return InvalidArgument("migrate needs METADATA_URL,STORAGE_URL for both --from and --to");
  }
  MigrateReport report;

  // 1. Locks and existence of the source.
  std::vector<FileLock> locks;
  const std::string from_dir = FileStoreDir(options.from_storage);
  const std::string to_dir = FileStoreDir(options.to_storage);
  if (!from_dir.empty()) {
    if (!fs::is_directory(from_dir)) {
      return NotFound("source storage " + options.from_storage + ": no such directory");
    }
    BLZ_ASSIGN_OR_RETURN(FileLock lock, LockDataDir(from_dir));
    locks.push_back(std::move(lock));
  }
  if (!to_dir.empty() && to_dir != from_dir) {
    BLZ_ASSIGN_OR_RETURN(FileLock lock, LockDataDir(to_dir));
    locks.push_back(std::move(lock));
  }
  if (IsSqliteUrl(options.from_metadata)) {
    const std::string path = SqlitePath(options.from_metadata);
    if (!fs::exists(path)) {
      return NotFound("source metadata " + options.from_metadata + ": no such file");
    }
    // A SQLite file in a data directory of its own (blobs elsewhere, e.g. on S3): lock that
    // directory too when `blz serve` ever used it.
    std::string dir = fs::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    const bool same = !from_dir.empty() && fs::equivalent(dir, from_dir, ec);
    if (!same && fs::exists(fs::path(dir) / kDataDirLockName, ec)) {
      BLZ_ASSIGN_OR_RETURN(FileLock lock, LockDataDir(dir));
      locks.push_back(std::move(lock));
    }
  }
  if (options.from_metadata == options.to_metadata) {
    return InvalidArgument("--from and --to name the same metadata database");
  }

  // 2. Databases (migrations applied) and stores.
  BLZ_ASSIGN_OR_RETURN(Database from_db, store::sql::OpenDatabase(options.from_metadata));
  BLZ_ASSIGN_OR_RETURN(Database to_db, store::sql::OpenDatabase(options.to_metadata));
  report.to_metadata_label = to_db.label();

  std::string work = options.work_dir;
  bool remove_work = false;
  if (work.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    BLZ_ASSIGN_OR_RETURN(work, MakeTempDir(tmp != nullptr && *tmp ? tmp : "/tmp", "blz-migrate-"));
    remove_work = true;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      if (dir.empty()) return;
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{remove_work ? work : std::string()};
  store::BlobStoreOptions store_options;
  store_options.cache_bytes = 1ull << 30;  // the S3 source's downloads, evicted as we go
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<store::BlobStore> from_store,
                       store::OpenBlobStore(options.from_storage, work + "/from", store_options));
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<store::BlobStore> to_store,
                       store::OpenBlobStore(options.to_storage, work + "/to", store_options));
  BLZ_RETURN_IF_ERROR(from_store->CheckReachable().WithContext("source storage"));
  BLZ_RETURN_IF_ERROR(to_store->CheckReachable().WithContext("target storage"));
  report.from_label = from_db.label() + "," + from_store->Describe();
  report.to_label = to_db.label() + "," + to_store->Describe();

  // Every table of the source must be classified.
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> tables, ListTables(from_db));
  for (const std::string& t : tables) {
    const bool copied =
        std::find(kCopiedTables.begin(), kCopiedTables.end(), t) != kCopiedTables.end();
    const bool skipped =
        std::find(kSkippedTables.begin(), kSkippedTables.end(), t) != kSkippedTables.end();
    if (!copied && !skipped) {
      return Unsupported(from_db.label() + ": table " + t +
                         " is unknown to this blz admin migrate (a newer schema?)");
    }
  }

  // 3. The target must be empty unless resuming.
  if (!options.resume) {
    std::string held;
    for (const std::string& t : kCopiedTables) {
      BLZ_ASSIGN_OR_RETURN(uint64_t n, CountRows(to_db, t));
      if (n > 0) held += (held.empty() ? "" : ", ") + std::to_string(n) + " " + t;
    }
    if (!held.empty()) {
      return AlreadyExists("target " + to_db.label() + " is not empty (it holds " + held +
                           "); refusing to migrate into it. Use --resume to continue a "
                           "migration into this database that stopped");
    }
  }

  // 4. Blobs first, so that no copied row names a blob the target store lacks.
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> digests, from_store->ListDigests());
  std::sort(digests.begin(), digests.end());
  log("blobs: " + std::to_string(digests.size()) + " in " + from_store->Describe());
  std::map<std::string, uint64_t> source_sizes;
  for (const std::string& digest : digests) {
    BLZ_ASSIGN_OR_RETURN(store::BlobInfo src, from_store->Stat(digest));
    source_sizes[digest] = src.size;
    Result<store::BlobInfo> dst = to_store->Stat(digest);
    if (dst.ok() && dst->size == src.size) {
      ++report.blobs_present;
      report.bytes_present += src.size;
      continue;
    }
    if (!dst.ok() && dst.status().code() != Code::kNotFound) {
      return dst.status().WithContext("target storage " + to_store->Describe());
    }
    BLZ_ASSIGN_OR_RETURN(store::BlobInfo copied,
                         CopyBlob(*from_store, *to_store, digest));
    if (copied.size != src.size) {
      return Corruption("blob " + digest + ": " + std::to_string(copied.size) +
                        " bytes in the target, " + std::to_string(src.size) + " in the source");
    }
    ++report.blobs_copied;
    report.bytes_copied += src.size;
    log("blob " + digest + ": copied (" + HumanBytes(src.size) + ")");
  }

  // 5. Rows, table by table, in foreign-key order.
  {
    BLZ_ASSIGN_OR_RETURN(Transaction snapshot,
                         Transaction::Begin(&from_db, store::sql::TransactionMode::kSnapshot));
    for (const std::string& t : kCopiedTables) {
      MigrateTableReport tr;
      tr.table = t;
      BLZ_RETURN_IF_ERROR(CopyTable(from_db, to_db, t, &tr).WithContext("table " + t));
      log("table " + t + ": " + std::to_string(tr.copied) + " rows copied, " +
          std::to_string(tr.present) + " already present");
      report.rows_copied += tr.copied;
      report.rows_present += tr.present;
      report.tables.push_back(std::move(tr));
    }
    BLZ_RETURN_IF_ERROR(snapshot.Commit());
  }
  BLZ_ASSIGN_OR_RETURN(report.sequences_reset, ResetSequences(to_db));

  // 6. Verification.
  for (const MigrateTableReport& tr : report.tables) {
    BLZ_ASSIGN_OR_RETURN(uint64_t n, CountRows(to_db, tr.table));
    if (n != tr.source_rows) {
      return Corruption("verification: table " + tr.table + " has " + std::to_string(n) +
                        " rows in " + to_db.label() + ", " + std::to_string(tr.source_rows) +
                        " in " + from_db.label());
    }
  }
  BLZ_ASSIGN_OR_RETURN(auto referenced, ReferencedBlobs(to_db));
  std::map<std::string, uint64_t> expected = source_sizes;
  for (const auto& [digest, size] : referenced) {
    auto it = source_sizes.find(digest);
    if (it == source_sizes.end()) {
      ++report.absent_in_source;  // e.g. a raw archive kept only as its full patch
      continue;
    }
    if (it->second != size) {
      return Corruption("verification: blob " + digest + " is recorded with " +
                        std::to_string(size) + " bytes but holds " + std::to_string(it->second));
    }
  }
  for (const auto& [digest, size] : expected) {
    Result<store::BlobInfo> dst = to_store->Stat(digest);
    if (!dst.ok()) {
      return Corruption("verification: blob " + digest + " is missing in " +
                        to_store->Describe() + ": " + dst.status().message());
    }
    if (dst->size != size) {
      return Corruption("verification: blob " + digest + " has " + std::to_string(dst->size) +
                        " bytes in " + to_store->Describe() + ", " + std::to_string(size) +
                        " in the source");
    }
    ++report.blobs_verified;
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace blz::registry
