#include "store/postgres/sql_driver.h"

#include <libpq-fe.h>
#include <poll.h>

#include <cctype>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "store/postgres/connection.h"
#include "store/postgres/migrations.h"

namespace blz::store::postgres {

std::string TranslatePlaceholders(std::string_view sql, int* count) {
  std::string out;
  out.reserve(sql.size() + 8);
  int largest = 0;
  size_t i = 0;
  while (i < sql.size()) {
    const char c = sql[i];
    if (c == '\'' || c == '"') {  // a literal or quoted identifier ('' / "" escape themselves)
      const size_t end = sql.find(c, i + 1);
      const size_t stop = end == std::string_view::npos ? sql.size() : end + 1;
      out.append(sql.substr(i, stop - i));
      i = stop;
    } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      const size_t end = sql.find('\n', i);
      const size_t stop = end == std::string_view::npos ? sql.size() : end;
      out.append(sql.substr(i, stop - i));
      i = stop;
    } else if (c == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
      const size_t end = sql.find("*/", i + 2);
      const size_t stop = end == std::string_view::npos ? sql.size() : end + 2;
      out.append(sql.substr(i, stop - i));
      i = stop;
    } else if (c == '?') {
      size_t j = i + 1;
      int n = 0;
      while (j < sql.size() && std::isdigit(static_cast<unsigned char>(sql[j])) && n < 100000) {
        n = n * 10 + (sql[j] - '0');
        ++j;
      }
      if (j == i + 1) n = largest + 1;
      if (n > largest) largest = n;
      out += '$';
      out += std::to_string(n);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  if (count != nullptr) *count = largest;
  return out;
}

int64_t LockKeyOf(std::string_view name) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : std::string("blz:") + std::string(name)) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return static_cast<int64_t>(h);
}

namespace {

class PostgresStatement final : public sql::StatementImpl {
 public:
  PostgresStatement(Connection* conn, std::string sql, int params)
      : conn_(conn), sql_(std::move(sql)), params_(size_t(params)) {}

  Status Bind(int index, std::string_view text) override {
    return Set(index, Param::Text(text));
  }
  Status Bind(int index, int64_t value) override { return Set(index, Param::Int(value)); }
  Status BindBlob(int index, std::string_view bytes) override {
    return Set(index, Param::Bytes(bytes));
  }
  Status BindNull(int index) override { return Set(index, Param::Null()); }

  Result<bool> Step() override {
    if (!rows_.has_value()) {
      std::vector<Param> values;
      values.reserve(params_.size());
      for (auto& p : params_) values.push_back(p.has_value() ? *p : Param::Null());  // SQLite: unbound = NULL
      BLZ_ASSIGN_OR_RETURN(Rows rows, conn_->Query(sql_, values));
      rows_ = std::move(rows);
      row_ = 0;
    } else if (row_ < rows_->size()) {
      ++row_;
    }
    return row_ < rows_->size();
  }

  int64_t ColumnInt(int column) const override {
    if (!Valid(column) || rows_->IsNull(row_, column)) return 0;
    Result<int64_t> v = rows_->Int(row_, column);
    if (v.ok()) return *v;
    const std::string text = rows_->Text(row_, column);  // a boolean: 't' / 'f'
    return text == "t" ? 1 : 0;
  }
  std::string ColumnText(int column) const override {
    if (!Valid(column)) return std::string();
    return rows_->Text(row_, column);
  }
  std::string ColumnBlob(int column) const override {
    if (!Valid(column) || rows_->IsNull(row_, column)) return std::string();
    if (!rows_->IsBytes(column)) return rows_->Text(row_, column);
    Result<std::string> bytes = rows_->Bytes(row_, column);
    return bytes.ok() ? std::move(*bytes) : std::string();
  }
  bool ColumnIsNull(int column) const override {
    return !Valid(column) || rows_->IsNull(row_, column);
  }

