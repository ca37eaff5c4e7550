// The PostgreSQL driver of store/sql.h: SQLite's parameter syntax rewritten, the Statement
// adapter's semantics (those of store/sqlite/sqlite.h), and Transaction::LockKey across
// connections, against a real PostgreSQL 15.
#include "store/postgres/sql_driver.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "store/postgres/connection.h"
#include "store/sql.h"
#include "tests/store/postgres/postgres_fixture.h"

namespace blz::store::postgres {
namespace {

TEST(TranslatePlaceholdersTest, RewritesParametersOutsideQuotesAndComments) {
  int n = 0;
  EXPECT_EQ(TranslatePlaceholders("SELECT a FROM t WHERE b = ?1 AND c > ?2 LIMIT ?3", &n),
            "SELECT a FROM t WHERE b = $1 AND c > $2 LIMIT $3");
  EXPECT_EQ(n, 3);
  // Plain "?" is one more than the largest so far (SQLite's rule); numbers may repeat.
  EXPECT_EQ(TranslatePlaceholders("VALUES (?, ?, ?5, ?, ?1)", &n), "VALUES ($1, $2, $5, $6, $1)");
  EXPECT_EQ(n, 6);
  // Not in literals (with '' escapes), quoted identifiers or comments.
  EXPECT_EQ(TranslatePlaceholders("SELECT '?1', 'it''s ?', \"col?\" -- what?\n, ?2 /* ?3 */",
                                  &n),
            "SELECT '?1', 'it''s ?', \"col?\" -- what?\n, $2 /* ?3 */");
  EXPECT_EQ(n, 2);
  EXPECT_EQ(TranslatePlaceholders("SELECT 1", &n), "SELECT 1");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(TranslatePlaceholders("?12?", &n), "$12$13");
}

class PostgresSqlDriverTest : public testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    url_ = FreshDatabase();
    auto db = OpenSqlDatabase(url_);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(*db);
  }
  std::string url_;
  sql::Database db_;
};

TEST_F(PostgresSqlDriverTest, StatementsBehaveAsSqlitesDo) {
  EXPECT_EQ(db_.engine(), "postgresql");
  EXPECT_GT(*db_.SchemaVersion(), 0);
  ASSERT_TRUE(db_.Exec("CREATE TABLE x (k TEXT PRIMARY KEY, n BIGINT, b BYTEA, f BOOLEAN)").ok());
  const std::string bytes("\0\x01\xff\\x00'", 7);
  {
    auto st = db_.Prepare("INSERT INTO x (k, n, b, f) VALUES (?1, ?2, ?3, ?4)");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(st->Bind(1, "a").ok());
    ASSERT_TRUE(st->Bind(2, int64_t(-7)).ok());
    ASSERT_TRUE(st->BindBlob(3, bytes).ok());
    ASSERT_TRUE(st->Bind(4, "true").ok());
    ASSERT_TRUE(st->Run().ok());
    // Binding again starts the statement over (sqlite3_reset); an unbound parameter is NULL.
    ASSERT_TRUE(st->Bind(1, "b").ok());
    ASSERT_TRUE(st->BindNull(2).ok());
    ASSERT_TRUE(st->BindBlob(3, "").ok());
    ASSERT_TRUE(st->BindNull(4).ok());
    ASSERT_TRUE(st->Run().ok());
  }
  auto st = db_.Prepare("SELECT k, n, b, f FROM x ORDER BY k");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(*st->Step());
  EXPECT_EQ(st->ColumnText(0), "a");
  EXPECT_EQ(st->ColumnInt(1), -7);
  EXPECT_EQ(st->ColumnBlob(2), bytes);
  EXPECT_EQ(st->ColumnInt(3), 1);  // a boolean reads as 1 / 0
  ASSERT_TRUE(*st->Step());
  EXPECT_EQ(st->ColumnText(0), "b");
  EXPECT_TRUE(st->ColumnIsNull(1));
  EXPECT_EQ(st->ColumnInt(1), 0);
  EXPECT_FALSE(st->ColumnIsNull(2));  // an empty BYTEA is not NULL
  EXPECT_EQ(st->ColumnBlob(2), "");
  EXPECT_TRUE(st->ColumnIsNull(3));
  EXPECT_FALSE(*st->Step());
  EXPECT_FALSE(*st->Step());  // stays done

  auto bad = db_.Prepare("SELECT ?1");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->Bind(2, "x").code(), Code::kInternal);  // no such parameter
  auto dup = db_.Prepare("INSERT INTO x (k) VALUES (?1)");
  ASSERT_TRUE(dup.ok());
  ASSERT_TRUE(dup->Bind(1, "a").ok());
  EXPECT_EQ(dup->Run().code(), Code::kAlreadyExists);
}

