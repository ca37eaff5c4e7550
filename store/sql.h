// The engine-neutral SQL seam under the registry's metadata (store/metadata_db.h): a
// connection, its prepared statements and transactions, with the method names and signatures
// of the SQLite layer it generalizes (store/sqlite/sqlite.h), so that MetadataDb's queries read
// the same on every engine. Each engine is one folder with a driver that implements
// DatabaseImpl / StatementImpl: store/sqlite/ (the embedded default) and store/postgres/.
// OpenDatabase() picks the driver from the URL (store/sql_open.cc).
//
// SQL accepted by every driver: SQLite's dialect where it agrees with PostgreSQL's. Parameters
// are written "?" or "?N" (1-based; the PostgreSQL driver rewrites them to "$N" outside quoted
// text). No PRAGMA, no INSERT OR ..., no last_insert_rowid(), no date functions (compute times
// in C++), "INSERT ... ON CONFLICT (cols) DO NOTHING | DO UPDATE SET c = excluded.c" and
// "RETURNING" instead. Tables that need an id or an insertion order have a "rowid" column on
// every engine (SQLite's implicit one; an identity column on PostgreSQL). Text compares
// bytewise on every engine (PostgreSQL's text columns are COLLATE "C").
//
// Thread safety: none. A Database, its Statements and Transactions are used by one thread at a
// time (MetadataDb leases each connection to one call at a time, store/sql_pool.h).
#ifndef BLZ_STORE_SQL_H_
#define BLZ_STORE_SQL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace blz::store::sql {

// What a transaction is for.
enum class TransactionMode {
  kWrite,     // reads and writes (PostgreSQL: READ COMMITTED, serialize with LockKey)
  kSnapshot,  // reads only, all from one consistent snapshot (PostgreSQL: REPEATABLE READ)
};

// What a driver implements for one prepared statement.
class StatementImpl {
 public:
  virtual ~StatementImpl() = default;
  virtual Status Bind(int index, std::string_view text) = 0;
  virtual Status Bind(int index, int64_t value) = 0;
  virtual Status BindBlob(int index, std::string_view bytes) = 0;
  virtual Status BindNull(int index) = 0;
  virtual Result<bool> Step() = 0;
  virtual int64_t ColumnInt(int column) const = 0;
  virtual std::string ColumnText(int column) const = 0;
  virtual std::string ColumnBlob(int column) const = 0;
  virtual bool ColumnIsNull(int column) const = 0;
};

// What a driver implements for one connection.
class DatabaseImpl {
 public:
  virtual ~DatabaseImpl() = default;
  // "sqlite" or "postgresql".
  virtual std::string_view engine() const = 0;
  // The database for messages: a file path, or "postgresql://USER@HOST:PORT/DB" (never a
  // password).
  virtual const std::string& label() const = 0;
  // Constant SQL, possibly several statements, without parameters or results.
  virtual Status Exec(std::string_view sql) = 0;
  virtual Result<std::unique_ptr<StatementImpl>> Prepare(std::string_view sql) = 0;
  // Starts a transaction: SQLite's BEGIN IMMEDIATE (one writer per database file, whatever
  // the mode); PostgreSQL's BEGIN (kWrite: READ COMMITTED, concurrent writers, see LockKey;
  // kSnapshot: REPEATABLE READ READ ONLY).
  virtual Status Begin(TransactionMode mode) = 0;
  virtual Status Commit() = 0;
  virtual Status Rollback() = 0;
  // Inside a transaction: waits for, then holds until the transaction ends, the lock named
  // `name` (PostgreSQL: pg_advisory_xact_lock on a 64-bit hash of "blz:" + name, shared by
  // every replica on the database). A no-op on SQLite, whose BEGIN IMMEDIATE already excludes
  // every other writer.
  virtual Status LockKey(std::string_view name) = 0;
  // The schema version the migrations recorded (0 = empty database).
  virtual Result<int64_t> SchemaVersion() = 0;
};

