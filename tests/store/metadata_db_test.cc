#include "store/metadata_db.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "core/digest.h"
#include "store/sqlite.h"
#include "tests/test_util.h"

namespace blz::store {
namespace {

std::string D(std::string_view seed) { return MakeDigest(Sha256Hex(seed)); }

class MetadataDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = MetadataDb::Open(tmp_ / "blz.db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(*db);
  }
  Status Push(const std::string& repo, const std::string& tag, const std::string& seed) {
    ManifestPut put;
    put.repository = repo;
    put.digest = D("manifest-" + seed);
    put.media_type = "application/vnd.oci.image.manifest.v1+json";
    put.content = "{\"seed\":\"" + seed + "\"}";
    put.tag = tag;
    put.archive_digest = D("archive-" + seed);
    put.archive_size = 1000 + seed.size();
    return db_->PutManifest(put);
  }
  testing::TempDir tmp_;
  std::unique_ptr<MetadataDb> db_;
};

TEST_F(MetadataDbTest, BrowseQueries) {
  ASSERT_TRUE(Push("org/model", "v1", "a").ok());
  ASSERT_TRUE(Push("org/model", "latest", "a").ok());
  ASSERT_TRUE(Push("org/model", "v2", "b").ok());
  ASSERT_TRUE(Push("other/thing", "v1", "c").ok());
  ASSERT_TRUE(Push("100%_odd", "v1", "d").ok());
  EXPECT_EQ(*db_->ListRepositoryNames(""),
            (std::vector<std::string>{"100%_odd", "org/model", "other/thing"}));
  EXPECT_EQ(*db_->ListRepositoryNames("o"),
            (std::vector<std::string>{"100%_odd", "org/model", "other/thing"}));
  EXPECT_EQ(*db_->ListRepositoryNames("model"), (std::vector<std::string>{"org/model"}));
  // A plain substring: no LIKE wildcards.
  EXPECT_EQ(*db_->ListRepositoryNames("%"), (std::vector<std::string>{"100%_odd"}));
  EXPECT_TRUE(db_->ListRepositoryNames("_x")->empty());

  auto tags = db_->ListTagTargets("org/model");
  ASSERT_TRUE(tags.ok());
  ASSERT_EQ(tags->size(), 3u);
  EXPECT_EQ((*tags)[0].tag, "latest");
  EXPECT_EQ((*tags)[0].manifest_digest, D("manifest-a"));
  EXPECT_EQ((*tags)[2].tag, "v2");
  EXPECT_EQ((*tags)[2].manifest_digest, D("manifest-b"));
  EXPECT_TRUE(db_->ListTagTargets("no/such")->empty());

  EXPECT_EQ(db_->FindVersionStats(D("archive-a")).status().code(), Code::kNotFound);
  ASSERT_TRUE(db_->RecordVersionStats({D("archive-a"), D("stats-1"), 10}).ok());
  ASSERT_TRUE(db_->RecordVersionStats({D("archive-a"), D("stats-2"), 20}).ok());  // replaces
  auto st = db_->FindVersionStats(D("archive-a"));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->stats_digest, D("stats-2"));
  EXPECT_EQ(st->stats_size, 20u);
  EXPECT_TRUE(*db_->BlobReferenced(D("stats-2"), 0));
  auto roots = db_->ReadGcRoots(0);
  ASSERT_TRUE(roots.ok());
  ASSERT_EQ(roots->version_stats.size(), 1u);
  EXPECT_EQ(roots->version_stats[0].from_digest, "");
  EXPECT_EQ(roots->version_stats[0].to_digest, D("archive-a"));
  ASSERT_TRUE(db_->ForgetDerived("version_stats", roots->version_stats[0]).ok());
  EXPECT_EQ(db_->FindVersionStats(D("archive-a")).status().code(), Code::kNotFound);
}

