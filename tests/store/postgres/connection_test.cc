#include "store/postgres/connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/store/postgres/postgres_fixture.h"

namespace blz::store::postgres {
namespace {

// A loopback port nothing listens on (bound for a moment by this process, then released).
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// No server needed: nothing listens on the port.
TEST(PostgresConnectionTest, WrongPortNamesHostAndPortButNotThePassword) {
  const int port = UnusedPort();
  ASSERT_NE(port, 0);
  const std::string url =
      "postgresql://alice:hunter2secret@127.0.0.1:" + std::to_string(port) + "/registry";
  auto conn = Connection::Open(url, /*connect_timeout_seconds=*/5);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kUnavailable) << conn.status().ToString();
  const std::string msg = conn.status().message();
  EXPECT_NE(msg.find("postgresql://alice@127.0.0.1:" + std::to_string(port) + "/registry"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("cannot connect"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("hunter2secret"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(PostgresConnectionTest, NonPostgresAndMalformedUrlsAreInvalidArguments) {
  auto sqlite = Connection::Open("sqlite:/var/lib/blz/meta.db");
  ASSERT_FALSE(sqlite.ok());
  EXPECT_EQ(sqlite.status().code(), Code::kInvalidArgument);
  EXPECT_NE(sqlite.status().message().find("postgresql://"), std::string::npos)
      << sqlite.status().ToString();

  auto bad = Connection::Open("postgresql://alice:hunter2secret@127.0.0.1:5432/db?nosuchparam=1");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("127.0.0.1"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(bad.status().message().find("hunter2secret"), std::string::npos)
      << bad.status().ToString();
}

using PostgresConnectionServerTest = blz::testing::PostgresTest;

TEST_F(PostgresConnectionServerTest, ParametersRoundTripTextIntegersBytesAndNull) {
  auto conn = Connection::Open(FreshDatabase());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  // A value that would break (or drop a table) if it were spliced into the SQL text.
  const std::string hostile = "it's'; DROP TABLE x; --";
  const std::string bytes("\0\x01\xff\\x00'", 7);
  auto rows = conn->Query("SELECT $1::text, $2::bigint, $3::bytea, $4::text, length($3::bytea)",
                          {Param::Text(hostile), Param::Int(-9007199254740993LL),
                           Param::Bytes(bytes), Param::Null()});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1);
  ASSERT_EQ(rows->columns(), 5);
  EXPECT_EQ(rows->Text(0, 0), hostile);
  EXPECT_EQ(*rows->Int(0, 1), -9007199254740993LL);
  auto got = rows->Bytes(0, 2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, bytes);
  EXPECT_TRUE(rows->IsNull(0, 3));
  EXPECT_FALSE(rows->IsNull(0, 0));
  EXPECT_EQ(*rows->Int(0, 4), 7);
  EXPECT_EQ(rows->Int(0, 3).status().code(), Code::kCorruption);
  EXPECT_EQ(rows->Int(0, 0).status().code(), Code::kCorruption);
}

TEST_F(PostgresConnectionServerTest, ErrorsNameTheServerAndTheSqlState) {
  const std::string url = FreshDatabase();
  auto conn = Connection::Open(url);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_EQ(conn->label(), url);  // the harness's URL has no password
  ASSERT_TRUE(conn->Exec("CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT CHECK (n >= 0))").ok());
  ASSERT_TRUE(conn->Exec("INSERT INTO t VALUES ($1, $2)", {Param::Text("a"), Param::Int(1)}).ok());

  Status dup = conn->Exec("INSERT INTO t VALUES ($1, $2)", {Param::Text("a"), Param::Int(2)});
  EXPECT_EQ(dup.code(), Code::kAlreadyExists) << dup.ToString();
  EXPECT_NE(dup.message().find("SQLSTATE 23505"), std::string::npos) << dup.ToString();
  EXPECT_NE(dup.message().find(url), std::string::npos) << dup.ToString();
  EXPECT_NE(dup.message().find("INSERT INTO t"), std::string::npos) << dup.ToString();

  Status check = conn->Exec("INSERT INTO t VALUES ($1, $2)", {Param::Text("b"), Param::Int(-1)});
  EXPECT_EQ(check.code(), Code::kInvalidArgument) << check.ToString();
  EXPECT_NE(check.message().find("SQLSTATE 23514"), std::string::npos) << check.ToString();

  Status syntax = conn->Exec("SELEC 1");
  EXPECT_EQ(syntax.code(), Code::kInternal) << syntax.ToString();
  EXPECT_NE(syntax.message().find("SQLSTATE 42601"), std::string::npos) << syntax.ToString();

  // The connection is still usable after errors outside a transaction.
  auto n = conn->Query("SELECT count(*) FROM t");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n->Int(0, 0), 1);
}

TEST_F(PostgresConnectionServerTest, MissingDatabaseIsNotFound) {
  FreshDatabase();  // the server is up
  const std::string url =
      "postgresql://blz@127.0.0.1:" + std::to_string(server().port()) + "/no_such_db";
  auto conn = Connection::Open(url);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kNotFound) << conn.status().ToString();
  EXPECT_NE(conn.status().message().find("no_such_db"), std::string::npos);
}

TEST_F(PostgresConnectionServerTest, TransactionRollsBackUnlessCommitted) {
  auto conn = Connection::Open(FreshDatabase());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_TRUE(conn->Exec("CREATE TABLE t (k TEXT)").ok());
  {
    auto tx = Transaction::Begin(&*conn);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(conn->Exec("INSERT INTO t VALUES ($1)", {Param::Text("dropped")}).ok());
  }  // destroyed without Commit: rolled back
  {
    auto tx = Transaction::Begin(&*conn);
    ASSERT_TRUE(tx.ok());
    auto ins = conn->Query("INSERT INTO t VALUES ($1)", {Param::Text("kept")});
    ASSERT_TRUE(ins.ok());
    EXPECT_EQ(ins->affected(), 1);
    ASSERT_TRUE(tx->Commit().ok());
  }
  auto rows = conn->Query("SELECT k FROM t");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1);
  EXPECT_EQ(rows->Text(0, 0), "kept");
}

TEST_F(PostgresConnectionServerTest, LostConnectionIsUnavailable) {
  const std::string url = FreshDatabase();
  auto conn = Connection::Open(url);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto pid = conn->Query("SELECT pg_backend_pid()");
  ASSERT_TRUE(pid.ok());
  auto admin = Connection::Open(url);
  ASSERT_TRUE(admin.ok());
  ASSERT_TRUE(admin->Exec("SELECT pg_terminate_backend($1::int)", {Param::Text(pid->Text(0, 0))})
                  .ok());
  auto after = conn->Query("SELECT 1");
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kUnavailable) << after.status().ToString();
  EXPECT_NE(after.status().message().find(url), std::string::npos) << after.status().ToString();
}

}  // namespace
}  // namespace blz::store::postgres