// The statements one Database ran and their wall time, for /metrics (blz_metadata_query_seconds):
// a prepared statement counts once per execution (its first Step() after creation or a Bind;
// every Step()'s time adds to `seconds`), Exec and a transaction's BEGIN, COMMIT and LockKey
// once each. Thread-safe (atomics): read it from any thread while the connection is in use.
struct QueryStats {
  uint64_t count = 0;
  double seconds = 0;
  uint64_t errors = 0;  // of `count`, those that failed
};
class QueryTimer {
 public:
  void Add(std::chrono::steady_clock::duration elapsed, bool counted, bool ok) {
    nanos_.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
                     std::memory_order_relaxed);
    if (counted) count_.fetch_add(1, std::memory_order_relaxed);
    if (!ok) errors_.fetch_add(1, std::memory_order_relaxed);
  }
  QueryStats Get() const {
    return QueryStats{count_.load(std::memory_order_relaxed),
                      double(nanos_.load(std::memory_order_relaxed)) / 1e9,
                      errors_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> nanos_{0};
  std::atomic<uint64_t> errors_{0};
};

// A prepared statement. Bind parameters are 1-based; columns are 0-based. A PostgreSQL
// statement runs at its first Step() with the values bound by then.
class Statement {
 public:
  Statement() = default;
  explicit Statement(std::unique_ptr<StatementImpl> impl,
                     std::shared_ptr<QueryTimer> timer = nullptr)
      : impl_(std::move(impl)), timer_(std::move(timer)) {}

  Status Bind(int index, std::string_view text) { fresh_ = true; return impl_->Bind(index, text); }
  Status Bind(int index, int64_t value) { fresh_ = true; return impl_->Bind(index, value); }
  Status BindBlob(int index, std::string_view bytes) {
    fresh_ = true;
    return impl_->BindBlob(index, bytes);
  }
  Status BindNull(int index) { fresh_ = true; return impl_->BindNull(index); }

  // Runs one step: true when a row is available, false when the statement is done.
  Result<bool> Step();
  // Steps to completion, expecting no rows (INSERT/UPDATE/DELETE); rows are skipped.
  Status Run();
  // Steps to completion and returns every row's first column as text (a one-column query).
  Result<std::vector<std::string>> ColumnTexts();

  // The current row's values. A NULL reads as 0 / "".
  int64_t ColumnInt(int column) const { return impl_->ColumnInt(column); }
  std::string ColumnText(int column) const { return impl_->ColumnText(column); }
  std::string ColumnBlob(int column) const { return impl_->ColumnBlob(column); }
  bool ColumnIsNull(int column) const { return impl_->ColumnIsNull(column); }

 private:
  std::unique_ptr<StatementImpl> impl_;
  std::shared_ptr<QueryTimer> timer_;  // null: not timed
  bool fresh_ = true;                  // the next Step() starts an execution
};

class Database {
 public:
  Database() = default;
  explicit Database(std::unique_ptr<DatabaseImpl> impl)
      : impl_(std::move(impl)), timer_(std::make_shared<QueryTimer>()) {}

  // Runs constant SQL (one or more statements, no parameters, no results).
  Status Exec(std::string_view sql);
  // Prepares a single statement.
  Result<Statement> Prepare(std::string_view sql);
  // The schema version (SQLite: PRAGMA user_version; PostgreSQL: schema_migrations).
  Result<int64_t> SchemaVersion() { return impl_->SchemaVersion(); }

  std::string_view engine() const { return impl_->engine(); }
  const std::string& label() const { return impl_->label(); }
  DatabaseImpl* impl() { return impl_.get(); }
  // What ran on this connection so far (QueryTimer).
  QueryStats query_stats() const { return timer_ ? timer_->Get() : QueryStats{}; }
  QueryTimer* timer() const { return timer_.get(); }
  // Counts this connection's statements in `timer` instead (a pool's connections share one).
  void set_timer(std::shared_ptr<QueryTimer> timer) { timer_ = std::move(timer); }

 private:
  std::unique_ptr<DatabaseImpl> impl_;
  std::shared_ptr<QueryTimer> timer_;
};

// RAII transaction: Begin() starts it, the destructor rolls back unless Commit() succeeded.
class Transaction {
 public:
  static Result<Transaction> Begin(Database* db, TransactionMode mode = TransactionMode::kWrite);
  ~Transaction();
  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Serializes this transaction with every other one that locks `name`, on every connection
  // and replica, until it ends (DatabaseImpl::LockKey). Take at most one key per transaction
  // (or always in the same order), so that two transactions never wait for each other.
  Status LockKey(std::string_view name);
  Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_ = nullptr;
};

// Opens the database named by `url` and brings its schema to this binary's latest version
// (each engine's migrations; PostgreSQL's under an advisory lock, so replicas starting
// together apply each migration once):
//   "sqlite:PATH" or a plain path (no "scheme://")  -> SQLite file PATH (created when missing)
//   "postgresql://..." or "postgres://..."           -> PostgreSQL (store/postgres/connection.h)
// Errors: kInvalidArgument for an unknown scheme or an empty path; kUnsupported for a
// database whose schema is newer than this binary; the driver's errors otherwise (messages
// never hold a password).
Result<Database> OpenDatabase(std::string_view url);
// One more connection to a database OpenDatabase(url) already migrated (no migrations run):
// a connection pool's further members (store/sql_pool.h). Errors: OpenDatabase's.
Result<Database> ConnectDatabase(std::string_view url);

}  // namespace blz::store::sql

#endif  // BLZ_STORE_SQL_H_
