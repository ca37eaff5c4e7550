#include "store/blob_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/digest.h"
#include "tests/test_util.h"

namespace blz::store {
namespace {

namespace fs = std::filesystem;

// Number of regular files below `dir`.
size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST(BlobStoreTest, OpenCreatesLayout) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp / "data");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(fs::is_directory(tmp / "data/blobs/sha256"));
  EXPECT_TRUE(fs::is_directory(tmp / "data/uploads"));
}

TEST(BlobStoreTest, WriterPublishesUnderShardedPath) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string data = "hello blob store";
  const std::string hex = Sha256Hex(data);
  auto w = store->NewWriter();
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(std::string_view(data).substr(0, 5)).ok());
  ASSERT_TRUE(w->Append(std::string_view(data).substr(5)).ok());
  auto info = w->Commit(MakeDigest(hex));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->digest, MakeDigest(hex));
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(info->path, tmp.path() + "/blobs/sha256/" + hex.substr(0, 2) + "/" + hex);
  EXPECT_EQ(testing::ReadFileBytes(info->path), data);
  auto st = store->Stat(MakeDigest(hex));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, data.size());
  EXPECT_TRUE(store->Verify(MakeDigest(hex)).ok());
  EXPECT_EQ(CountFiles(store->uploads_dir()), 0u);
}

TEST(BlobStoreTest, WrongDigestStoresNothing) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string wrong = MakeDigest(Sha256Hex(std::string_view("other bytes")));
  auto w = store->NewWriter();
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(std::string_view("actual bytes")).ok());
  auto info = w->Commit(wrong);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Code::kDigestMismatch);
  EXPECT_FALSE(store->Contains(wrong));
  EXPECT_FALSE(store->Contains(MakeDigest(Sha256Hex(std::string_view("actual bytes")))));
  EXPECT_EQ(CountFiles(tmp.path()), 0u);  // neither a blob nor a leftover temp file
}

TEST(BlobStoreTest, PublishFileVerifiesDigest) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string data(100000, 'x');
  const std::string temp = store->NewTempPath("upload");
  testing::WriteFileBytes(temp, data);

  // A mismatch leaves the temp file for the caller and publishes nothing.
  const std::string wrong = MakeDigest(Sha256Hex(std::string_view("nope")));
  auto bad = store->Publish(temp, wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kDigestMismatch);
  EXPECT_TRUE(fs::exists(temp));
  EXPECT_EQ(CountFiles(tmp / "blobs"), 0u);

  const std::string good = MakeDigest(Sha256Hex(data));
  auto info = store->Publish(temp, good);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(testing::ReadFileBytes(info->path), data);
}

TEST(BlobStoreTest, PublishRefusesFilesOutsideUploads) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp / "data");
  ASSERT_TRUE(store.ok());
  testing::WriteFileBytes(tmp / "elsewhere", "abc");
  auto info = store->Publish(tmp / "elsewhere", MakeDigest(Sha256Hex(std::string_view("abc"))));
  EXPECT_FALSE(info.ok());
  EXPECT_TRUE(fs::exists(tmp / "elsewhere"));
}

TEST(BlobStoreTest, PublishComputedAndPutBytes) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string temp = store->NewTempPath("patch");
  testing::WriteFileBytes(temp, "computed");
  auto info = store->PublishComputed(temp);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->digest, MakeDigest(Sha256Hex(std::string_view("computed"))));

  auto empty = store->PutBytes("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size, 0u);
  EXPECT_TRUE(store->Contains(MakeDigest(Sha256Hex(std::string_view("")))));

  auto mismatch = store->PutBytes("abc", MakeDigest(Sha256Hex(std::string_view("abd"))));
  EXPECT_EQ(mismatch.status().code(), Code::kDigestMismatch);
}

TEST(BlobStoreTest, MalformedDigestsAreRejected) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  for (const std::string& d : std::vector<std::string>{"", "sha256:", "sha256:abc", "md5:" + std::string(64, 'a'),
                        "sha256:" + std::string(64, 'A'), "sha256:../../../../etc/passwd"}) {
    EXPECT_EQ(store->PathFor(d).status().code(), Code::kInvalidArgument) << d;
    EXPECT_EQ(store->Stat(d).status().code(), Code::kInvalidArgument) << d;
  }
  EXPECT_EQ(store->Stat(MakeDigest(std::string(64, 'a'))).status().code(), Code::kNotFound);
}

TEST(BlobStoreTest, VerifyDetectsDamage) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  auto info = store->PutBytes("precious");
  ASSERT_TRUE(info.ok());
  testing::WriteFileBytes(info->path, "damaged!");
  EXPECT_EQ(store->Verify(info->digest).code(), Code::kDigestMismatch);
}

TEST(BlobStoreTest, AbandonedWriterLeavesNothing) {
  testing::TempDir tmp;
  auto store = BlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  {
    auto w = store->NewWriter();
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(std::string_view("partial")).ok());
    EXPECT_EQ(CountFiles(store->uploads_dir()), 1u);
  }
  EXPECT_EQ(CountFiles(tmp.path()), 0u);
}

}  // namespace
}  // namespace blz::store
