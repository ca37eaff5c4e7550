#include "store/postgres/migrations.h"

#include <string>

#include "store/postgres/connection.h"

namespace blz::store::postgres {
namespace {

constexpr const char kCreateTable[] =
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "  version INTEGER PRIMARY KEY CHECK (version > 0),"
    "  name    TEXT NOT NULL,"
    "  applied BIGINT NOT NULL)";

// Holds the session-level advisory lock; releases it when destroyed. (A connection that dies
// releases its locks with it.)
class AdvisoryLock {
 public:
  static Result<AdvisoryLock> Acquire(Connection* conn, int64_t key) {
    Status s = conn->Exec("SELECT pg_advisory_lock($1)", {Param::Int(key)});
    if (!s.ok()) return s.WithContext("taking the migration lock");
    return AdvisoryLock(conn, key);
  }
  AdvisoryLock(AdvisoryLock&& other) noexcept : conn_(other.conn_), key_(other.key_) {
    other.conn_ = nullptr;
  }
  AdvisoryLock& operator=(AdvisoryLock&&) = delete;
  ~AdvisoryLock() {
    if (conn_ != nullptr) (void)conn_->Exec("SELECT pg_advisory_unlock($1)", {Param::Int(key_)});
  }

 private:
  AdvisoryLock(Connection* conn, int64_t key) : conn_(conn), key_(key) {}
  Connection* conn_;
  int64_t key_;
};

Result<int> CurrentVersion(Connection* conn) {
  BLZ_ASSIGN_OR_RETURN(Rows rows,
                       conn->Query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
  BLZ_ASSIGN_OR_RETURN(int64_t v, rows.Int(0, 0));
  return int(v);
}

}  // namespace

Result<int> SchemaVersion(Connection* conn) {
  BLZ_ASSIGN_OR_RETURN(Rows exists,
                       conn->Query("SELECT to_regclass('schema_migrations') IS NOT NULL"));
  if (exists.Text(0, 0) != "t") return 0;
  return CurrentVersion(conn);
}

Result<int> ApplyMigrations(Connection* conn, std::span<const Migration> migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != int(i) + 1) {
      return Internal("migrations: postgres/" + std::string(migrations[i].name) +
                      " has version " + std::to_string(migrations[i].version) + ", expected " +
                      std::to_string(i + 1));
    }
  }
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  BLZ_ASSIGN_OR_RETURN(AdvisoryLock lock, AdvisoryLock::Acquire(conn, kMigrationLockKey));
  // Created under the lock: two runners racing on CREATE TABLE IF NOT EXISTS could otherwise
  // both try to create it.
  BLZ_RETURN_IF_ERROR(conn->Exec(kCreateTable));
  BLZ_ASSIGN_OR_RETURN(int current, CurrentVersion(conn));
  if (current > latest) {
    return Unsupported(conn->label() + ": database schema version " + std::to_string(current) +
                       " is newer than this binary (which knows up to version " +
                       std::to_string(latest) + "); upgrade blz");
  }
  int applied = 0;
  for (const Migration& m : migrations) {
    if (m.version <= current) continue;
    BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(conn));
    // Re-read inside the transaction (the lock already excludes other blz runners; this also
    // covers a table edited by hand).
    BLZ_ASSIGN_OR_RETURN(int now, CurrentVersion(conn));
    if (now >= m.version) continue;  // tx rolls back (nothing was written)
    Status s = conn->ExecScript(m.sql);
    if (!s.ok()) return s.WithContext("migration postgres/" + std::string(m.name));
    BLZ_RETURN_IF_ERROR(conn->Exec(
        "INSERT INTO schema_migrations (version, name, applied) "
        "VALUES ($1, $2, EXTRACT(EPOCH FROM now())::BIGINT)",
        {Param::Int(m.version), Param::Text(m.name)}));
    BLZ_RETURN_IF_ERROR(tx.Commit());
    ++applied;
  }
  return applied;
}

}  // namespace blz::store::postgres