 private:
  Status Set(int index, Param value) {
    if (index < 1 || size_t(index) > params_.size()) {
      return Internal(conn_->label() + ": bind of parameter " + std::to_string(index) +
                      " of a statement with " + std::to_string(params_.size()) + ": " + sql_);
    }
    rows_.reset();  // binding after stepping starts over, as sqlite3_reset does
    params_[size_t(index) - 1] = std::move(value);
    return Status::Ok();
  }
  bool Valid(int column) const {
    return rows_.has_value() && row_ < rows_->size() && column >= 0 &&
           column < rows_->columns();
  }

  Connection* conn_;
  std::string sql_;
  std::vector<std::optional<Param>> params_;
  std::optional<Rows> rows_;
  int row_ = 0;
};

class PostgresDatabase final : public sql::DatabaseImpl {
 public:
  explicit PostgresDatabase(Connection conn) : conn_(std::move(conn)) {}
  std::string_view engine() const override { return "postgresql"; }
  const std::string& label() const override { return conn_.label(); }
  Status Exec(std::string_view sql) override {
    Reconnect();
    return conn_.ExecScript(sql);
  }
  Result<std::unique_ptr<sql::StatementImpl>> Prepare(std::string_view sql) override {
    Reconnect();
    int count = 0;
    std::string text = TranslatePlaceholders(sql, &count);
    return std::unique_ptr<sql::StatementImpl>(
        new PostgresStatement(&conn_, std::move(text), count));
  }
  // READ COMMITTED: other connections write meanwhile; methods whose reads decide their writes
  // take a LockKey.
  Status Begin(sql::TransactionMode mode) override {
    Reconnect();
    Status s = conn_.Exec(mode == sql::TransactionMode::kSnapshot
                              ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
                              : "BEGIN");
    in_transaction_ = s.ok();
    return s;
  }
  Status Commit() override {
    in_transaction_ = false;
    return conn_.Exec("COMMIT");
  }
  Status Rollback() override {
    in_transaction_ = false;
    return conn_.Exec("ROLLBACK");
  }
  Status LockKey(std::string_view name) override {
    return conn_.Exec("SELECT pg_advisory_xact_lock($1::bigint)", {Param::Int(LockKeyOf(name))});
  }
  Result<int64_t> SchemaVersion() override {
    Reconnect();
    BLZ_ASSIGN_OR_RETURN(int v, postgres::SchemaVersion(&conn_));
    return int64_t(v);
  }

 private:
  // A connection the server dropped (a restart, a failover) is re-established before the next
  // statement outside a transaction; the statement that saw it fail reported kUnavailable.
  // A server that ends an idle session (pg_terminate_backend, a shutdown) first sends its
  // FATAL message, then closes: an idle connection (no statement in flight; blz never LISTENs)
  // whose socket is readable or hung up is being dropped, so it is re-established here instead
  // of failing the next statement (poll with timeout 0 never blocks).
  void Reconnect() {
    if (in_transaction_ || conn_.handle() == nullptr) return;
    pollfd idle{PQsocket(conn_.handle()), POLLIN, 0};
    if (PQstatus(conn_.handle()) == CONNECTION_BAD ||
        (idle.fd >= 0 && poll(&idle, 1, 0) > 0)) {
      PQreset(conn_.handle());
    }
  }

  Connection conn_;
  bool in_transaction_ = false;
};

}  // namespace

Result<sql::Database> ConnectSqlDatabase(std::string_view url) {
  BLZ_ASSIGN_OR_RETURN(Connection conn, Connection::Open(url));
  return sql::Database(std::make_unique<PostgresDatabase>(std::move(conn)));
}

Result<sql::Database> OpenSqlDatabase(std::string_view url) {
  BLZ_ASSIGN_OR_RETURN(Connection conn, Connection::Open(url));
  BLZ_ASSIGN_OR_RETURN(int applied, ApplyMigrations(&conn, EmbeddedMigrations()));
  (void)applied;
  return sql::Database(std::make_unique<PostgresDatabase>(std::move(conn)));
}

}  // namespace blz::store::postgres
