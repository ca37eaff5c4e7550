#include "store/metadata_db.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "core/digest.h"
#include "store/migrations.h"
#include "store/postgres/connection.h"
#include "store/sqlite/sqlite.h"
#include "tests/store/postgres/postgres_fixture.h"
#include "tests/test_util.h"

namespace blz::store {
namespace {

std::string D(std::string_view seed) { return MakeDigest(Sha256Hex(seed)); }

// Every case runs on both engines (store/sql.h): "sqlite" (a file in a temp directory) and
// "postgres" (a fresh database on the binary's one PostgreSQL server, whose default collation
// is ICU's root locale, not bytewise, so that an ORDER BY that depended on the database's
// collation would show). PostgreSQL cases skip, saying why, when PostgreSQL is not installed.
class MetadataDbTest : public testing::PostgresTest,
                       public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    std::string url = tmp_ / "blz.db";
    if (GetParam() == "postgres") {
      testing::PostgresTest::SetUp();
      if (IsSkipped() || HasFatalFailure()) return;
      url = IcuDatabase();
      ASSERT_FALSE(url.empty());
    }
    url_ = url;
    auto db = MetadataDb::Open(url);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(*db);
  }
  // A new database whose default collation is ICU's root locale ("_" < "a" < "B" < "é").
  std::string IcuDatabase() {
    static int n = 0;
    const std::string name = "icu_" + std::to_string(++n);
    auto admin = postgres::Connection::Open(server().url());
    EXPECT_TRUE(admin.ok()) << admin.status().ToString();
    if (!admin.ok()) return "";
    Status s = admin->Exec("CREATE DATABASE " + name +
                           " TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu "
                           "ICU_LOCALE 'und' LOCALE 'C.UTF-8'");
    EXPECT_TRUE(s.ok()) << s.ToString();
    const std::string& base = server().url();
    return s.ok() ? base.substr(0, base.rfind('/') + 1) + name : "";
  }
  // The token_sha256 column of every row of tokens, read around MetadataDb.
  std::vector<std::string> RawTokenHashes() {
    std::vector<std::string> out;
    if (GetParam() == "postgres") {
      auto conn = postgres::Connection::Open(url_);
      EXPECT_TRUE(conn.ok());
      if (!conn.ok()) return out;
      auto rows = conn->Query("SELECT token_sha256 FROM tokens");
      EXPECT_TRUE(rows.ok());
      for (int r = 0; rows.ok() && r < rows->size(); ++r) out.push_back(rows->Text(r, 0));
      return out;
    }
    auto raw = sqlite::Database::Open(url_);
    EXPECT_TRUE(raw.ok());
    if (!raw.ok()) return out;
    auto st = raw->Prepare("SELECT token_sha256 FROM tokens");
    EXPECT_TRUE(st.ok());
    while (st.ok() && *st->Step()) out.push_back(st->ColumnText(0));
    return out;
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
  std::string url_;
  std::unique_ptr<MetadataDb> db_;
};

std::string EngineName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }
INSTANTIATE_TEST_SUITE_P(Engines, MetadataDbTest, ::testing::Values("sqlite", "postgres"),
                         EngineName);

