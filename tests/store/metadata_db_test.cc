#include "store/metadata_db.h"

#include <gtest/gtest.h>

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

  auto second = db_->CreateToken("admin");
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

}  // namespace
}  // namespace blz::store