TEST_F(MetadataDbTest, LossyDeltaRoundTripAndGc) {
  const std::string a = D("archive-a"), b = D("archive-b");
  EXPECT_EQ(db_->FindLossyDelta(a, b, "strategy=bitdelta").status().code(), Code::kNotFound);
  ASSERT_TRUE(db_->RecordLossyDelta({a, b, "strategy=bitdelta", D("delta-1"), 10, "{}"}).ok());
  ASSERT_TRUE(db_->RecordLossyDelta({a, b, "strategy=sparse&sparsity=0.5", D("delta-2"), 20,
                                     R"({"rel_l2":0.1})"})
                  .ok());
  // Replacing keeps one row per (from, to, params).
  ASSERT_TRUE(db_->RecordLossyDelta({a, b, "strategy=bitdelta", D("delta-3"), 30, "{}"}).ok());
  auto d = db_->FindLossyDelta(a, b, "strategy=sparse&sparsity=0.5");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->delta_digest, D("delta-2"));
  EXPECT_EQ(d->delta_size, 20u);
  EXPECT_EQ(d->report, R"({"rel_l2":0.1})");
  EXPECT_EQ(db_->FindLossyDelta(a, b, "strategy=bitdelta")->delta_digest, D("delta-3"));
  EXPECT_TRUE(*db_->BlobReferenced(D("delta-3"), 0));
  EXPECT_FALSE(*db_->BlobReferenced(D("delta-1"), 0));
  auto roots = db_->ReadGcRoots(0);
  ASSERT_TRUE(roots.ok());
  ASSERT_EQ(roots->lossy_deltas.size(), 2u);
  for (const auto& row : roots->lossy_deltas) {
    EXPECT_EQ(row.from_digest, a);
    EXPECT_EQ(row.to_digest, b);
    ASSERT_TRUE(db_->ForgetDerived("lossy_deltas", row).ok());
  }
  EXPECT_EQ(db_->FindLossyDelta(a, b, "strategy=bitdelta").status().code(), Code::kNotFound);
  EXPECT_FALSE(*db_->BlobReferenced(D("delta-2"), 0));
}

TEST_F(MetadataDbTest, ManifestTagAndVersionRoundTrip) {
  ASSERT_TRUE(Push("org/model", "v1", "a").ok());
  auto digest = db_->ResolveTag("org/model", "v1");
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(*digest, D("manifest-a"));
  auto m = db_->GetManifest("org/model", *digest);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->content, "{\"seed\":\"a\"}");
  EXPECT_EQ(m->media_type, "application/vnd.oci.image.manifest.v1+json");
  auto v = db_->FindVersion("org/model", D("archive-a"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->manifest_digest, D("manifest-a"));
  EXPECT_EQ(v->archive_size, 1001u);
  EXPECT_TRUE(*db_->RepositoryExists("org/model"));
  EXPECT_FALSE(*db_->RepositoryExists("org/other"));
  // Versions and manifests are per repository.
  EXPECT_EQ(db_->FindVersion("org/other", D("archive-a")).status().code(), Code::kNotFound);
  EXPECT_EQ(db_->GetManifest("org/other", *digest).status().code(), Code::kNotFound);
}

TEST_F(MetadataDbTest, MovingATagAndRepushing) {
  ASSERT_TRUE(Push("m", "latest", "a").ok());
  ASSERT_TRUE(Push("m", "latest", "b").ok());
  ASSERT_TRUE(Push("m", "latest", "b").ok());  // identical re-push
  EXPECT_EQ(*db_->ResolveTag("m", "latest"), D("manifest-b"));
  auto versions = db_->ListVersions("m");
  ASSERT_TRUE(versions.ok());
  ASSERT_EQ(versions->size(), 2u);
  EXPECT_EQ((*versions)[0].archive_digest, D("archive-a"));
  EXPECT_EQ((*versions)[1].archive_digest, D("archive-b"));
}

TEST_F(MetadataDbTest, MissingRowsAreNotFound) {
  EXPECT_EQ(db_->ResolveTag("m", "v1").status().code(), Code::kNotFound);
  EXPECT_EQ(db_->ListTags("m", std::nullopt, "").status().code(), Code::kNotFound);
  EXPECT_EQ(db_->FindPatch(D("x"), D("y")).status().code(), Code::kNotFound);
  EXPECT_EQ(db_->GetUpload("nope").status().code(), Code::kNotFound);
}

