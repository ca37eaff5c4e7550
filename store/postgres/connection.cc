#include "store/postgres/connection.h"

#include <libpq-fe.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace blz::store::postgres {
namespace {

// libpq messages end with a newline and may span lines ("\n\tIs the server running ..."):
// one line for a Status.
std::string OneLine(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == '\n' || c == '\t' || c == '\r' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// The start of a statement, for messages: its first line, at most 60 characters.
std::string Excerpt(std::string_view sql) {
  std::string line = OneLine(sql.substr(0, 200));
  if (line.size() > 60) line = line.substr(0, 57) + "...";
  return line;
}

void IgnoreNotice(void*, const char*) {}

Code CodeForSqlState(std::string_view state) {
  if (state == "23505") return Code::kAlreadyExists;
  if (state.substr(0, 2) == "23" || state.substr(0, 2) == "22") return Code::kInvalidArgument;
  if (state.substr(0, 2) == "28" || state == "42501") return Code::kUnauthorized;
  if (state.substr(0, 2) == "08" || state.substr(0, 3) == "57P" || state.substr(0, 2) == "53" ||
      state == "40001" || state == "40P01" || state == "55P03") {
    return Code::kUnavailable;
  }
  if (state.substr(0, 2) == "42") return Code::kInternal;
  return Code::kIOError;
}

}  // namespace

// ---- Rows ----

Rows::~Rows() {
  if (result_ != nullptr) PQclear(result_);
}
Rows::Rows(Rows&& other) noexcept : result_(std::exchange(other.result_, nullptr)) {}
Rows& Rows::operator=(Rows&& other) noexcept {
  if (this != &other) {
    if (result_ != nullptr) PQclear(result_);
    result_ = std::exchange(other.result_, nullptr);
  }
  return *this;
}

int Rows::size() const { return result_ == nullptr ? 0 : PQntuples(result_); }
int Rows::columns() const { return result_ == nullptr ? 0 : PQnfields(result_); }
int64_t Rows::affected() const {
  if (result_ == nullptr) return 0;
  const char* n = PQcmdTuples(result_);
  return n == nullptr || *n == '\0' ? 0 : std::strtoll(n, nullptr, 10);
}
bool Rows::IsNull(int row, int column) const { return PQgetisnull(result_, row, column) != 0; }
bool Rows::IsBytes(int column) const {
  constexpr Oid kByteaOid = 17;  // pg_type.oid of bytea (catalog/pg_type_d.h)
  return result_ != nullptr && PQftype(result_, column) == kByteaOid;
}
std::string Rows::Text(int row, int column) const {
  if (IsNull(row, column)) return std::string();
  return std::string(PQgetvalue(result_, row, column), PQgetlength(result_, row, column));
}
Result<int64_t> Rows::Int(int row, int column) const {
  const char* name = PQfname(result_, column);
  if (IsNull(row, column)) {
    return Corruption(std::string("column ") + (name ? name : "?") + " is NULL, not an integer");
  }
  const char* text = PQgetvalue(result_, row, column);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    return Corruption(std::string("column ") + (name ? name : "?") + " is not an integer: '" +
                      text + "'");
  }
  return int64_t(v);
}
Result<std::string> Rows::Bytes(int row, int column) const {
  const char* name = PQfname(result_, column);
  if (IsNull(row, column)) {
    return Corruption(std::string("column ") + (name ? name : "?") + " is NULL, not bytes");
  }
  const char* text = PQgetvalue(result_, row, column);
  if (text[0] != '\\' || text[1] != 'x') {
    return Corruption(std::string("column ") + (name ? name : "?") + " is not BYTEA hex text");
  }
  size_t n = 0;
  unsigned char* bytes = PQunescapeBytea(reinterpret_cast<const unsigned char*>(text), &n);
  if (bytes == nullptr) {
    return Corruption(std::string("column ") + (name ? name : "?") + ": bad BYTEA");
  }
  std::string out(reinterpret_cast<const char*>(bytes), n);
  PQfreemem(bytes);
  return out;
}

// ---- Connection ----

Connection::~Connection() {
  if (conn_ != nullptr) PQfinish(conn_);
}
Connection::Connection(Connection&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)),
      label_(std::move(other.label_)),
      password_(std::move(other.password_)) {}
Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (conn_ != nullptr) PQfinish(conn_);
    conn_ = std::exchange(other.conn_, nullptr);
    label_ = std::move(other.label_);
    password_ = std::move(other.password_);
  }
  return *this;
}

std::string Connection::Scrub(std::string message) const {
  // Servers do not echo passwords, but a message must never carry one: cut it out if it does
  // (only passwords of 3+ characters, so that a one-letter password does not garble text).
  if (password_.size() >= 3) {
    for (size_t p = message.find(password_); p != std::string::npos;
         p = message.find(password_, p)) {
      message.replace(p, password_.size(), "***");
    }
  }
  return message;
}

