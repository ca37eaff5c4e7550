#include "client/local_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/digest.h"
#include "tests/client/env_guard.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::EnvGuard;
using blz::testing::TempDir;
namespace fs = std::filesystem;

std::string Digest(const std::string& data) { return MakeDigest(Sha256Hex(data)); }

// Stages `data` in the store and publishes it; returns its digest.
std::string Put(LocalStore* store, const std::string& data) {
  Result<std::string> staging = store->MakeStagingDir();
  EXPECT_TRUE(staging.ok());
  blz::testing::WriteFileBytes(*staging + "/f", data);
  std::string digest = Digest(data);
  Result<std::string> path = store->PublishBlob(*staging + "/f", digest);
  EXPECT_TRUE(path.ok()) << path.status().ToString();
  fs::remove_all(*staging);
  return digest;
}

TEST(LocalStoreTest, ResolveDirPrecedence) {
  EnvGuard env;
  env.Set("BLZ_CACHE_DIR", "/c/blz-cache");
  env.Set("XDG_CACHE_HOME", "/c/xdg");
  env.Set("HOME", "/c/home");
  EXPECT_EQ(*LocalStore::ResolveDir("/flag"), "/flag");
  EXPECT_EQ(*LocalStore::ResolveDir(""), "/c/blz-cache");
  env.Unset("BLZ_CACHE_DIR");
  EXPECT_EQ(*LocalStore::ResolveDir(""), "/c/xdg/blz");
  env.Unset("XDG_CACHE_HOME");
  EXPECT_EQ(*LocalStore::ResolveDir(""), "/c/home/.cache/blz");
  env.Unset("HOME");
  EXPECT_EQ(LocalStore::ResolveDir("").status().code(), Code::kNotFound);
}

TEST(LocalStoreTest, PublishPlacesBlobByDigest) {
  TempDir tmp;
  Result<LocalStore> store = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string data = "archive bytes";
  const std::string digest = Digest(data);
  EXPECT_FALSE(store->HasBlob(digest));
  Put(&*store, data);
  const std::string hex = digest.substr(7);
  const std::string expected = tmp / ("s/blobs/sha256/" + hex.substr(0, 2) + "/" + hex);
  EXPECT_EQ(store->BlobPath(digest), expected);
  EXPECT_TRUE(store->HasBlob(digest));
  EXPECT_EQ(blz::testing::ReadFileBytes(expected), data);
  EXPECT_TRUE(store->VerifyBlob(digest).ok());
  // Publishing the same content again is fine and leaves one copy.
  Put(&*store, data);
  EXPECT_TRUE(store->HasBlob(digest));
  // Nothing is left staged.
  EXPECT_TRUE(fs::is_empty(tmp / "s/tmp"));
}

TEST(LocalStoreTest, VerifyDetectsDamagedBlob) {
  TempDir tmp;
  Result<LocalStore> store = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(store.ok());
  const std::string digest = Put(&*store, "good bytes");
  blz::testing::WriteFileBytes(store->BlobPath(digest), "bad bytes!");
  EXPECT_EQ(store->VerifyBlob(digest).code(), Code::kDigestMismatch);
  EXPECT_TRUE(store->RemoveBlob(digest).ok());
  EXPECT_FALSE(store->HasBlob(digest));
  EXPECT_EQ(store->VerifyBlob(digest).code(), Code::kNotFound);
}

TEST(LocalStoreTest, IndexRecordsVersionsMostRecentFirst) {
  TempDir tmp;
  Result<LocalStore> store = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(store.ok());
  const std::string reg = "127.0.0.1:5000";
  const std::string d1 = Put(&*store, "v1"), d2 = Put(&*store, "v2"), d3 = Put(&*store, "v3");
  ASSERT_TRUE(store->RecordVersion(reg, "org/m", d1, 2, "v1").ok());
  ASSERT_TRUE(store->RecordVersion(reg, "org/m", d2, 2, "latest").ok());
  ASSERT_TRUE(store->RecordVersion(reg, "org/other", d3, 2, "x").ok());

  Result<std::vector<HeldVersion>> held = store->Versions(reg, "org/m");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].digest, d2);
  EXPECT_EQ((*held)[1].digest, d1);
  EXPECT_GT((*held)[0].seq, (*held)[1].seq);

  // Pulling v1 again makes it the most recent; "latest" moves to it.
  ASSERT_TRUE(store->RecordVersion(reg, "org/m", d1, 2, "latest").ok());
  held = store->Versions(reg, "org/m");
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].digest, d1);
  EXPECT_EQ((*held)[0].tags, (std::vector<std::string>{"v1", "latest"}));
  EXPECT_TRUE((*held)[1].tags.empty());

  // The index survives reopening, and is per registry+repository.
  *store = LocalStore();  // closes it
  Result<LocalStore> again = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Versions(reg, "org/m")->size(), 2u);
  EXPECT_EQ(again->Versions(reg, "org/other")->size(), 1u);
  EXPECT_EQ(again->Versions("127.0.0.1:5001", "org/m")->size(), 0u);
  EXPECT_TRUE(fs::exists(tmp / "s/repos/127.0.0.1:5000/org/m/index.json"));

  // A version whose blob disappeared is not offered as a patch base.
  ASSERT_TRUE(again->RemoveBlob(d1).ok());
  held = again->Versions(reg, "org/m");
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].digest, d2);
}

