#include "store/sqlite/sqlite.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace blz::store::sqlite {
namespace {

Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string msg = "sqlite: " + std::string(what) + ": " + sqlite3_errstr(rc);
  if (db != nullptr) {
    const char* detail = sqlite3_errmsg(db);
    if (detail != nullptr && std::string_view(detail) != sqlite3_errstr(rc)) {
      msg += " (";
      msg += detail;
      msg += ")";
    }
  }
  if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB) return Corruption(msg);
  if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) return Unavailable(msg);
  return IOError(msg);
}

// The database and its side files hold private data (token hashes, private repositories):
// owner-only, whatever the umask. SQLite creates -wal, -shm and -journal with the mode of
// the database file, so tightening it right after opening covers them too; those left by an
// earlier run are tightened here as well.
Status MakeOwnerOnly(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string p = path + suffix;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) == 0) continue;
    if (::chmod(p.c_str(), 0600) != 0) {
      return IOError("sqlite: " + p + ": cannot set mode 0600: " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

}  // namespace

// ---- Statement ----

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), sql_(std::move(other.sql_)) {
  other.stmt_ = nullptr;
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = other.stmt_;
    sql_ = std::move(other.sql_);
    other.stmt_ = nullptr;
  }
  return *this;
}

Status Statement::Check(int rc, std::string_view what) const {
  if (rc == SQLITE_OK) return Status::Ok();
  return SqliteError(db_, rc, std::string(what) + " [" + sql_ + "]");
}

Status Statement::Bind(int index, std::string_view text) {
  return Check(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT,
                                   SQLITE_UTF8),
               "bind");
}

Status Statement::Bind(int index, int64_t value) {
  return Check(sqlite3_bind_int64(stmt_, index, value), "bind");
}

Status Statement::BindBlob(int index, std::string_view bytes) {
  // A zero-length blob must still be a blob, not NULL: give SQLite a non-null pointer.
  static const char kEmpty = 0;
  return Check(sqlite3_bind_blob64(stmt_, index, bytes.empty() ? &kEmpty : bytes.data(),
                                   bytes.size(), SQLITE_TRANSIENT),
               "bind");
}

Status Statement::BindNull(int index) { return Check(sqlite3_bind_null(stmt_, index), "bind"); }

Result<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db_, rc, "step [" + sql_ + "]");
}

Status Statement::Run() {
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

int64_t Statement::ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }

std::string Statement::ColumnText(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  int n = sqlite3_column_bytes(stmt_, column);
  if (p == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(p), size_t(n));
}

std::string Statement::ColumnBlob(int column) const {
  const void* p = sqlite3_column_blob(stmt_, column);
  int n = sqlite3_column_bytes(stmt_, column);
  if (p == nullptr) return {};
  return std::string(static_cast<const char*>(p), size_t(n));
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

// ---- Database ----

Database::~Database() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Database::Database(Database&& other) noexcept : db_(other.db_), path_(std::move(other.path_)) {
  other.db_ = nullptr;
}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = other.db_;
    path_ = std::move(other.path_);
    other.db_ = nullptr;
  }
  return *this;
}

Result<Database> Database::Open(const std::string& path) {
  Database db;
  db.path_ = path;
  int rc = sqlite3_open_v2(path.c_str(), &db.db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db.db_, rc, "cannot open " + path);
    return s;
  }
  sqlite3_extended_result_codes(db.db_, 1);
  BLZ_RETURN_IF_ERROR(MakeOwnerOnly(path));
  return db;
}

Status Database::Exec(std::string_view sql) {
  std::string text(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string detail = err != nullptr ? err : "";
  sqlite3_free(err);
  return SqliteError(db_, rc, path_ + ": " + detail);
}

Result<Statement> Database::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), int(sql.size()), &stmt, &tail);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, "prepare [" + std::string(sql) + "]");
  if (stmt == nullptr) return Internal("sqlite: empty statement [" + std::string(sql) + "]");
  return Statement(db_, stmt, std::string(sql));
}

Result<int64_t> Database::PragmaInt(std::string_view pragma) {
  BLZ_ASSIGN_OR_RETURN(Statement st, Prepare("PRAGMA " + std::string(pragma)));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Internal("sqlite: PRAGMA " + std::string(pragma) + " returned no row");
  return st.ColumnInt(0);
}

// ---- Transaction ----

Result<Transaction> Transaction::Begin(Database* db) {
  BLZ_RETURN_IF_ERROR(db->Exec("BEGIN IMMEDIATE"));
  return Transaction(db);
}

Transaction::~Transaction() {
  if (db_ != nullptr) (void)db_->Exec("ROLLBACK");
}

Status Transaction::Commit() {
  if (db_ == nullptr) return Internal("sqlite: transaction already finished");
  Status s = db_->Exec("COMMIT");
  if (!s.ok()) return s;  // the destructor rolls back
  db_ = nullptr;
  return Status::Ok();
}

}  // namespace blz::store::sqlite
