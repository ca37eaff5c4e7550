#include "store/sqlite/sql_driver.h"

#include <memory>
#include <utility>

#include "store/migrations.h"
#include "store/sqlite/migrations.h"
#include "store/sqlite/sqlite.h"

namespace blz::store::sqlite {
namespace {

class SqliteStatement final : public sql::StatementImpl {
 public:
  explicit SqliteStatement(Statement st) : st_(std::move(st)) {}
  Status Bind(int index, std::string_view text) override { return st_.Bind(index, text); }
  Status Bind(int index, int64_t value) override { return st_.Bind(index, value); }
  Status BindBlob(int index, std::string_view bytes) override { return st_.BindBlob(index, bytes); }
  Status BindNull(int index) override { return st_.BindNull(index); }
  Result<bool> Step() override { return st_.Step(); }
  int64_t ColumnInt(int column) const override { return st_.ColumnInt(column); }
  std::string ColumnText(int column) const override { return st_.ColumnText(column); }
  std::string ColumnBlob(int column) const override { return st_.ColumnBlob(column); }
  bool ColumnIsNull(int column) const override { return st_.ColumnIsNull(column); }

 private:
  Statement st_;
};

class SqliteDatabase final : public sql::DatabaseImpl {
 public:
  explicit SqliteDatabase(Database db) : db_(std::move(db)) {}
  std::string_view engine() const override { return "sqlite"; }
  const std::string& label() const override { return db_.path(); }
  Status Exec(std::string_view sql) override { return db_.Exec(sql); }
  Result<std::unique_ptr<sql::StatementImpl>> Prepare(std::string_view sql) override {
    BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(sql));
    return std::unique_ptr<sql::StatementImpl>(new SqliteStatement(std::move(st)));
  }
  // One writer per file: BEGIN IMMEDIATE takes the write lock at once (waiting up to the busy
  // timeout), so a transaction's reads and writes are one step for every process.
  Status Begin(sql::TransactionMode) override { return db_.Exec("BEGIN IMMEDIATE"); }
  Status Commit() override { return db_.Exec("COMMIT"); }
  Status Rollback() override { return db_.Exec("ROLLBACK"); }
  Status LockKey(std::string_view) override { return Status::Ok(); }
  Result<int64_t> SchemaVersion() override { return db_.PragmaInt("user_version"); }

 private:
  Database db_;
};

}  // namespace

Result<sql::Database> OpenSqlDatabase(const std::string& path) {
  BLZ_ASSIGN_OR_RETURN(Database db, Database::Open(path));
  BLZ_RETURN_IF_ERROR(db.Exec("PRAGMA busy_timeout = 5000"));
  Status s = db.Exec("PRAGMA journal_mode = WAL");
  if (!s.ok()) return s.WithContext(path);
  BLZ_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON"));
  BLZ_RETURN_IF_ERROR(ApplyMigrations(&db, EmbeddedMigrations()));
  return sql::Database(std::make_unique<SqliteDatabase>(std::move(db)));
}

}  // namespace blz::store::sqlite
