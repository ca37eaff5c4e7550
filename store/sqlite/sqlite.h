// A thin RAII layer over the SQLite C API: a connection and its prepared statements, with
// SQLite result codes turned into blz::Status. Only store/ includes this header.
//
// Thread safety: none. A Database and its Statements must be used by one thread at a time
// (MetadataDb serializes access with a mutex). The connection is opened with
// SQLITE_OPEN_NOMUTEX for that reason.
#ifndef BLZ_STORE_SQLITE_SQLITE_H_
#define BLZ_STORE_SQLITE_SQLITE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace blz::store::sqlite {

class Database;

// A prepared statement. Bind parameters are 1-based; columns are 0-based.
class Statement {
 public:
  Statement() = default;
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Status Bind(int index, std::string_view text);
  Status Bind(int index, int64_t value);
  Status BindBlob(int index, std::string_view bytes);
  Status BindNull(int index);

  // Runs one step: true when a row is available, false when the statement is done.
  Result<bool> Step();
  // Steps to completion, expecting no rows (INSERT/UPDATE/DELETE).
  Status Run();

  int64_t ColumnInt(int column) const;
  std::string ColumnText(int column) const;
  std::string ColumnBlob(int column) const;
  bool ColumnIsNull(int column) const;

 private:
  friend class Database;
  Statement(sqlite3* db, sqlite3_stmt* stmt, std::string sql) : db_(db), stmt_(stmt), sql_(std::move(sql)) {}
  Status Check(int rc, std::string_view what) const;

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

class Database {
 public:
  Database() = default;
  ~Database();
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Opens (creating if needed) the database file at `path`, and makes it and its -wal, -shm
  // and -journal files owner-only (mode 0600, whatever the umask). Errors: kIOError.
  static Result<Database> Open(const std::string& path);

  // Runs one or more SQL statements without results. Errors: kIOError naming the SQLite error.
  Status Exec(std::string_view sql);
  // Prepares a single statement.
  Result<Statement> Prepare(std::string_view sql);
  // The value of a PRAGMA that returns one integer (e.g. "user_version").
  Result<int64_t> PragmaInt(std::string_view pragma);

  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// RAII transaction: BEGIN IMMEDIATE on Begin(), ROLLBACK in the destructor unless Commit()ed.
class Transaction {
 public:
  static Result<Transaction> Begin(Database* db);
  ~Transaction();
  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_ = nullptr;
};

}  // namespace blz::store::sqlite

#endif  // BLZ_STORE_SQLITE_SQLITE_H_
