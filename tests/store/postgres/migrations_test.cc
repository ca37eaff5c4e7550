#include "store/postgres/migrations.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/migrations.h"
#include "store/postgres/connection.h"
#include "store/sqlite/migrations.h"
#include "store/sqlite/sqlite.h"
#include "tests/store/postgres/postgres_fixture.h"
#include "tests/test_util.h"

namespace blz::store::postgres {
namespace {

using PostgresMigrationsTest = blz::testing::PostgresTest;

std::vector<std::string> Column(Connection* conn, std::string_view sql,
                                const std::vector<Param>& params = {}) {
  std::vector<std::string> out;
  auto rows = conn->Query(sql, params);
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  if (!rows.ok()) return out;
  for (int r = 0; r < rows->size(); ++r) out.push_back(rows->Text(r, 0));
  return out;
}

int64_t Count(Connection* conn, std::string_view sql) {
  auto rows = conn->Query(sql);
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  return rows.ok() ? *rows->Int(0, 0) : -1;
}

TEST(PostgresMigrationFilesTest, OnePostgresFilePerSqliteFileWithTheSameName) {
  auto pg = EmbeddedMigrations();
  auto lite = store::EmbeddedMigrations();
  ASSERT_EQ(pg.size(), lite.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pg[i].version, int(i) + 1);
    EXPECT_EQ(pg[i].name, lite[i].name);
    EXPECT_FALSE(pg[i].sql.empty());
  }
  // The embedded bytes are the file's bytes.
  EXPECT_EQ(pg[0].sql, blz::testing::ReadFileBytes(std::string(BLZ_SOURCE_DIR) +
                                                   "/migrations/postgres/0001_init.sql"));
}

TEST_F(PostgresMigrationsTest, AppliesAllThenReapplyingIsANoOp) {
  auto conn = Connection::Open(FreshDatabase());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_EQ(*SchemaVersion(&*conn), 0);
  auto first = ApplyMigrations(&*conn, EmbeddedMigrations());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, int(EmbeddedMigrations().size()));
  EXPECT_EQ(*SchemaVersion(&*conn), store::LatestSchemaVersion());
  std::vector<std::string> names;
  for (const Migration& m : EmbeddedMigrations()) names.push_back(std::string(m.name));
  EXPECT_EQ(Column(&*conn, "SELECT name FROM schema_migrations ORDER BY version"), names);

  ASSERT_TRUE(conn->Exec("INSERT INTO tokens (token_sha256, name, created) VALUES ($1, $2, $3)",
                         {Param::Text(std::string(64, 'a')), Param::Text("keep-me"),
                          Param::Int(1)})
                  .ok());
  // Again, on this connection and on a new one: nothing applied, data kept.
  auto second = ApplyMigrations(&*conn, EmbeddedMigrations());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, 0);
  auto other = Connection::Open(conn->label());
  ASSERT_TRUE(other.ok());
  auto third = ApplyMigrations(&*other, EmbeddedMigrations());
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(*third, 0);
  EXPECT_EQ(Count(&*conn, "SELECT count(*) FROM schema_migrations"),
            int64_t(EmbeddedMigrations().size()));
  EXPECT_EQ(Count(&*conn, "SELECT count(*) FROM tokens WHERE name = 'keep-me'"), 1);
  // The lock was released: another session can take it at once.
  auto free = other->Query("SELECT pg_try_advisory_lock($1)", {Param::Int(kMigrationLockKey)});
  ASSERT_TRUE(free.ok());
  EXPECT_EQ(free->Text(0, 0), "t");
}

TEST_F(PostgresMigrationsTest, ConcurrentRunnersApplyEachMigrationExactlyOnce) {
  // Several databases, to give a missing lock more than one chance to show.
  for (int round = 0; round < 3; ++round) {
    const std::string url = FreshDatabase();
    std::atomic<int> ready{0};
    Result<int> results[2] = {Status(Code::kInternal, "not run"),
                              Status(Code::kInternal, "not run")};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        auto conn = Connection::Open(url);
        if (!conn.ok()) {
          results[t] = conn.status();
          ready.fetch_add(1);
          return;
        }
        ready.fetch_add(1);
        while (ready.load() < 2) std::this_thread::yield();  // start together
        results[t] = ApplyMigrations(&*conn, EmbeddedMigrations());
      });
    }
    for (auto& th : threads) th.join();
    ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
    ASSERT_TRUE(results[1].ok()) << results[1].status().ToString();
    EXPECT_EQ(*results[0] + *results[1], int(EmbeddedMigrations().size()));
    auto conn = Connection::Open(url);
    ASSERT_TRUE(conn.ok());
    EXPECT_EQ(Count(&*conn, "SELECT count(*) FROM schema_migrations"),
              int64_t(EmbeddedMigrations().size()));
    EXPECT_EQ(*SchemaVersion(&*conn), store::LatestSchemaVersion());
  }
}

