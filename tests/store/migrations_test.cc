#include "store/migrations.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/digest.h"
#include "store/metadata_db.h"
#include "store/sqlite/migrations.h"
#include "store/sqlite/sqlite.h"
#include "tests/test_util.h"

namespace blz::store {
namespace {

std::vector<std::string> Tables(sqlite::Database* db) {
  std::vector<std::string> out;
  auto st = db->Prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
  EXPECT_TRUE(st.ok());
  while (true) {
    auto row = st->Step();
    EXPECT_TRUE(row.ok());
    if (!row.ok() || !*row) break;
    out.push_back(st->ColumnText(0));
  }
  return out;
}

TEST(MigrationsTest, EmbeddedFilesAreNumberedFromOne) {
  auto all = EmbeddedMigrations();
  ASSERT_FALSE(all.empty());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].version, int(i) + 1);
    EXPECT_FALSE(all[i].sql.empty());
  }
  EXPECT_EQ(all[0].name, "0001_init.sql");
  EXPECT_EQ(LatestSchemaVersion(), all.back().version);
  // The embedded bytes are the file's bytes.
  EXPECT_EQ(all[0].sql,
            testing::ReadFileBytes(std::string(BLZ_SOURCE_DIR) + "/migrations/0001_init.sql"));
}

TEST(MigrationsTest, AppliesAllAndSetsUserVersion) {
  testing::TempDir tmp;
  auto db = sqlite::Database::Open(tmp / "m.db");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(ApplyMigrations(&*db, EmbeddedMigrations()).ok());
  EXPECT_EQ(*db->PragmaInt("user_version"), LatestSchemaVersion());
  std::vector<std::string> want = {"archive_chains", "archive_tensors", "blobs",
                                   "gc_deletions",   "jobs",
                                   "lossy_deltas", "manifest_blobs", "manifests",
                                   "patches",      "raw_archive_reads", "repositories",
                                   "repository_blobs",
                                   "settings",     "tags",           "tokens",
                                   "uploads",      "value_diffs",    "version_files",
                                   "version_stats", "versions"};
  EXPECT_EQ(Tables(&*db), want);
}

TEST(MigrationsTest, ReapplyingIsANoOp) {
  testing::TempDir tmp;
  {
    auto db = MetadataDb::Open(tmp / "m.db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE((*db)->CreateToken("keep-me").ok());
  }
  // Opening again re-runs ApplyMigrations: nothing is re-created, data survives.
  auto db = MetadataDb::Open(tmp / "m.db");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ(*(*db)->SchemaVersion(), LatestSchemaVersion());
  EXPECT_EQ(*(*db)->CountTokens("keep-me"), 1);
  auto raw = sqlite::Database::Open(tmp / "m.db");
  ASSERT_TRUE(raw.ok());
  EXPECT_TRUE(ApplyMigrations(&*raw, EmbeddedMigrations()).ok());
}

TEST(MigrationsTest, Version1DatabaseMigratesToVersion2KeepingItsData) {
  testing::TempDir tmp;
  const std::string archive = "sha256:" + std::string(64, 'a');
  const std::string manifest = "sha256:" + std::string(64, 'b');
  {
    // A DB as a version-1 binary left it: schema 1 and one tagged version.
    auto db = sqlite::Database::Open(tmp / "m.db");
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(ApplyMigrations(&*db, EmbeddedMigrations().subspan(0, 1)).ok());
    ASSERT_EQ(*db->PragmaInt("user_version"), 1);
    Status s = db->Exec(
        "INSERT INTO repositories (id, name, created) VALUES (1, 'org/m', 10);"
        "INSERT INTO manifests VALUES (1, '" + manifest + "', 'mt', x'7b7d', 11);"
        "INSERT INTO tags VALUES (1, 'v1', '" + manifest + "', 12);"
        "INSERT INTO versions VALUES (1, '" + archive + "', '" + manifest + "', 123, 13);"
        "INSERT INTO patches VALUES ('" + archive + "', '" + archive + "', '" + manifest +
        "', 5, 1, 14);");
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto db = MetadataDb::Open(tmp / "m.db");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ(*(*db)->SchemaVersion(), LatestSchemaVersion());
  // Everything is still there; the version's structural hash is unknown until backfilled.
  EXPECT_EQ(*(*db)->ResolveTag("org/m", "v1"), manifest);
  EXPECT_EQ((*db)->GetManifest("org/m", manifest)->content, "{}");
  auto v = (*db)->FindVersion("org/m", archive);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->manifest_digest, manifest);
  EXPECT_EQ(v->archive_size, 123u);
  EXPECT_EQ(v->created, 13);
  EXPECT_EQ(v->structural_hash, "");
  EXPECT_EQ((*db)->FindPatch(archive, archive)->patch_size, 5u);
  EXPECT_EQ(*(*db)->ArchivesWithoutStructure(), std::vector<std::string>{archive});
  ASSERT_TRUE((*db)->SetStructuralHash(archive, std::string(64, 'c')).ok());
  auto listed = (*db)->ListStructureVersions(std::string(64, 'c'), std::nullopt, {});
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0].tag, "v1");
  // The new column refuses values that are not 64 characters long.
  auto raw = sqlite::Database::Open(tmp / "m.db");
  ASSERT_TRUE(raw.ok());
  EXPECT_FALSE(raw->Exec("UPDATE versions SET structural_hash = 'short'").ok());
}

