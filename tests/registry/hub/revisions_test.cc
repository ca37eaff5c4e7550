// registry/hub/revisions.h: commit ids from archive digests, tags as branches, what "main"
// means, and ambiguous commit ids refused (versions recorded straight in a metadata DB, with
// digests chosen to collide in their first 160 bits).
#include "registry/hub/revisions.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "registry/registry.h"
#include "store/metadata_db.h"
#include "tests/test_util.h"

namespace blz::registry::hub {
namespace {

// A version of `repo` whose archive digest is `archive`, tagged `tag` ("" = untagged).
void PutVersion(store::MetadataDb& db, const std::string& repo, const std::string& tag,
                const std::string& archive, const std::string& manifest_digest) {
  nlohmann::json m = {
      {"schemaVersion", 2},
      {"mediaType", kOciManifestMediaType},
      {"layers", {{{"mediaType", kBlzArchiveMediaType}, {"digest", archive}, {"size", 1}}}}};
  store::ManifestPut put;
  put.repository = repo;
  put.digest = manifest_digest;
  put.media_type = kOciManifestMediaType;
  put.content = m.dump();
  put.tag = tag;
  put.archive_digest = archive;
  put.archive_size = 1;
  Status s = db.PutManifest(put);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

class RevisionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = store::MetadataDb::Open(tmp_ / "blz.db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(*db);
  }
  blz::testing::TempDir tmp_;
  std::unique_ptr<store::MetadataDb> db_;
};

const std::string kPrefix(40, 'a');
const std::string kA = "sha256:" + kPrefix + std::string(24, '1');
const std::string kB = "sha256:" + kPrefix + std::string(24, '2');
const std::string kC = "sha256:" + std::string(64, 'c');

TEST(CommitIdTest, FirstFortyHexOfTheArchiveDigest) {
  EXPECT_EQ(CommitId(kC), std::string(40, 'c'));
  EXPECT_EQ(CommitId("sha512:" + std::string(128, 'c')), "");
  EXPECT_EQ(CommitId("sha256:abc"), "");
  EXPECT_TRUE(IsCommitId(std::string(40, 'c')));
  EXPECT_FALSE(IsCommitId(std::string(40, 'C')));
  EXPECT_FALSE(IsCommitId(std::string(39, 'c')));
  EXPECT_FALSE(IsCommitId("main"));
}

TEST_F(RevisionsTest, TagsMainLatestAndCommits) {
  PutVersion(*db_, "org/m", "latest", kC, "sha256:" + std::string(64, '3'));
  // No tag "main": main is "latest".
  auto main = ResolveRevision(*db_, "org/m", "main");
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ(main->archive_digest, kC);
  EXPECT_EQ(main->commit, CommitId(kC));
  // A tag "main" wins over "latest".
  PutVersion(*db_, "org/m", "main", kA, "sha256:" + std::string(64, '4'));
  EXPECT_EQ(ResolveRevision(*db_, "org/m", "main")->archive_digest, kA);
  EXPECT_EQ(ResolveRevision(*db_, "org/m", "refs/heads/latest")->archive_digest, kC);
  EXPECT_EQ(ResolveRevision(*db_, "org/m", "refs/tags/latest")->archive_digest, kC);
  EXPECT_EQ(ResolveRevision(*db_, "org/m", CommitId(kC))->archive_digest, kC);
  EXPECT_EQ(ResolveRevision(*db_, "org/m", "v9").status().code(), Code::kNotFound);
  EXPECT_EQ(ResolveRevision(*db_, "org/m", std::string(40, 'd')).status().code(),
            Code::kNotFound);
  EXPECT_EQ(ResolveRevision(*db_, "org/other", "main").status().code(), Code::kNotFound);
}

TEST_F(RevisionsTest, AmbiguousCommitIdIsRefusedNotGuessed) {
  PutVersion(*db_, "org/m", "one", kA, "sha256:" + std::string(64, '5'));
  EXPECT_EQ(ResolveRevision(*db_, "org/m", kPrefix)->archive_digest, kA);
  PutVersion(*db_, "org/m", "two", kB, "sha256:" + std::string(64, '6'));
  auto r = ResolveRevision(*db_, "org/m", kPrefix);
  EXPECT_EQ(r.status().code(), Code::kAlreadyExists);
  EXPECT_NE(r.status().message().find("ambiguous"), std::string::npos);
  // The tags still name each version.
  EXPECT_EQ(ResolveRevision(*db_, "org/m", "two")->archive_digest, kB);
}

TEST_F(RevisionsTest, MainWithoutMainOrLatestIsNotFound) {
  PutVersion(*db_, "org/m", "v1", kC, "sha256:" + std::string(64, '7'));
  auto r = ResolveRevision(*db_, "org/m", "main");
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("latest"), std::string::npos);
}

}  // namespace
}  // namespace blz::registry::hub