TEST_F(MetadataDbTest, TagsPaginateInLexicalOrder) {
  const std::vector<std::string> tags = {"v10", "v2", "A", "latest", "v1", "b_1"};
  for (const auto& t : tags) ASSERT_TRUE(Push("m", t, t).ok());
  auto all = db_->ListTags("m", std::nullopt, "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items, (std::vector<std::string>{"A", "b_1", "latest", "v1", "v10", "v2"}));
  EXPECT_FALSE(all->more);

  std::vector<std::string> walked;
  std::string last;
  for (int guard = 0; guard < 10; ++guard) {
    auto page = db_->ListTags("m", 4, last);
    ASSERT_TRUE(page.ok());
    ASSERT_LE(page->items.size(), 4u);
    walked.insert(walked.end(), page->items.begin(), page->items.end());
    if (!page->more) break;
    last = page->items.back();
  }
  EXPECT_EQ(walked, all->items);

  auto exact = db_->ListTags("m", 6, "");
  ASSERT_TRUE(exact.ok());
  EXPECT_FALSE(exact->more);
  auto zero = db_->ListTags("m", 0, "");
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->items.empty());
  EXPECT_TRUE(zero->more);
  auto after = db_->ListTags("m", std::nullopt, "v10");
  EXPECT_EQ(after->items, std::vector<std::string>{"v2"});
}

TEST_F(MetadataDbTest, CatalogPaginates) {
  for (const char* r : {"c/x", "a", "b/y", "b"}) ASSERT_TRUE(Push(r, "t", r).ok());
  auto p1 = db_->ListRepositories(2, "");
  ASSERT_TRUE(p1.ok());
  EXPECT_EQ(p1->items, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(p1->more);
  auto p2 = db_->ListRepositories(2, "b");
  EXPECT_EQ(p2->items, (std::vector<std::string>{"b/y", "c/x"}));
  EXPECT_FALSE(p2->more);
}

TEST_F(MetadataDbTest, TokensAreStoredHashed) {
  auto token = db_->CreateToken("admin");
  ASSERT_TRUE(token.ok());
  EXPECT_TRUE(IsLowerHex(*token, 64));
  EXPECT_TRUE(*db_->VerifyToken(*token));
  EXPECT_EQ(*db_->CountTokens("admin"), 1);
  std::string other = *token;
  other[0] = other[0] == 'a' ? 'b' : 'a';
  EXPECT_FALSE(*db_->VerifyToken(other));
  EXPECT_FALSE(*db_->VerifyToken(""));
  EXPECT_FALSE(*db_->VerifyToken("Bearer " + *token));
  EXPECT_FALSE(*db_->VerifyToken(Sha256Hex(*token)));  // the stored hash is not a token

  // Names are unique among active tokens.
  auto dup = db_->CreateToken("admin");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), Code::kAlreadyExists);
  auto second = db_->CreateToken("second");
  ASSERT_TRUE(second.ok());
  EXPECT_NE(*second, *token);

  // The DB holds only hashes: the token text itself appears nowhere.
  auto raw = sqlite::Database::Open(tmp_ / "blz.db");
  ASSERT_TRUE(raw.ok());
  auto st = raw->Prepare("SELECT token_sha256 FROM tokens");
  ASSERT_TRUE(st.ok());
  int rows = 0;
  while (*st->Step()) {
    ++rows;
    std::string stored = st->ColumnText(0);
    EXPECT_NE(stored, *token);
    EXPECT_NE(stored, *second);
    EXPECT_TRUE(stored == Sha256Hex(*token) || stored == Sha256Hex(*second));
  }
  EXPECT_EQ(rows, 2);
}