TEST(MigrationsTest, Version2TokensBecomeFullAccessTokens) {
  testing::TempDir tmp;
  const std::string token(64, 'e');
  {
    // A version-2 DB with its admin token (and, as a hand-edited DB might have, a duplicate).
    auto db = sqlite::Database::Open(tmp / "m.db");
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(ApplyMigrations(&*db, EmbeddedMigrations().subspan(0, 2)).ok());
    Status s = db->Exec("INSERT INTO tokens VALUES ('" + Sha256Hex(token) + "', 'admin', 10);"
                        "INSERT INTO tokens VALUES ('" + std::string(64, 'f') + "', 'admin', 11);");
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto db = MetadataDb::Open(tmp / "m.db");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto rec = (*db)->FindToken(token);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->scope, kFullAccessScope);
  EXPECT_FALSE(rec->expires.has_value());
  EXPECT_FALSE(rec->revoked.has_value());
  EXPECT_TRUE(*(*db)->VerifyToken(token));
  // The younger duplicate name was revoked so that active names are unique.
  EXPECT_EQ(*(*db)->CountTokens("admin"), 1);
  EXPECT_EQ((*db)->ListTokens()->size(), 1u);
}

TEST(MigrationsTest, NewerDatabaseIsRefused) {
  testing::TempDir tmp;
  {
    auto db = sqlite::Database::Open(tmp / "m.db");
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->Exec("CREATE TABLE future (x); PRAGMA user_version = 999").ok());
  }
  auto db = MetadataDb::Open(tmp / "m.db");
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), Code::kUnsupported);
  EXPECT_NE(db.status().message().find("newer than this binary"), std::string::npos);
  // Left untouched.
  auto raw = sqlite::Database::Open(tmp / "m.db");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw->PragmaInt("user_version"), 999);
}

TEST(MigrationsTest, FailingMigrationRollsBack) {
  testing::TempDir tmp;
  auto db = sqlite::Database::Open(tmp / "m.db");
  ASSERT_TRUE(db.ok());
  const Migration steps[] = {
      {1, "0001_a.sql", "CREATE TABLE a (x INTEGER);"},
      {2, "0002_b.sql", "CREATE TABLE b (x INTEGER); THIS IS NOT SQL;"},
  };
  Status s = ApplyMigrations(&*db, steps);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0002_b.sql"), std::string::npos);
  EXPECT_EQ(*db->PragmaInt("user_version"), 1);
  EXPECT_EQ(Tables(&*db), std::vector<std::string>{"a"});  // b rolled back
}

TEST(MigrationsTest, GapsInNumberingAreABug) {
  testing::TempDir tmp;
  auto db = sqlite::Database::Open(tmp / "m.db");
  ASSERT_TRUE(db.ok());
  const Migration steps[] = {{1, "0001_a.sql", "SELECT 1;"}, {3, "0003_c.sql", "SELECT 1;"}};
  EXPECT_EQ(ApplyMigrations(&*db, steps).code(), Code::kInternal);
  EXPECT_EQ(*db->PragmaInt("user_version"), 0);
}

TEST(MigrationsTest, NotADatabaseIsCorruption) {
  testing::TempDir tmp;
  testing::WriteFileBytes(tmp / "m.db", std::string(4096, 'z'));
  auto db = MetadataDb::Open(tmp / "m.db");
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), Code::kCorruption) << db.status().ToString();
}

TEST(MigrationsTest, OpenUsesWal) {
  testing::TempDir tmp;
  ASSERT_TRUE(MetadataDb::Open(tmp / "m.db").ok());
  auto raw = sqlite::Database::Open(tmp / "m.db");
  ASSERT_TRUE(raw.ok());
  auto st = raw->Prepare("PRAGMA journal_mode");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(*st->Step());
  EXPECT_EQ(st->ColumnText(0), "wal");
}

}  // namespace
}  // namespace blz::store