TEST_F(PostgresSqlDriverTest, TransactionsRollBackUnlessCommitted) {
  ASSERT_TRUE(db_.Exec("CREATE TABLE y (k TEXT PRIMARY KEY)").ok());
  {
    auto tx = sql::Transaction::Begin(&db_);
    ASSERT_TRUE(tx.ok());
    auto st = db_.Prepare("INSERT INTO y VALUES ('gone')");
    ASSERT_TRUE(st->Run().ok());
  }
  {
    auto tx = sql::Transaction::Begin(&db_);
    ASSERT_TRUE(tx.ok());
    auto st = db_.Prepare("INSERT INTO y VALUES ('kept')");
    ASSERT_TRUE(st->Run().ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  auto st = db_.Prepare("SELECT string_agg(k, ',') FROM y");
  ASSERT_TRUE(*st->Step());
  EXPECT_EQ(st->ColumnText(0), "kept");
}

// LockKey serializes transactions of different connections (replicas) on the same name.
TEST_F(PostgresSqlDriverTest, LockKeyWaitsForTheHoldersTransaction) {
  auto other = OpenSqlDatabase(url_);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto tx = sql::Transaction::Begin(&db_);
  ASSERT_TRUE(tx.ok());
  ASSERT_TRUE(tx->LockKey("uploads").ok());
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    auto tx2 = sql::Transaction::Begin(&*other);
    ASSERT_TRUE(tx2.ok());
    ASSERT_TRUE(tx2->LockKey("uploads").ok());
    acquired = true;
    ASSERT_TRUE(tx2->Commit().ok());
  });
  // Wait until the server reports the second connection waiting for the advisory lock.
  auto watcher = Connection::Open(url_);
  ASSERT_TRUE(watcher.ok());
  bool waiting = false;
  for (int i = 0; i < 600 && !waiting; ++i) {
    auto rows = watcher->Query(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
    ASSERT_TRUE(rows.ok());
    waiting = *rows->Int(0, 0) > 0;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(waiting);
  EXPECT_FALSE(acquired.load());
  ASSERT_TRUE(tx->Commit().ok());
  waiter.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_NE(LockKeyOf("uploads"), LockKeyOf("tokens"));
}

// A kSnapshot transaction reads one snapshot (MetadataDb::ReadGcRoots relies on it): rows
// another connection commits meanwhile are not seen; a kWrite one (READ COMMITTED) sees them.
TEST_F(PostgresSqlDriverTest, SnapshotTransactionsReadOneSnapshot) {
  ASSERT_TRUE(db_.Exec("CREATE TABLE z (k TEXT PRIMARY KEY)").ok());
  auto other = OpenSqlDatabase(url_);
  ASSERT_TRUE(other.ok());
  auto count = [&]() -> int64_t {
    auto st = db_.Prepare("SELECT count(*) FROM z");
    EXPECT_TRUE(st.ok() && *st->Step());
    return st.ok() ? st->ColumnInt(0) : -1;
  };
  auto insert = [&](const std::string& k) {
    auto st = other->Prepare("INSERT INTO z VALUES (?1)");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(st->Bind(1, k).ok());
    ASSERT_TRUE(st->Run().ok());
  };
  for (auto mode : {sql::TransactionMode::kSnapshot, sql::TransactionMode::kWrite}) {
    auto tx = sql::Transaction::Begin(&db_, mode);
    ASSERT_TRUE(tx.ok());
    const int64_t before = count();
    insert(mode == sql::TransactionMode::kSnapshot ? "s" : "w");
    EXPECT_EQ(count(), mode == sql::TransactionMode::kSnapshot ? before : before + 1);
    ASSERT_TRUE(tx->Commit().ok());
  }
}

}  // namespace
}  // namespace blz::store::postgres
