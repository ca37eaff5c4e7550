// Blob GETs on the S3 driver (issue 25, "Blob and patch GETs: proxied with Range by default"):
// the requested range is streamed from one ranged GET (store::BlobStore::OpenRange) through the
// session's producer body; the replica neither downloads the blob whole nor fills its local
// cache. Runs on a real Ceph RADOS Gateway whatever BLZ_TEST_STORAGE says (skips, saying why,
// when Ceph is not installed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "core/digest.h"
#include "registry/registry.h"
#include "store/s3/s3_blob_store.h"
#include "store/s3/s3_client.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using testing::BodyOf;
using testing::Harness;

constexpr char kBucket[] = "blz-blob-stream-tests";

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// A fresh prefix of the test bucket, as a --storage URL.
std::string S3Storage() {
  blz::testing::CephS3Server& s3 = blz::testing::CephS3Server::Get();
  static const bool made = [&] {
    Status st = s3.CreateBucket(kBucket);
    EXPECT_TRUE(st.ok()) << st.ToString();
    ::setenv("AWS_ACCESS_KEY_ID", s3.var("S3_ACCESS_KEY").c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", s3.var("S3_SECRET_KEY").c_str(), 1);
    return st.ok();
  }();
  (void)made;
  return s3.StorageUrl(kBucket, RandomHex(6));
}

store::s3::S3BlobStore& S3Of(Harness& h) {
  return dynamic_cast<store::s3::S3BlobStore&>(h.registry().blobs().unwrapped());
}

class BlobStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!blz::testing::CephS3Server::Get().available()) {
      GTEST_SKIP() << blz::testing::CephS3Server::Get().skip_reason();
    }
    RegistryOptions o;
    o.blob_storage = S3Storage();
    primary_ = std::make_unique<Harness>(o);
    // The replica that serves the GETs: its own, empty local cache (the primary's holds what
    // it uploaded).
    replica_ = std::make_unique<Harness>(*primary_, RegistryOptions{});
  }

  std::unique_ptr<Harness> primary_;
  std::unique_ptr<Harness> replica_;
};

TEST_F(BlobStreamTest, RangeAndWholeGetsOfA20MiBBlobAreStreamedWithoutTheLocalCache) {
  const std::string bytes = RandomBytes(20u << 20, 7);
  const std::string digest = primary_->PushBlob("org/big", bytes);
  const std::string target = "/v2/org/big/blobs/" + digest;
  ASSERT_EQ(S3Of(*replica_).cached_bytes(), 0u);

  Response part = replica_->Call("GET", target, "", {{"Range", "bytes=5000000-6048575"}});
  ASSERT_EQ(part.status, 206) << part.body;
  EXPECT_EQ(part.Get("Content-Range").value_or(""),
            "bytes 5000000-6048575/" + std::to_string(bytes.size()));
  EXPECT_EQ(part.Get("Docker-Content-Digest").value_or(""), digest);
  EXPECT_TRUE(part.file_path.empty()) << "served from a local file: " << part.file_path;
  EXPECT_TRUE(BodyOf(part) == bytes.substr(5000000, 1048576));

  Response whole = replica_->Call("GET", target);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.BodySize(), bytes.size());
  EXPECT_TRUE(BodyOf(whole) == bytes);

  Response suffix = replica_->Call("GET", target, "", {{"Range", "bytes=-100"}});
  ASSERT_EQ(suffix.status, 206);
  EXPECT_TRUE(BodyOf(suffix) == bytes.substr(bytes.size() - 100));

  // Nothing was fetched whole: the replica's cache did not grow (a download would have put
  // the 20 MiB there).
  EXPECT_EQ(S3Of(*replica_).cached_bytes(), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(replica_->data() + "/cache/blobs"));

  Response past = replica_->Call("GET", target, "",
                                 {{"Range", "bytes=" + std::to_string(bytes.size()) + "-"}});
  EXPECT_EQ(past.status, 416);
  EXPECT_EQ(replica_->Call("HEAD", target).status, 200);
}

// A stored object whose bytes no longer hash to its name is never served whole: the streamed
// body ends before its last piece (the client sees a short body).
TEST_F(BlobStreamTest, ADamagedObjectIsCutShortNeverServedWhole) {
  const std::string bytes = RandomBytes(1u << 20, 8);
  const std::string digest = primary_->PushBlob("org/rot", bytes);
  auto key = S3Of(*replica_).KeyFor(digest);
  ASSERT_TRUE(key.ok());
  store::s3::S3Client client(
      blz::testing::CephS3Server::Get().Config(std::string("s3://") + kBucket));
  std::string rotten = bytes;
  rotten[rotten.size() / 2] ^= 0x5a;
  ASSERT_TRUE(client.PutObject(*key, rotten).ok());

  Response r = replica_->Call("GET", "/v2/org/rot/blobs/" + digest);
  if (r.status != 200) {
    EXPECT_EQ(r.status, 500) << r.body;  // found before answering (e.g. a verified copy)
    return;
  }
  ASSERT_NE(r.producer, nullptr);
  std::string sent;
  Status end;
  while (true) {
    Result<ByteSpan> piece = r.producer->Next();
    if (!piece.ok()) {
      end = piece.status();
      break;
    }
    if (piece->empty()) break;
    sent.append(reinterpret_cast<const char*>(piece->data()), piece->size());
  }
  EXPECT_EQ(end.code(), Code::kDigestMismatch) << end.ToString();
  EXPECT_NE(end.message().find(digest), std::string::npos) << end.message();
  EXPECT_LT(sent.size(), bytes.size());
}

}  // namespace
}  // namespace blz::registry