TEST_F(MetadataDbTest, ScopedTokensExpireAndAreRevoked) {
  // The default scope is full access, with no expiry.
  auto admin = db_->CreateToken("admin");
  ASSERT_TRUE(admin.ok());
  auto rec = db_->FindToken(*admin);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->name, "admin");
  EXPECT_EQ(rec->scope, kFullAccessScope);
  EXPECT_FALSE(rec->expires.has_value());
  EXPECT_FALSE(rec->revoked.has_value());

  const int64_t now = int64_t(std::time(nullptr));
  auto ci = db_->CreateToken("ci", "org/*:pull,push", now + 3600);
  ASSERT_TRUE(ci.ok());
  auto ci_rec = db_->FindToken(*ci);
  ASSERT_TRUE(ci_rec.ok());
  EXPECT_EQ(ci_rec->scope, "org/*:pull,push");
  EXPECT_EQ(ci_rec->expires, now + 3600);
  EXPECT_TRUE(ci_rec->ActiveAt(now));
  EXPECT_FALSE(ci_rec->ActiveAt(now + 3600));
  EXPECT_EQ(db_->GetTokenById(ci_rec->id)->name, "ci");
  EXPECT_EQ(db_->GetTokenById(ci_rec->id + 1000).status().code(), Code::kNotFound);

  // An already expired token is stored but never verifies.
  auto old = db_->CreateToken("old", "*:pull", now - 1);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(*db_->VerifyToken(*old));

  auto listed = db_->ListTokens();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].name, "admin");
  EXPECT_EQ((*listed)[1].name, "ci");
  EXPECT_EQ((*listed)[2].name, "old");

  // Revocation: at once, the row stays (by id) marked, and the name becomes free.
  ASSERT_TRUE(db_->RevokeToken("ci").ok());
  EXPECT_FALSE(*db_->VerifyToken(*ci));
  auto revoked = db_->GetTokenById(ci_rec->id);
  ASSERT_TRUE(revoked.ok());
  EXPECT_TRUE(revoked->revoked.has_value());
  EXPECT_FALSE(revoked->ActiveAt(now));
  EXPECT_EQ(db_->RevokeToken("ci").code(), Code::kNotFound);
  EXPECT_EQ(db_->RevokeToken("nobody").code(), Code::kNotFound);
  EXPECT_EQ(*db_->CountTokens("ci"), 0);
  EXPECT_EQ(db_->ListTokens()->size(), 2u);
  auto again = db_->CreateToken("ci", "org/*:pull");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*db_->VerifyToken(*again));
  EXPECT_FALSE(*db_->VerifyToken(*ci));
  EXPECT_TRUE(*db_->VerifyToken(*admin));
}

TEST_F(MetadataDbTest, PatchesAndUploads) {
  ASSERT_TRUE(Push("m", "v1", "a").ok());
  PatchRecord p{D("archive-a"), D("archive-b"), D("patch"), 42};
  ASSERT_TRUE(db_->RecordPatch("m", p).ok());
  auto found = db_->FindPatch(D("archive-a"), D("archive-b"));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->patch_digest, D("patch"));
  EXPECT_EQ(found->patch_size, 42u);
  EXPECT_EQ(db_->FindPatch(D("archive-b"), D("archive-a")).status().code(), Code::kNotFound);
  ASSERT_TRUE(db_->RecordPatch("", PatchRecord{D("x"), D("y"), D("z"), 1}).ok());

  ASSERT_TRUE(db_->CreateUpload("u-1", "m").ok());
  EXPECT_FALSE(db_->CreateUpload("u-1", "m").ok());  // primary key
  auto u = db_->GetUpload("u-1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->repository, "m");
  ASSERT_TRUE(db_->DeleteUpload("u-1").ok());
  EXPECT_EQ(db_->GetUpload("u-1").status().code(), Code::kNotFound);
}