TEST_P(MetadataDbTest, BrowseQueries) {
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

TEST_P(MetadataDbTest, LossyDeltaRoundTripAndGc) {
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

// A blob a chain link names is referenced for the collector's delete too, not only for
// BlobReferenced: here the link's `patches` row is gone (a collection forgot it as a dead pair)
// while the link stays (still some link's parent). Before, the delete removed the link's patch.
TEST_P(MetadataDbTest, ABlobOnlyAChainLinkNamesIsKeptByTheDelete) {
  ASSERT_TRUE(Push("org/model", "v1", "a").ok());
  ASSERT_TRUE(Push("org/model", "v2", "b").ok());
  const std::string patch = D("link a->b");
  ASSERT_TRUE(db_->RecordBlob(patch, 10).ok());
  ASSERT_TRUE(db_->RecordChainLink({D("archive-b"), D("archive-a"), patch, 10, 1, 1010}, "").ok());
  ASSERT_TRUE(db_->ForgetDerived("patches", {D("archive-a"), D("archive-b"), patch}).ok());
  EXPECT_EQ(db_->FindPatch(D("archive-a"), D("archive-b")).status().code(), Code::kNotFound);
  EXPECT_TRUE(*db_->BlobReferenced(patch, 0));
  Result<int64_t> mark = db_->StartGcMark();  // after the blob's last touch
  ASSERT_TRUE(mark.ok()) << mark.status().ToString();
  int removes = 0;
  uint64_t freed = 0;
  const int64_t later = int64_t(std::time(nullptr)) + 100;
  Result<BlobDeletion> r = db_->DeleteBlobUnlessTouched(
      patch, later, *mark, "gc", later,
      [&]() -> Result<uint64_t> { ++removes; return uint64_t(10); }, &freed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, BlobDeletion::kKept);
  EXPECT_EQ(removes, 0);
  EXPECT_TRUE(db_->FindChainLink(D("archive-b")).ok());
}

// Recorded depths stay exact: an archive others are chained on is not chained itself, and a
// link is refused when its parent's chain is deeper now than the caller checked (another
// replica chained the parent meanwhile). Before, both were recorded, with understated depths.
TEST_P(MetadataDbTest, AChainLinkNeverUnderstatesADepth) {
  for (const char* seed : {"p", "x", "y", "z"}) ASSERT_TRUE(Push("org/model", seed, seed).ok());
  const std::string p = D("archive-p"), x = D("archive-x"), y = D("archive-y"), z = D("archive-z");
  ASSERT_TRUE(db_->RecordChainLink({y, x, D("x->y"), 10, 1, 10}, "").ok());
  Status s = db_->RecordChainLink({x, p, D("p->x"), 10, 1, 10}, "");
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_EQ(db_->FindChainLink(x).status().code(), Code::kNotFound);
  // z checked y as a parent stored whole (depth 1), but y is a link now: refused.
  s = db_->RecordChainLink({z, y, D("y->z"), 10, 1, 10}, "");
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_EQ(db_->FindChainLink(z).status().code(), Code::kNotFound);
  ASSERT_TRUE(db_->RecordChainLink({z, y, D("y->z"), 10, 2, 20}, "").ok());
  EXPECT_EQ(db_->FindChainLink(z)->depth, 2u);
}

// Tensors by content (table archive_tensors): archives sharing tensors with one are listed
// most shared bytes first; a tensor with two twins in one archive counts once; an archive
// that is no model version (any more) is not listed, and its rows go with a collection;
// recording twice keeps the first rows.
TEST_P(MetadataDbTest, ArchivesSharingTensorsAreListedMostSharedFirst) {
  for (const char* seed : {"a", "b", "c"}) ASSERT_TRUE(Push("org/model", seed, seed).ok());
  ASSERT_TRUE(Push("other/model", "v1", "d").ok());
  const std::string a = D("archive-a"), b = D("archive-b"), c = D("archive-c"),
                    d = D("archive-d"), gone = D("archive-gone");
  const std::string t1(64, '1'), t2(64, '2'), t3(64, '3'), zero(64, '0');
  EXPECT_FALSE(*db_->HasArchiveTensors(a));
  auto unlisted = db_->ListVersionArchivesWithoutTensors();
  ASSERT_TRUE(unlisted.ok()) << unlisted.status().ToString();
  std::vector<std::string> versions = {a, b, c, d};
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(*unlisted, versions);
  ASSERT_TRUE(db_->RecordArchiveTensors(a, {{0, t1, 1000}, {1, t2, 500}, {2, zero, 70}}).ok());
  EXPECT_TRUE(*db_->HasArchiveTensors(a));
  unlisted = db_->ListVersionArchivesWithoutTensors();
  ASSERT_TRUE(unlisted.ok());
  versions.erase(std::find(versions.begin(), versions.end(), a));
  EXPECT_EQ(*unlisted, versions);
  ASSERT_TRUE(db_->RecordArchiveTensors(b, {{0, t2, 500}, {3, t3, 9000}}).ok());
  ASSERT_TRUE(db_->RecordArchiveTensors(c, {{0, zero, 70}, {1, zero, 70}, {2, t1, 1000}}).ok());
  ASSERT_TRUE(db_->RecordArchiveTensors(d, {{5, t1, 1000}, {6, t2, 500}}).ok());
  ASSERT_TRUE(db_->RecordArchiveTensors(gone, {{0, t1, 1000}, {1, t2, 500}, {2, zero, 70}}).ok());
  // `gone` has rows but is nobody's version: it is never in this list.
  unlisted = db_->ListVersionArchivesWithoutTensors();
  ASSERT_TRUE(unlisted.ok());
  EXPECT_TRUE(unlisted->empty());
  // Recorded again with other values: the first rows stay.
  ASSERT_TRUE(db_->RecordArchiveTensors(a, {{0, t3, 9000}}).ok());
  Result<std::vector<SharedTensors>> got = db_->ListArchivesSharingTensors(a, 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<std::pair<std::string, uint64_t>> rows;
  for (const SharedTensors& st : *got) rows.emplace_back(st.archive_digest, st.bytes);
  const std::vector<std::pair<std::string, uint64_t>> want = {{d, 1500}, {c, 1070}, {b, 500}};
  EXPECT_EQ(rows, want);
  got = db_->ListArchivesSharingTensors(a, 1);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(got->front().archive_digest, d);
  got = db_->ListArchivesSharingTensors(D("archive-none"), 10);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
  // A collection forgets the rows of archives that are nobody's version.
  ASSERT_TRUE(db_->ForgetUnversionedArchiveTensors().ok());
  EXPECT_FALSE(*db_->HasArchiveTensors(gone));
  EXPECT_TRUE(*db_->HasArchiveTensors(a));
  EXPECT_TRUE(*db_->HasArchiveTensors(d));
}

TEST_P(MetadataDbTest, ManifestTagAndVersionRoundTrip) {
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

TEST_P(MetadataDbTest, MovingATagAndRepushing) {
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

TEST_P(MetadataDbTest, MissingRowsAreNotFound) {
  EXPECT_EQ(db_->ResolveTag("m", "v1").status().code(), Code::kNotFound);
  EXPECT_EQ(db_->ListTags("m", std::nullopt, "").status().code(), Code::kNotFound);
  EXPECT_EQ(db_->FindPatch(D("x"), D("y")).status().code(), Code::kNotFound);
  EXPECT_EQ(db_->GetUpload("nope").status().code(), Code::kNotFound);
}

TEST_P(MetadataDbTest, TagsPaginateInLexicalOrder) {
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

TEST_P(MetadataDbTest, CatalogPaginates) {
  for (const char* r : {"c/x", "a", "b/y", "b"}) ASSERT_TRUE(Push(r, "t", r).ok());
  auto p1 = db_->ListRepositories(2, "");
  ASSERT_TRUE(p1.ok());
  EXPECT_EQ(p1->items, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(p1->more);
  auto p2 = db_->ListRepositories(2, "b");
  EXPECT_EQ(p2->items, (std::vector<std::string>{"b/y", "c/x"}));
  EXPECT_FALSE(p2->more);
}

TEST_P(MetadataDbTest, TokensAreStoredHashed) {
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
  int rows = 0;
  for (const std::string& stored : RawTokenHashes()) {
    ++rows;
    EXPECT_NE(stored, *token);
    EXPECT_NE(stored, *second);
    EXPECT_TRUE(stored == Sha256Hex(*token) || stored == Sha256Hex(*second));
  }
  EXPECT_EQ(rows, 2);
}

TEST_P(MetadataDbTest, ScopedTokensExpireAndAreRevoked) {
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

TEST_P(MetadataDbTest, PatchesAndUploads) {
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

TEST_P(MetadataDbTest, ConcurrentWritersAreSerialized) {
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

// Listings and their cursors are bytewise on every engine: PostgreSQL would sort text by the
// database's collation (here ICU's root locale: "_" < "a" < "B" < "é") without the
// COLLATE "C" of migrations/postgres, and pagination by "> last" would skip or repeat names.
TEST_P(MetadataDbTest, ListingsAreOrderedBytewise) {
  std::vector<std::string> names = {"B", "a", "_", "\xc3\xa9", "Z", "b", "a_b", "aB", "a-b"};
  for (const auto& n : names) {
    ASSERT_TRUE(Push(n, "t", n).ok());
    ASSERT_TRUE(Push("m", n, n).ok());
  }
  std::vector<std::string> bytewise = names;
  std::sort(bytewise.begin(), bytewise.end());  // std::string compares bytes (char_traits)
  std::vector<std::string> repos = bytewise;
  repos.insert(std::lower_bound(repos.begin(), repos.end(), "m"), "m");

  auto all = db_->ListRepositories(std::nullopt, "");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->items, repos);
  EXPECT_EQ(*db_->ListRepositoryNames(""), repos);
  std::vector<std::string> walked;
  std::string last;
  for (int guard = 0; guard < 20; ++guard) {
    auto page = db_->ListRepositories(2, last);
    ASSERT_TRUE(page.ok());
    walked.insert(walked.end(), page->items.begin(), page->items.end());
    if (!page->more) break;
    last = page->items.back();
  }
  EXPECT_EQ(walked, repos);

  auto tags = db_->ListTags("m", std::nullopt, "");
  ASSERT_TRUE(tags.ok());
  EXPECT_EQ(tags->items, bytewise);
  walked.clear();
  last.clear();
  for (int guard = 0; guard < 20; ++guard) {
    auto page = db_->ListTags("m", 3, last);
    ASSERT_TRUE(page.ok());
    walked.insert(walked.end(), page->items.begin(), page->items.end());
    if (!page->more) break;
    last = page->items.back();
  }
  EXPECT_EQ(walked, bytewise);
  auto targets = db_->ListTagTargets("m");
  ASSERT_TRUE(targets.ok());
  std::vector<std::string> target_tags;
  for (const auto& t : *targets) target_tags.push_back(t.tag);
  EXPECT_EQ(target_tags, bytewise);
  // "> last" is bytewise too: after "Z" come "_", "a", ... (in ICU's order, "Z" is last).
  auto after = db_->ListTags("m", 2, "Z");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->items, (std::vector<std::string>{"_", "a"}));
}

// The per-repository cap on upload sessions holds across connections (processes, replicas):
// each check-and-insert holds the lock "uploads" (PostgreSQL is READ COMMITTED; SQLite's
// BEGIN IMMEDIATE serializes writers).
TEST_P(MetadataDbTest, UploadCapsHoldAcrossConnections) {
  constexpr int kConnections = 4;
  std::vector<std::unique_ptr<MetadataDb>> dbs;
  for (int c = 0; c < kConnections; ++c) {
    auto db = MetadataDb::Open(url_);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    dbs.push_back(std::move(*db));
  }
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kConnections; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string uuid = "u-" + std::to_string(t) + "-" + std::to_string(i);
        Status s = dbs[t]->CreateUpload(uuid, "m", "owner-" + std::to_string(t), 0, 7);
        if (s.ok()) {
          ++created;
        } else {
          EXPECT_EQ(s.code(), Code::kTooLarge) << s.ToString();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(created.load(), 7);
  auto open = db_->ListUploadsStartedBy(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->size(), 7u);
}

// An upload session's offset moves only from the offset the caller read (the per-session lock
// of replicas): of chunks sent at one offset through several connections exactly one is
// recorded, the others are told the offset moved; the recorded parts come back in order.
TEST_P(MetadataDbTest, UploadOffsetAdvancesOnceFromEachOffset) {
  ASSERT_TRUE(db_->CreateUpload("u-1", "m").ok());
  auto fresh = db_->GetUpload("u-1");
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->size, 0u);
  EXPECT_TRUE(fresh->parts.empty());
  EXPECT_GT(fresh->updated, 0);
  constexpr int kConnections = 4;
  std::vector<std::unique_ptr<MetadataDb>> dbs;
  for (int c = 0; c < kConnections; ++c) {
    auto db = MetadataDb::Open(url_);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    dbs.push_back(std::move(*db));
  }
  std::atomic<int> recorded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kConnections; ++t) {
    threads.emplace_back([&, t] {
      Status s = dbs[t]->AdvanceUpload("u-1", 0, 10, "p0-" + std::to_string(t));
      if (s.ok()) {
        ++recorded;
      } else {
        EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
        EXPECT_NE(s.message().find("at byte 10"), std::string::npos) << s.ToString();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(recorded.load(), 1);
  ASSERT_TRUE(db_->AdvanceUpload("u-1", 10, 15, "p10").ok());
  EXPECT_EQ(db_->AdvanceUpload("u-1", 10, 20, "p10-late").code(), Code::kInvalidArgument);
  ASSERT_TRUE(db_->AdvanceUpload("u-1", 15, 15, "").ok());  // an empty chunk: no part
  EXPECT_EQ(db_->AdvanceUpload("u-1", 15, 16, "a;b").code(), Code::kInvalidArgument);
  auto up = db_->GetUpload("u-1");
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->size, 15u);
  ASSERT_EQ(up->parts.size(), 2u);
  EXPECT_EQ(up->parts[0].rfind("p0-", 0), 0u);
  EXPECT_EQ(up->parts[1], "p10");
  EXPECT_EQ(db_->AdvanceUpload("nope", 0, 1, "x").code(), Code::kNotFound);
  // Idle by its last chunk, not by its start.
  auto idle = db_->ListUploadsIdleSince(up->updated - 1);
  ASSERT_TRUE(idle.ok());
  EXPECT_TRUE(idle->empty());
  idle = db_->ListUploadsIdleSince(up->updated);
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(*idle, std::vector<std::string>{"u-1"});
}

// Every method on one database through two connections: what one writes the other reads (the
// registry's replicas share a database this way).
TEST_P(MetadataDbTest, TwoConnectionsShareTheRows) {
  auto other = MetadataDb::Open(url_);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE(Push("org/m", "v1", "a").ok());
  EXPECT_EQ(*(*other)->ResolveTag("org/m", "v1"), D("manifest-a"));
  auto token = (*other)->CreateToken("ci");
  ASSERT_TRUE(token.ok());
  EXPECT_TRUE(*db_->VerifyToken(*token));
  EXPECT_EQ(db_->CreateToken("ci").status().code(), Code::kAlreadyExists);
  ASSERT_TRUE(db_->RevokeToken("ci").ok());
  EXPECT_FALSE(*(*other)->VerifyToken(*token));
  EXPECT_EQ(*(*other)->SchemaVersion(), *db_->SchemaVersion());
}

// Pushes to one repository from several connections at once, each linking the same blobs in
// its own order and moving the same tag: on PostgreSQL (READ COMMITTED, row locks) two of them
// would deadlock without the per-repository lock that PutManifest takes.
TEST_P(MetadataDbTest, ConcurrentPushesFromSeveralConnectionsAllLand) {
  constexpr int kConnections = 4;
  std::vector<std::unique_ptr<MetadataDb>> dbs;
  for (int c = 0; c < kConnections; ++c) {
    auto db = MetadataDb::Open(url_);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    dbs.push_back(std::move(*db));
  }
  std::vector<std::string> shared = {D("blob-1"), D("blob-2"), D("blob-3"), D("blob-4")};
  // Stored blobs (a link needs the blob's row), so every PUT touches the same rows.
  for (const std::string& d : shared) ASSERT_TRUE(dbs[0]->RecordBlob(d, 1).ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < kConnections; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::string> order = shared;
      if (t % 2 == 1) std::reverse(order.begin(), order.end());
      for (int i = 0; i < 8; ++i) {
        const std::string seed = std::to_string(t) + "-" + std::to_string(i);
        ManifestPut put;
        put.repository = "m";
        put.digest = D("manifest-" + seed);
        put.media_type = "application/vnd.oci.image.manifest.v1+json";
        put.content = "{}";
        put.tag = "latest";
        put.blobs = order;
        Status s = dbs[t]->PutManifest(put);
        EXPECT_TRUE(s.ok()) << s.ToString();
        put.tag = "t" + seed;
        s = dbs[t]->PutManifest(put);
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    });
  }
  for (auto& th : threads) th.join();
  auto all = db_->ListTags("m", std::nullopt, "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), size_t(kConnections * 8 + 1));
  auto latest = db_->ResolveTag("m", "latest");
  ASSERT_TRUE(latest.ok());
  for (const std::string& b : shared) EXPECT_TRUE(*db_->BlobLinked("m", b)) << b;
}

TEST(MetadataDbOpenTest, UrlsChooseTheEngine) {
  testing::TempDir tmp;
  auto plain = MetadataDb::Open(tmp / "a.db");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)->engine(), "sqlite");
  auto prefixed = MetadataDb::Open("sqlite:" + (tmp / "b.db"));
  ASSERT_TRUE(prefixed.ok()) << prefixed.status().ToString();
  EXPECT_EQ((*prefixed)->engine(), "sqlite");
  EXPECT_TRUE(std::filesystem::exists(tmp / "b.db"));
  EXPECT_EQ(*(*prefixed)->SchemaVersion(), LatestSchemaVersion());

  auto unknown = MetadataDb::Open("mysql://u@h/db");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Code::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("mysql"), std::string::npos);
  EXPECT_EQ(MetadataDb::Open("sqlite:").status().code(), Code::kInvalidArgument);

  // Nothing listens on port 1: unavailable, host and port named, the password never.
  auto down = MetadataDb::Open("postgresql://blz:s3cretpw@127.0.0.1:1/blz?connect_timeout=2");
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), Code::kUnavailable) << down.status().ToString();
  EXPECT_NE(down.status().message().find("127.0.0.1:1"), std::string::npos);
  EXPECT_EQ(down.status().message().find("s3cretpw"), std::string::npos);
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

INSTANTIATE_TEST_SUITE_P(Engines, StructureTest, ::testing::Values("sqlite", "postgres"),
                         EngineName);

TEST_P(StructureTest, HashIsRecordedWithTheVersion) {
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

TEST_P(StructureTest, SetStructuralHashFillsEveryRepositoryOnce) {
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

TEST_P(StructureTest, ListingIsOrderedWithOneEntryPerTag) {
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

TEST_P(StructureTest, ValueDiffsAreCachedPerDirection) {
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