TEST(LocalStoreTest, RejectsBadIndexKeysAndCorruptIndex) {
  TempDir tmp;
  Result<LocalStore> store = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(store.ok());
  const std::string d = Put(&*store, "x");
  EXPECT_EQ(store->RecordVersion("127.0.0.1:5000", "../escape", d, 1, "").code(),
            Code::kInvalidArgument);
  EXPECT_EQ(store->RecordVersion("../x:1", "m", d, 1, "").code(), Code::kInvalidArgument);
  EXPECT_EQ(store->RecordVersion("h:1", "m", "sha256:zz", 1, "").code(), Code::kInvalidArgument);
  blz::testing::WriteFileBytes(tmp / "s/repos/h:1/m/index.json", "{not json");
  EXPECT_EQ(store->Versions("h:1", "m").status().code(), Code::kCorruption);
}

TEST(LocalStoreTest, OpenRemovesStaleTempFiles) {
  TempDir tmp;
  {
    Result<LocalStore> store = LocalStore::Open(tmp / "s");
    ASSERT_TRUE(store.ok());
  }
  // What a killed pull leaves behind.
  blz::testing::WriteFileBytes(tmp / "s/tmp/op-abc123/archive.blz.tmp-0011", "partial");
  blz::testing::WriteFileBytes(tmp / "s/blobs/sha256/ab/abcd.tmp-99", "partial");
  blz::testing::WriteFileBytes(tmp / "s/repos/h:1/m/index.json.tmp-77", "{");
  blz::testing::WriteFileBytes(tmp / "s/usage.json.tmp-5a5a5a", "{\"versions\"");
  blz::testing::WriteFileBytes(tmp / "s/usage.json", "{\"versions\": {}}\n");
  Result<LocalStore> store = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(store->stale_removed(), 4u);
  EXPECT_FALSE(fs::exists(tmp / "s/usage.json.tmp-5a5a5a"));
  EXPECT_TRUE(fs::exists(tmp / "s/usage.json"));  // the record itself is kept
  EXPECT_TRUE(fs::is_empty(tmp / "s/tmp"));
  EXPECT_FALSE(fs::exists(tmp / "s/blobs/sha256/ab/abcd.tmp-99"));
  EXPECT_FALSE(fs::exists(tmp / "s/repos/h:1/m/index.json.tmp-77"));
}

TEST(LocalStoreTest, StagedFilesOfAnotherOpenStoreAreKept) {
  TempDir tmp;
  Result<LocalStore> first = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(first.ok());
  Result<std::string> staging = first->MakeStagingDir();
  ASSERT_TRUE(staging.ok());
  blz::testing::WriteFileBytes(*staging + "/in-progress", "downloading");
  {
    // A second process (here: a second open) must not delete the first one's download.
    Result<LocalStore> second = LocalStore::Open(tmp / "s");
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->stale_removed(), 0u);
    EXPECT_TRUE(fs::exists(*staging + "/in-progress"));
  }
  first = LocalStore();
  Result<LocalStore> third = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(fs::exists(*staging));
}

TEST(LocalStoreTest, AllVersionsSpansRegistriesAndRepositoriesAndForgetRemovesEverywhere) {
  TempDir tmp;
  Result<LocalStore> store = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string a = Put(&*store, "archive a");
  const std::string b = Put(&*store, "archive b");
  const std::string loose = Put(&*store, "held, but no index names it");
  ASSERT_TRUE(store->RecordVersion("127.0.0.1:5000", "org/a", a, 9, "v1").ok());
  ASSERT_TRUE(store->RecordVersion("localhost:5000", "org/a", a, 9, "v1").ok());
  ASSERT_TRUE(store->RecordVersion("127.0.0.1:5000", "org/team/b", b, 9, "").ok());

  Result<std::vector<HeldVersion>> all = store->AllVersions();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 4u);
  int named_a = 0;
  bool saw_loose = false;
  for (const HeldVersion& v : *all) {
    if (v.digest == a) {
      ++named_a;
      EXPECT_EQ(v.repository, "org/a");
      EXPECT_TRUE(v.registry == "127.0.0.1:5000" || v.registry == "localhost:5000");
    } else if (v.digest == b) {
      EXPECT_EQ(v.repository, "org/team/b");
    } else {
      EXPECT_EQ(v.digest, loose);
      EXPECT_TRUE(v.registry.empty() && v.repository.empty());
      EXPECT_EQ(v.size, std::string("held, but no index names it").size());
      saw_loose = true;
    }
  }
  EXPECT_EQ(named_a, 2);
  EXPECT_TRUE(saw_loose);

  Result<uint64_t> freed = store->ForgetVersion(a);
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(*freed, std::string("archive a").size());
  EXPECT_FALSE(store->HasBlob(a));
  EXPECT_TRUE(store->Versions("localhost:5000", "org/a")->empty());
  all = store->AllVersions();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  EXPECT_EQ(store->ForgetVersion("sha256:nope").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace blz::client