TEST_F(MetadataDbTest, ConcurrentWritersAreSerialized) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < 10; ++i) {
        EXPECT_TRUE(Push("m", "t" + std::to_string(t) + "-" + std::to_string(i),
                         std::to_string(t * 100 + i))
                        .ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  auto all = db_->ListTags("m", std::nullopt, "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), 40u);
}

// ---- structural hashes and value diffs (migrations/0002_structures.sql) ----

std::string Hash(char c) { return std::string(64, c); }

class StructureTest : public MetadataDbTest {
 protected:
  // A version of `repo` (archive D("archive-" + seed)) with `hash`, tagged `tag` ("" = none).
  Status PushWithHash(const std::string& repo, const std::string& tag, const std::string& seed,
                      const std::string& hash) {
    ManifestPut put;
    put.repository = repo;
    put.digest = D("manifest-" + seed);
    put.media_type = "application/vnd.oci.image.manifest.v1+json";
    put.content = "{\"seed\":\"" + seed + "\"}";
    put.tag = tag;
    put.archive_digest = D("archive-" + seed);
    put.archive_size = 7;
    put.structural_hash = hash;
    return db_->PutManifest(put);
  }
  // "repo:tag@archive" (or "repo@archive") for each entry, to compare listings at a glance.
  static std::vector<std::string> Names(const StructurePage& page) {
    std::vector<std::string> out;
    for (const StructureVersion& v : page.items) {
      out.push_back(v.repository + (v.tag ? ":" + *v.tag : "") + "@" + v.archive_digest);
    }
    return out;
  }
};

TEST_F(StructureTest, HashIsRecordedWithTheVersion) {
  ASSERT_TRUE(PushWithHash("m", "v1", "a", Hash('a')).ok());
  auto v = db_->FindVersion("m", D("archive-a"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->structural_hash, Hash('a'));
  auto listed = db_->ListVersions("m");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].structural_hash, Hash('a'));
  // A version pushed without a hash has none ("") and is waiting for a backfill.
  ASSERT_TRUE(Push("m", "v2", "b").ok());
  EXPECT_EQ(db_->FindVersion("m", D("archive-b"))->structural_hash, "");
  EXPECT_EQ(*db_->ArchivesWithoutStructure(), std::vector<std::string>{D("archive-b")});
  // Re-pushing it with a hash fills it in; a known hash is never overwritten.
  ASSERT_TRUE(PushWithHash("m", "v2", "b", Hash('b')).ok());
  EXPECT_EQ(db_->FindVersion("m", D("archive-b"))->structural_hash, Hash('b'));
  ASSERT_TRUE(PushWithHash("m", "v2", "b", Hash('c')).ok());
  EXPECT_EQ(db_->FindVersion("m", D("archive-b"))->structural_hash, Hash('b'));
  EXPECT_TRUE(db_->ArchivesWithoutStructure()->empty());
}

TEST_F(StructureTest, SetStructuralHashFillsEveryRepositoryOnce) {
  ASSERT_TRUE(Push("a", "v1", "x").ok());
  ASSERT_TRUE(Push("b", "v1", "x").ok());  // the same archive in two repositories
  ASSERT_TRUE(Push("b", "v2", "y").ok());
  EXPECT_EQ(*db_->ArchivesWithoutStructure(),
            (std::vector<std::string>{std::min(D("archive-x"), D("archive-y")),
                                      std::max(D("archive-x"), D("archive-y"))}));
  ASSERT_TRUE(db_->SetStructuralHash(D("archive-x"), Hash('1')).ok());
  EXPECT_EQ(db_->FindVersion("a", D("archive-x"))->structural_hash, Hash('1'));
  EXPECT_EQ(db_->FindVersion("b", D("archive-x"))->structural_hash, Hash('1'));
  EXPECT_EQ(*db_->ArchivesWithoutStructure(), std::vector<std::string>{D("archive-y")});
  // Only unknown hashes are set.
  ASSERT_TRUE(db_->SetStructuralHash(D("archive-x"), Hash('2')).ok());
  EXPECT_EQ(db_->FindVersion("a", D("archive-x"))->structural_hash, Hash('1'));
}

TEST_F(StructureTest, ListingIsOrderedWithOneEntryPerTag) {
  // Structure S: m1 (two tags), m2 untagged, n1 in another repository; structure T: t1.
  ASSERT_TRUE(PushWithHash("org/m", "v1", "m1", Hash('s')).ok());
  ASSERT_TRUE(PushWithHash("org/m", "latest", "m1", Hash('s')).ok());
  ASSERT_TRUE(PushWithHash("org/m", "", "m2", Hash('s')).ok());
  ASSERT_TRUE(PushWithHash("alpha", "v9", "n1", Hash('s')).ok());
  ASSERT_TRUE(PushWithHash("org/m", "other", "t1", Hash('t')).ok());
  // A tag moved away from a version no longer lists it under that tag.
  ASSERT_TRUE(PushWithHash("org/m", "moved", "m1", Hash('s')).ok());
  ASSERT_TRUE(PushWithHash("org/m", "moved", "t1", Hash('t')).ok());

  auto all = db_->ListStructureVersions(Hash('s'), std::nullopt, {});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(Names(*all), (std::vector<std::string>{
                             "alpha:v9@" + D("archive-n1"), "org/m@" + D("archive-m2"),
                             "org/m:latest@" + D("archive-m1"), "org/m:v1@" + D("archive-m1")}));
  EXPECT_FALSE(all->more);
  EXPECT_EQ(all->items[1].manifest_digest, D("manifest-m2"));
  EXPECT_FALSE(all->items[1].tag.has_value());

  auto t = db_->ListStructureVersions(Hash('t'), std::nullopt, {});
  EXPECT_EQ(Names(*t), (std::vector<std::string>{"org/m:moved@" + D("archive-t1"),
                                                 "org/m:other@" + D("archive-t1")}));
  auto none = db_->ListStructureVersions(Hash('0'), std::nullopt, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->items.empty());
  EXPECT_FALSE(none->more);

  // Paging with the cursor of the last entry walks the same list.
  std::vector<std::string> walked;
  StructureCursor after;
  for (int guard = 0; guard < 10; ++guard) {
    auto page = db_->ListStructureVersions(Hash('s'), 3, after);
    ASSERT_TRUE(page.ok());
    ASSERT_LE(page->items.size(), 3u);
    for (const auto& n : Names(*page)) walked.push_back(n);
    if (!page->more) break;
    const StructureVersion& last = page->items.back();
    after = {last.repository, last.tag.value_or(""), last.archive_digest};
  }
  EXPECT_EQ(walked, Names(*all));
  auto zero = db_->ListStructureVersions(Hash('s'), 0, {});
  EXPECT_TRUE(zero->items.empty());
  EXPECT_TRUE(zero->more);
}

TEST_F(StructureTest, ValueDiffsAreCachedPerDirection) {
  EXPECT_EQ(db_->FindValueDiff(D("a"), D("b")).status().code(), Code::kNotFound);
  ASSERT_TRUE(db_->RecordValueDiff({D("a"), D("b"), D("json"), 99}).ok());
  auto found = db_->FindValueDiff(D("a"), D("b"));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->diff_digest, D("json"));
  EXPECT_EQ(found->diff_size, 99u);
  EXPECT_EQ(db_->FindValueDiff(D("b"), D("a")).status().code(), Code::kNotFound);
  ASSERT_TRUE(db_->RecordValueDiff({D("a"), D("b"), D("json2"), 100}).ok());  // replaces
  EXPECT_EQ(db_->FindValueDiff(D("a"), D("b"))->diff_digest, D("json2"));
}

// The metadata DB (token hashes, private repositories) and its WAL files are owner-only,
// whatever the umask; an existing DB open to others is tightened.
TEST(MetadataDbModesTest, DatabaseFilesAreOwnerOnly) {
  testing::TempDir tmp;
  const mode_t old_umask = ::umask(022);
  const std::string path = tmp / "blz.db";
  {
    auto db = MetadataDb::Open(path);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE((*db)->CreateToken("admin").ok());
    for (const char* suffix : {"", "-wal", "-shm"}) {
      struct stat st {};
      ASSERT_EQ(::stat((path + suffix).c_str(), &st), 0) << suffix;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << suffix;
    }
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto db = MetadataDb::Open(path);
  ::umask(old_umask);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace blz::store