TEST_F(PostgresMigrationsTest, NewerDatabaseIsRefusedAndLeftUntouched) {
  auto conn = Connection::Open(FreshDatabase());
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(ApplyMigrations(&*conn, EmbeddedMigrations()).ok());
  ASSERT_TRUE(conn->Exec("INSERT INTO schema_migrations VALUES (99, '0099_future.sql', 0)").ok());
  auto r = ApplyMigrations(&*conn, EmbeddedMigrations());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find("newer than this binary"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(*SchemaVersion(&*conn), 99);
}

TEST_F(PostgresMigrationsTest, FailingMigrationLeavesThePreviousVersion) {
  auto conn = Connection::Open(FreshDatabase());
  ASSERT_TRUE(conn.ok());
  const Migration bad[] = {
      {1, "0001_a.sql", "CREATE TABLE a (x BIGINT);"},
      {2, "0002_b.sql", "CREATE TABLE b (x BIGINT); SELECT no_such_column FROM a;"},
  };
  auto r = ApplyMigrations(&*conn, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("0002_b.sql"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("SQLSTATE 42703"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(*SchemaVersion(&*conn), 1);
  EXPECT_EQ(Column(&*conn, "SELECT to_regclass('b') IS NULL")[0], "t");  // rolled back

  const Migration gap[] = {{1, "0001_a.sql", "SELECT 1"}, {3, "0003_c.sql", "SELECT 1"}};
  EXPECT_EQ(ApplyMigrations(&*conn, gap).status().code(), Code::kInternal);
}

// ---- schema parity with SQLite ----

struct TableShape {
  std::vector<std::string> columns;     // "name type [not null]", in order
  std::vector<std::string> primary_key;  // columns in key order
  std::set<std::string> indexes;        // "name: cols [unique] [partial]" (named ones)
  std::set<std::string> uniques;        // "cols [partial]" of every unique index but the key
  std::set<std::string> foreign_keys;   // "cols -> table(cols)"
};

std::string PgType(const std::string& sqlite_type) {
  if (sqlite_type == "INTEGER") return "bigint";
  if (sqlite_type == "TEXT") return "text";
  if (sqlite_type == "BLOB") return "bytea";
  return "?" + sqlite_type;
}

std::vector<std::vector<std::string>> SqliteRows(sqlite::Database* db, const std::string& sql,
                                                 int columns) {
  std::vector<std::vector<std::string>> out;
  auto st = db->Prepare(sql);
  EXPECT_TRUE(st.ok()) << sql;
  if (!st.ok()) return out;
  while (true) {
    auto row = st->Step();
    EXPECT_TRUE(row.ok());
    if (!row.ok() || !*row) break;
    std::vector<std::string> r;
    for (int c = 0; c < columns; ++c) r.push_back(st->ColumnIsNull(c) ? "" : st->ColumnText(c));
    out.push_back(r);
  }
  return out;
}

std::map<std::string, TableShape> SqliteSchema(sqlite::Database* db) {
  std::map<std::string, TableShape> out;
  for (const auto& t : SqliteRows(db, "SELECT name FROM sqlite_master WHERE type = 'table' "
                                      "AND name NOT LIKE 'sqlite_%'", 1)) {
    const std::string& table = t[0];
    TableShape& shape = out[table];
    std::map<int, std::string> pk;
    // cid, name, type, notnull, dflt_value, pk
    for (const auto& c : SqliteRows(db, "PRAGMA table_info(" + table + ")", 6)) {
      const bool in_pk = c[5] != "0";
      if (in_pk) pk[std::stoi(c[5])] = c[1];
      // A key column is never NULL (PostgreSQL enforces it; SQLite's rowid does too).
      const bool not_null = c[3] != "0" || in_pk;
      shape.columns.push_back(c[1] + " " + PgType(c[2]) + (not_null ? " not null" : ""));
    }
    for (const auto& [i, name] : pk) shape.primary_key.push_back(name);
    // seq, name, unique, origin, partial
    for (const auto& ix : SqliteRows(db, "PRAGMA index_list(" + table + ")", 5)) {
      if (ix[3] == "pk") continue;
      std::string cols;
      for (const auto& c : SqliteRows(db, "PRAGMA index_info(" + ix[1] + ")", 3)) {
        cols += (cols.empty() ? "" : ",") + c[2];
      }
      const std::string partial = ix[4] == "1" ? " partial" : "";
      if (ix[2] == "1") shape.uniques.insert(cols + partial);
      if (ix[3] == "c") {
        shape.indexes.insert(ix[1] + ": " + cols + (ix[2] == "1" ? " unique" : "") + partial);
      }
    }
    // id, seq, table, from, to, ...
    std::map<int, std::vector<std::string>> fk;
    for (const auto& f : SqliteRows(db, "PRAGMA foreign_key_list(" + table + ")", 5)) {
      fk[std::stoi(f[0])].insert(fk[std::stoi(f[0])].end(), {f[2], f[3], f[4]});
    }
    for (const auto& [id, parts] : fk) {
      std::string from, to;
      for (size_t i = 0; i < parts.size(); i += 3) {
        from += (from.empty() ? "" : ",") + parts[i + 1];
        to += (to.empty() ? "" : ",") + parts[i + 2];
      }
      shape.foreign_keys.insert(from + " -> " + parts[0] + "(" + to + ")");
    }
  }
  return out;
}

std::map<std::string, TableShape> PostgresSchema(Connection* conn) {
  std::map<std::string, TableShape> out;
  for (const std::string& table : Column(conn,
           "SELECT table_name FROM information_schema.tables "
           "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")) {
    TableShape& shape = out[table];
    auto cols = conn->Query(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        {Param::Text(table)});
    EXPECT_TRUE(cols.ok()) << cols.status().ToString();
    for (int r = 0; cols.ok() && r < cols->size(); ++r) {
      // "rowid": the counterpart of SQLite's implicit rowid (migrations/postgres/0001_init.sql).
      if (cols->Text(r, 0) == "rowid") continue;
      shape.columns.push_back(cols->Text(r, 0) + " " + cols->Text(r, 1) +
                              (cols->Text(r, 2) == "NO" ? " not null" : ""));
    }
    // Each index: name, its columns in order, unique, primary, partial.
    auto ixs = conn->Query(
        "SELECT c.relname, "
        "  (SELECT string_agg(a.attname, ',' ORDER BY k.ord) "
        "     FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(n, ord) "
        "     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n), "
        "  i.indisunique, i.indisprimary, i.indpred IS NOT NULL "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = $1::regclass",
        {Param::Text(table)});
    EXPECT_TRUE(ixs.ok()) << ixs.status().ToString();
    std::set<std::string> constraint_indexes(
        [&] {
          auto v = Column(conn, "SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass",
                          {Param::Text(table)});
          return std::set<std::string>(v.begin(), v.end());
        }());
    for (int r = 0; ixs.ok() && r < ixs->size(); ++r) {
      const std::string name = ixs->Text(r, 0), ix_cols = ixs->Text(r, 1);
      const bool unique = ixs->Text(r, 2) == "t", primary = ixs->Text(r, 3) == "t";
      const std::string partial = ixs->Text(r, 4) == "t" ? " partial" : "";
      if (primary) {
        std::string c;
        for (char ch : ix_cols + ",") {
          if (ch == ',') {
            shape.primary_key.push_back(c);
            c.clear();
          } else {
            c.push_back(ch);
          }
        }
        continue;
      }
      if (ix_cols == "rowid") continue;  // SQLite's rowid is unique too, without an index
      if (unique) shape.uniques.insert(ix_cols + partial);
      if (constraint_indexes.count(name) == 0) {  // created by CREATE INDEX
        shape.indexes.insert(name + ": " + ix_cols + (unique ? " unique" : "") + partial);
      }
    }
    auto fks = conn->Query(
        "SELECT (SELECT string_agg(a.attname, ',' ORDER BY k.ord) "
        "          FROM unnest(c.conkey) WITH ORDINALITY AS k(n, ord) "
        "          JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n) "
        "    || ' -> ' || c.confrelid::regclass::text || '(' || "
        "       (SELECT string_agg(a.attname, ',' ORDER BY k.ord) "
        "          FROM unnest(c.confkey) WITH ORDINALITY AS k(n, ord) "
        "          JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n) || ')' "
        "FROM pg_constraint c WHERE c.conrelid = $1::regclass AND c.contype = 'f'",
        {Param::Text(table)});
    EXPECT_TRUE(fks.ok()) << fks.status().ToString();
    for (int r = 0; fks.ok() && r < fks->size(); ++r) shape.foreign_keys.insert(fks->Text(r, 0));
  }
  return out;
}

TEST_F(PostgresMigrationsTest, SchemaMatchesTheSqliteSchema) {
  blz::testing::TempDir tmp;
  auto lite = sqlite::Database::Open(tmp / "meta.db");
  ASSERT_TRUE(lite.ok()) << lite.status().ToString();
  ASSERT_TRUE(sqlite::ApplyMigrations(&*lite, store::EmbeddedMigrations()).ok());
  auto conn = Connection::Open(FreshDatabase());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto applied = ApplyMigrations(&*conn, EmbeddedMigrations());
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();

  const auto want = SqliteSchema(&*lite);
  auto got = PostgresSchema(&*conn);
  ASSERT_EQ(got.count("schema_migrations"), 1u);  // PostgreSQL's counterpart of user_version
  got.erase("schema_migrations");
  ASSERT_FALSE(want.empty());
  std::set<std::string> want_tables, got_tables;
  for (const auto& [t, s] : want) want_tables.insert(t);
  for (const auto& [t, s] : got) got_tables.insert(t);
  EXPECT_EQ(got_tables, want_tables);
  for (const auto& [table, shape] : want) {
    SCOPED_TRACE("table " + table);
    auto it = got.find(table);
    if (it == got.end()) continue;
    EXPECT_EQ(it->second.columns, shape.columns);
    EXPECT_EQ(it->second.primary_key, shape.primary_key);
    EXPECT_EQ(it->second.indexes, shape.indexes);
    EXPECT_EQ(it->second.uniques, shape.uniques);
    EXPECT_EQ(it->second.foreign_keys, shape.foreign_keys);
  }
}

}  // namespace
}  // namespace blz::store::postgres