Result<Connection> Connection::Open(std::string_view url, int connect_timeout_seconds) {
  const std::string u(url);
  if (u.rfind("postgresql://", 0) != 0 && u.rfind("postgres://", 0) != 0) {
    return InvalidArgument("not a PostgreSQL URL (want postgresql://USER@HOST:PORT/DB): '" +
                           u.substr(0, u.find(':')) + ":...'");
  }
  // Parse first, for a label without the password.
  char* parse_error = nullptr;
  PQconninfoOption* options = PQconninfoParse(u.c_str(), &parse_error);
  if (options == nullptr) {
    std::string why = parse_error != nullptr ? OneLine(parse_error) : "out of memory";
    if (parse_error != nullptr) PQfreemem(parse_error);
    // The URL itself may hold a password: name only its scheme and host part's position.
    const size_t at = u.find('@');
    const std::string shown =
        at == std::string::npos ? u : u.substr(0, u.find("://") + 3) + "...@" + u.substr(at + 1);
    return InvalidArgument("bad PostgreSQL URL '" + shown + "': " + why);
  }
  std::string host, port, dbname, user, password, hostaddr;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    const std::string key = o->keyword;
    const std::string val = o->val != nullptr ? o->val : "";
    if (key == "host") host = val;
    if (key == "hostaddr") hostaddr = val;
    if (key == "port") port = val;
    if (key == "dbname") dbname = val;
    if (key == "user") user = val;
    if (key == "password") password = val;
  }
  PQconninfoFree(options);
  if (host.empty()) host = hostaddr.empty() ? "localhost" : hostaddr;
  if (port.empty()) port = "5432";
  std::string label = "postgresql://" + (user.empty() ? std::string() : user + "@") + host + ":" +
                      port + "/" + dbname;

  // Defaults come before "dbname" (the URL): with expand_dbname, later entries override
  // earlier ones, so the URL's own connect_timeout wins.
  const std::string timeout = std::to_string(connect_timeout_seconds);
  const char* keywords[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {timeout.c_str(), "blz", u.c_str(), nullptr};
  pg_conn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  Connection c(conn, std::move(label), std::move(password));
  if (conn == nullptr) return Unavailable(c.label_ + ": cannot connect: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string why = c.Scrub(OneLine(PQerrorMessage(conn)));
    Code code = Code::kUnavailable;
    if (why.find("authentication failed") != std::string::npos ||
        why.find("no password supplied") != std::string::npos) {
      code = Code::kUnauthorized;
    } else if (why.find("does not exist") != std::string::npos) {
      code = Code::kNotFound;
    }
    return Status(code, c.label_ + ": cannot connect: " + why);
  }
  PQsetNoticeProcessor(conn, IgnoreNotice, nullptr);
  return c;
}

Status Connection::ResultStatus(pg_result* result, std::string_view sql) const {
  if (result == nullptr) {
    const std::string why = Scrub(OneLine(PQerrorMessage(conn_)));
    return Unavailable(label_ + ": " + Excerpt(sql) + ": " + (why.empty() ? "no result" : why));
  }
  const ExecStatusType st = PQresultStatus(result);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY) {
    return Status::Ok();
  }
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const std::string sqlstate = state != nullptr ? state : "";
  std::string why = Scrub(OneLine(primary != nullptr ? primary : PQresultErrorMessage(result)));
  if (why.empty()) why = PQresStatus(st);
  Code code = sqlstate.empty() ? Code::kUnavailable : CodeForSqlState(sqlstate);
  if (PQstatus(conn_) == CONNECTION_BAD) code = Code::kUnavailable;
  return Status(code, label_ + ": " + Excerpt(sql) + ": " + why +
                          (sqlstate.empty() ? std::string() : " (SQLSTATE " + sqlstate + ")"));
}

Result<Rows> Connection::Query(std::string_view sql, const std::vector<Param>& params) {
  if (conn_ == nullptr) return Internal("postgresql: query on a closed connection");
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  for (const Param& p : params) {
    values.push_back(p.is_null() ? nullptr : p.value().data());
    lengths.push_back(p.is_null() ? 0 : int(p.value().size()));
    formats.push_back(p.binary() ? 1 : 0);
  }
  const std::string text(sql);
  pg_result* result =
      PQexecParams(conn_, text.c_str(), int(params.size()), /*paramTypes=*/nullptr, values.data(),
                   lengths.data(), formats.data(), /*resultFormat=*/0);
  Rows rows(result);
  BLZ_RETURN_IF_ERROR(ResultStatus(result, sql));
  return rows;
}

Status Connection::Exec(std::string_view sql, const std::vector<Param>& params) {
  BLZ_ASSIGN_OR_RETURN(Rows rows, Query(sql, params));
  (void)rows;
  return Status::Ok();
}

Status Connection::ExecScript(std::string_view sql) {
  if (conn_ == nullptr) return Internal("postgresql: query on a closed connection");
  const std::string text(sql);
  Rows rows(PQexec(conn_, text.c_str()));
  return ResultStatus(rows.result_, sql);
}

// ---- Transaction ----

Result<Transaction> Transaction::Begin(Connection* conn) {
  BLZ_RETURN_IF_ERROR(conn->Exec("BEGIN"));
  return Transaction(conn);
}

Transaction::~Transaction() {
  if (conn_ != nullptr) (void)conn_->Exec("ROLLBACK");
}

Status Transaction::Commit() {
  if (conn_ == nullptr) return Internal("postgresql: commit of a finished transaction");
  Connection* conn = std::exchange(conn_, nullptr);
  return conn->Exec("COMMIT");
}

}  // namespace blz::store::postgres
