// A thin RAII layer over libpq (PostgreSQL's C client library): a connection, parameterized
// queries and their results, and transactions, with errors as blz::Status. Only store/
// includes this header (the registry sees the metadata interface, not SQL).
//
// URLs: "postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?param=value...]" (libpq's URI syntax;
// "postgres://" too). The password may also come from PGPASSWORD or ~/.pgpass (libpq reads
// them). Error messages name the server as label(), "postgresql://USER@HOST:PORT/DB", and
// the SQLSTATE; they never hold the password.
//
// Values travel only as parameters ($1, $2, ...), never spliced into SQL text: Query() takes
// one statement and its parameters. ExecScript() runs constant multi-statement SQL (the
// embedded migration files) and takes no values at all.
//
// Thread safety: none. A Connection (and its Transaction) must be used by one thread at a
// time; use one Connection per thread (libpq itself is thread-safe across connections).
#ifndef BLZ_STORE_POSTGRES_CONNECTION_H_
#define BLZ_STORE_POSTGRES_CONNECTION_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct pg_conn;
struct pg_result;

namespace blz::store::postgres {

// One query parameter: text (also used for integers, which PostgreSQL casts from text),
// bytes (sent in binary format, for BYTEA), or NULL.
class Param {
 public:
  static Param Text(std::string_view text) { return Param(std::string(text), false); }
  static Param Int(int64_t value) { return Param(std::to_string(value), false); }
  static Param Bytes(std::string_view bytes) { return Param(std::string(bytes), true); }
  static Param Null() { return Param(); }

  bool is_null() const { return !value_.has_value(); }
  bool binary() const { return binary_; }
  const std::string& value() const { return *value_; }  // REQUIRES: !is_null()

 private:
  Param() = default;
  Param(std::string value, bool binary) : value_(std::move(value)), binary_(binary) {}
  std::optional<std::string> value_;
  bool binary_ = false;
};

// The rows of one query (text format). Rows and columns are 0-based.
class Rows {
 public:
  Rows() = default;
  ~Rows();
  Rows(Rows&& other) noexcept;
  Rows& operator=(Rows&& other) noexcept;
  Rows(const Rows&) = delete;
  Rows& operator=(const Rows&) = delete;

  int size() const;     // number of rows
  int columns() const;  // number of columns
  // Rows an INSERT/UPDATE/DELETE touched (PQcmdTuples), 0 for other statements.
  int64_t affected() const;

  bool IsNull(int row, int column) const;
  // Is the column of type BYTEA (text "\x" + hex; read it with Bytes())?
  bool IsBytes(int column) const;
  // The value as text ("" for NULL).
  std::string Text(int row, int column) const;
  // The value as an integer. Errors: kCorruption when it is NULL or not an integer.
  Result<int64_t> Int(int row, int column) const;
  // A BYTEA value's bytes. Errors: kCorruption when it is NULL or not BYTEA's hex text.
  Result<std::string> Bytes(int row, int column) const;

 private:
  friend class Connection;
  explicit Rows(pg_result* result) : result_(result) {}
  pg_result* result_ = nullptr;
};

class Connection {
 public:
  Connection() = default;
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to `url` (waiting at most `connect_timeout_seconds`, unless the URL sets
  // connect_timeout). Errors: kInvalidArgument for a URL that is not a postgresql:// URL or
  // that libpq cannot parse; kUnauthorized when the server refuses the credentials; kNotFound
  // when the database does not exist; kUnavailable when the server cannot be reached (the
  // message names host and port).
  static Result<Connection> Open(std::string_view url, int connect_timeout_seconds = 10);

  // Runs one statement with `params` bound to $1, $2, ... and returns its rows (none for
  // statements without results). Errors (message: label, the statement's start, the server's
  // message and "SQLSTATE xxxxx"): kAlreadyExists for a unique violation (23505);
  // kInvalidArgument for other constraint violations and bad data (classes 22, 23);
  // kUnauthorized for class 28 and 42501; kUnavailable when the connection is lost or the
  // server is shutting down, and for serialization failures, deadlocks and lock timeouts
  // (40001, 40P01, 55P03; retryable); kInternal for syntax and undefined-object errors
  // (class 42: a bug in blz's SQL); kIOError otherwise.
  Result<Rows> Query(std::string_view sql, const std::vector<Param>& params = {});
  Result<Rows> Query(std::string_view sql, std::initializer_list<Param> params) {
    return Query(sql, std::vector<Param>(params));
  }
  // Query() for statements whose rows (if any) are not needed.
  Status Exec(std::string_view sql, const std::vector<Param>& params = {});

  // Runs constant SQL that may hold several statements (an embedded migration file). Never
  // pass text built from values: there are no parameters here. Errors as for Query().
  Status ExecScript(std::string_view sql);

  // "postgresql://USER@HOST:PORT/DB": the server, for messages (no password).
  const std::string& label() const { return label_; }
  pg_conn* handle() const { return conn_; }

 private:
  Connection(pg_conn* conn, std::string label, std::string password)
      : conn_(conn), label_(std::move(label)), password_(std::move(password)) {}
  Status ResultStatus(pg_result* result, std::string_view sql) const;
  std::string Scrub(std::string message) const;

  pg_conn* conn_ = nullptr;
  std::string label_;
  std::string password_;  // only to scrub it from server messages; never printed
};

// RAII transaction: BEGIN on Begin(), ROLLBACK in the destructor unless Commit()ed.
class Transaction {
 public:
  static Result<Transaction> Begin(Connection* conn);
  ~Transaction();
  Transaction(Transaction&& other) noexcept : conn_(other.conn_) { other.conn_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Status Commit();

 private:
  explicit Transaction(Connection* conn) : conn_(conn) {}
  Connection* conn_ = nullptr;
};

}  // namespace blz::store::postgres

#endif  // BLZ_STORE_POSTGRES_CONNECTION_H_
