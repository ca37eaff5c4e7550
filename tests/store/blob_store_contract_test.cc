// The blob seam's contract (store/blob_store.h), run against every driver: "fs" (a local
// directory) and "s3" (a real Ceph RADOS Gateway started once for this binary by
// tests/store/s3/ceph_s3_server.h; those cases skip, saying why, when Ceph is not installed).
// A new driver adds itself to kDrivers and to MakeStore/Damage.
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "core/digest.h"
#include "store/blob_store.h"
#include "store/fs/fs_blob_store.h"
#include "store/open_blob_store.h"
#include "store/s3/s3_blob_store.h"
#include "tests/store/s3/ceph_s3_server.h"
#include "tests/test_util.h"

namespace blz::store {
namespace {

using Clock = std::chrono::system_clock;
constexpr char kBucket[] = "blz-contract";

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string D(std::string_view bytes) { return MakeDigest(Sha256Hex(bytes)); }

// A plain HTTP/1.1 GET (no credentials) of an http:// URL: status and body.
std::pair<int, std::string> PlainGet(const std::string& url) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  using tcp = boost::asio::ip::tcp;
  const std::string rest = url.substr(std::string("http://").size());
  const std::string hostport = rest.substr(0, rest.find('/'));
  const std::string target = rest.substr(hostport.size());
  boost::asio::io_context ioc;
  tcp::resolver resolver(ioc);
  tcp::socket socket(ioc);
  boost::asio::connect(socket, resolver.resolve(hostport.substr(0, hostport.find(':')),
                                                hostport.substr(hostport.find(':') + 1)));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, hostport);
  http::write(socket, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(socket, buf, res);
  return {static_cast<int>(res.result_int()), res.body()};
}

class BlobStoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "s3") {
      testing::CephS3Server& s3 = testing::CephS3Server::Get();
      if (!s3.available()) GTEST_SKIP() << s3.skip_reason();
      Status made = s3.CreateBucket(kBucket);
      ASSERT_TRUE(made.ok()) << made.ToString();
    }
    store_ = MakeStore({});
    ASSERT_NE(store_, nullptr);
  }

  // A fresh store of the parameter's driver; s3: its own prefix in the bucket.
  std::unique_ptr<BlobStore> MakeStore(s3::S3BlobStoreOptions options) {
    if (GetParam() == "fs") {
      auto fs = FsBlobStore::Open(tmp_ / "data");
      EXPECT_TRUE(fs.ok()) << fs.status().ToString();
      return fs.ok() ? std::move(*fs) : nullptr;
    }
    prefix_ = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
    for (char& c : prefix_) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    prefix_ += "-" + RandomHex(4);
    auto s = s3::S3BlobStore::Open(tmp_ / "data",
                                   testing::CephS3Server::Get().Config(
                                       std::string("s3://") + kBucket + "/" + prefix_),
                                   options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  // Replaces the stored bytes of `digest` with `bytes` behind the store's back (disk rot).
  void Damage(const std::string& digest, const std::string& bytes) {
    if (GetParam() == "fs") {
      auto path = dynamic_cast<FsBlobStore&>(*store_).PathFor(digest);
      ASSERT_TRUE(path.ok());
      testing::WriteFileBytes(*path, bytes);
      return;
    }
    auto& s3store = dynamic_cast<s3::S3BlobStore&>(*store_);
    auto key = s3store.KeyFor(digest);
    ASSERT_TRUE(key.ok());
    s3::S3Client client(testing::CephS3Server::Get().Config(std::string("s3://") + kBucket));
    ASSERT_TRUE(client.PutObject(*key, bytes).ok());
  }

  testing::TempDir tmp_;
  std::string prefix_;
  std::unique_ptr<BlobStore> store_;
};

TEST_P(BlobStoreContractTest, PublishedBlobIsStatedListedAndReadableLocally) {
  const std::string bytes = RandomBytes(70000, 1);
  const Clock::time_point before = Clock::now() - std::chrono::minutes(5);
  auto info = store_->PutBytes(bytes);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->digest, D(bytes));

  auto st = store_->Stat(D(bytes));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, bytes.size());
  EXPECT_GT(st->modified, before);
  EXPECT_TRUE(store_->Contains(D(bytes)));

  auto local = store_->LocalFile(D(bytes));
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(local->size, bytes.size());
  EXPECT_TRUE(testing::ReadFileBytes(local->path) == bytes);

  auto listed = store_->ListDigests();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, std::vector<std::string>{D(bytes)});
  EXPECT_TRUE(store_->Verify(D(bytes)).ok());
  // Nothing left behind in the replica's temporary directory.
  EXPECT_TRUE(std::filesystem::is_empty(store_->uploads_dir()));
}

TEST_P(BlobStoreContractTest, MissingAndMalformedDigests) {
  const std::string missing = D("never stored");
  EXPECT_EQ(store_->Stat(missing).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->LocalFile(missing).status().code(), Code::kNotFound);
  EXPECT_FALSE(store_->Contains(missing));
  EXPECT_EQ(store_->Stat("sha256:XYZ").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->LocalFile("md5:00").status().code(), Code::kInvalidArgument);
}

TEST_P(BlobStoreContractTest, WrongDigestStoresNothing) {
  auto bad = store_->PutBytes("actual bytes", D("other bytes"));
  EXPECT_EQ(bad.status().code(), Code::kDigestMismatch);
  EXPECT_FALSE(store_->Contains(D("other bytes")));
  EXPECT_FALSE(store_->Contains(D("actual bytes")));
  auto listed = store_->ListDigests();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());

  const std::string temp = store_->NewTempPath("upload");
  testing::WriteFileBytes(temp, "file bytes");
  EXPECT_EQ(store_->Publish(temp, D("not the file")).status().code(), Code::kDigestMismatch);
  EXPECT_TRUE(std::filesystem::exists(temp)) << "left for the caller";
  auto ok = store_->Publish(temp, D("file bytes"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(temp)) << "a published upload is moved, never copied";
}

// 11 MiB with 5 MiB parts: the s3 driver sends three parts (multipart upload).
TEST_P(BlobStoreContractTest, LargeBlobRoundTripsByteIdentical) {
  s3::S3BlobStoreOptions options;
  options.multipart_threshold = 5ull << 20;
  options.part_size = 5ull << 20;
  if (GetParam() == "s3") store_ = MakeStore(options);
  const std::string bytes = RandomBytes((11ull << 20) + 123, 2);
  auto w = store_->NewWriter();
  ASSERT_TRUE(w.ok());
  for (size_t off = 0; off < bytes.size(); off += 1 << 20) {
    ASSERT_TRUE(w->Append(std::string_view(bytes).substr(off, 1 << 20)).ok());
  }
  auto info = w->Commit(D(bytes));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(store_->Stat(D(bytes))->size, bytes.size());
  EXPECT_TRUE(store_->Verify(D(bytes)).ok());  // s3: hashed from the bucket, not the cache
}

// All of a reader's pieces, in order ("<error: ...>" appended when one fails).
std::string ReadAll(BlobReader& reader, size_t* pieces = nullptr) {
  std::string out;
  while (true) {
    Result<ByteSpan> piece = reader.Next();
    if (!piece.ok()) return out + "<error: " + piece.status().ToString() + ">";
    if (piece->empty()) return out;
    EXPECT_LE(piece->size(), 256u << 10) << "pieces stay bounded";
    if (pieces != nullptr) ++*pieces;
    out.append(reinterpret_cast<const char*>(piece->data()), piece->size());
  }
}

TEST_P(BlobStoreContractTest, OpenRangeStreamsExactlyTheRangeInBoundedPieces) {
  const std::string bytes = RandomBytes((3ull << 20) + 17, 3);
  ASSERT_TRUE(store_->PutBytes(bytes).ok());
  struct Case {
    uint64_t offset, length;
  };
  for (const Case& c : {Case{0, bytes.size()}, Case{1000, 1}, Case{12345, 2ull << 20},
                        Case{bytes.size() - 10, 10}, Case{7, 0}}) {
    auto reader = store_->OpenRange(D(bytes), c.offset, c.length);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    size_t pieces = 0;
    const std::string got = ReadAll(**reader, &pieces);
    EXPECT_TRUE(got == bytes.substr(c.offset, c.length))
        << c.offset << "+" << c.length << ": " << got.size() << " bytes";
    if (c.length > (256u << 10)) {
      EXPECT_GT(pieces, 1u);
    }
  }
  EXPECT_EQ(store_->OpenRange(D("absent"), 0, 5).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->OpenRange("sha256:nothex", 0, 5).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->OpenRange(D(bytes), bytes.size() - 5, 10).status().code(),
            Code::kInvalidArgument);
}

TEST_P(BlobStoreContractTest, RemoveIfOlderKeepsYoungBlobsAndCountsFreedBytes) {
  auto info = store_->PutBytes("garbage");
  ASSERT_TRUE(info.ok());
  auto young = store_->RemoveIfOlder(info->digest, Clock::now() - std::chrono::hours(1));
  EXPECT_EQ(young.status().code(), Code::kUnavailable);
  EXPECT_TRUE(store_->Contains(info->digest));

  auto freed = store_->RemoveIfOlder(info->digest, Clock::now() + std::chrono::hours(1));
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(*freed, 7u);
  EXPECT_FALSE(store_->Contains(info->digest));
  EXPECT_EQ(store_->LocalFile(info->digest).status().code(), Code::kNotFound)
      << "no stale cached copy";
  auto again = store_->RemoveIfOlder(info->digest, Clock::now() + std::chrono::hours(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

TEST_P(BlobStoreContractTest, ScrubQuarantinesDamagedBlobsOnly) {
  auto good = store_->PutBytes("good blob");
  auto bad = store_->PutBytes("blob to be damaged");
  ASSERT_TRUE(good.ok() && bad.ok());
  Damage(bad->digest, "blob to be DAMAGED");
  EXPECT_EQ(store_->Verify(bad->digest).code(), Code::kDigestMismatch);

  std::vector<std::string> lines;
  auto report = store_->Scrub([&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->blobs, 2u);
  EXPECT_EQ(report->quarantined, std::vector<std::string>{bad->digest});
  EXPECT_TRUE(report->errors.empty());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_FALSE(store_->Contains(bad->digest));
  EXPECT_TRUE(store_->Contains(good->digest));
  EXPECT_EQ(testing::ReadFileBytes(store_->quarantine_dir() + "/" + bad->digest.substr(7)),
            "blob to be DAMAGED");
}

TEST_P(BlobStoreContractTest, PresignedUrlsWhereTheDriverHasThem) {
  auto info = store_->PutBytes("presigned bytes");
  ASSERT_TRUE(info.ok());
  auto url = store_->PresignGet(info->digest, std::chrono::minutes(10));
  if (GetParam() == "fs") {
    EXPECT_EQ(url.status().code(), Code::kUnsupported);
    return;
  }
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  auto [status, body] = PlainGet(*url);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, "presigned bytes");
}

// Upload parts (the chunks of an open upload session): stored from a file that is consumed,
// read back concatenated in the caller's order, listed by session, and deleted with the
// session; they are not blobs.
TEST_P(BlobStoreContractTest, UploadPartsAreSharedConcatenatedAndDeleted) {
  const std::string session = "0a1b2c3d-0000-4000-8000-00000000000" + std::string(1, 'e');
  const std::vector<std::pair<std::string, std::string>> parts = {
      {"00000000000000000000-aa", std::string(70000, 'a')},
      {"00000000000000070000-bb", "second chunk"},
      {"00000000000000070012-cc", std::string(3, 'c')}};
  for (const auto& [name, bytes] : parts) {
    const std::string temp = store_->NewTempPath("body");
    testing::WriteFileBytes(temp, bytes);
    Status put = store_->PutUploadPart(session, name, temp);
    ASSERT_TRUE(put.ok()) << put.ToString();
    EXPECT_FALSE(std::filesystem::exists(temp)) << "the chunk's file is consumed";
  }
  EXPECT_EQ(store_->PutUploadPart(session, "bad;name", store_->NewTempPath("x")).code(),
            Code::kInvalidArgument);
  auto sessions = store_->ListUploadPartSessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status().ToString();
  EXPECT_EQ(*sessions, std::vector<std::string>{session});
  EXPECT_TRUE(store_->ListDigests()->empty()) << "parts are not blobs";

  // s3 keeps local copies of the parts it received; another replica has none: read as it would.
  if (GetParam() == "s3") {
    ASSERT_TRUE(std::filesystem::exists(store_->uploads_dir() + "/parts-" + session));
    std::filesystem::remove_all(store_->uploads_dir() + "/parts-" + session);
  }
  // All three, in order; then one alone (fs: linked, not copied).
  const std::string all = store_->NewTempPath("session");
  Status concat = store_->ConcatUploadParts(
      session, {parts[0].first, parts[1].first, parts[2].first}, all, nullptr);
  ASSERT_TRUE(concat.ok()) << concat.ToString();
  EXPECT_EQ(testing::ReadFileBytes(all), parts[0].second + parts[1].second + parts[2].second);
  const std::string one = store_->NewTempPath("session");
  ASSERT_TRUE(store_->ConcatUploadParts(session, {parts[1].first}, one, nullptr).ok());
  EXPECT_EQ(testing::ReadFileBytes(one), parts[1].second);
  EXPECT_EQ(store_->ConcatUploadParts(session, {"00000000000000000000-zz"},
                                      store_->NewTempPath("session"), nullptr)
                .code(),
            Code::kNotFound);

  ASSERT_TRUE(store_->DeleteUploadParts(session).ok());
  EXPECT_TRUE(store_->DeleteUploadParts(session).ok()) << "deleting nothing is OK";
  sessions = store_->ListUploadPartSessions();
  ASSERT_TRUE(sessions.ok());
  EXPECT_TRUE(sessions->empty());
  EXPECT_EQ(store_->ConcatUploadParts(session, {parts[0].first}, store_->NewTempPath("s"), nullptr)
                .code(),
            Code::kNotFound);
  // Chunks written in place (the session file) where the parts are local files: fs only.
  {
    auto file = store_->LockSessionFile(session);
    if (GetParam() == "fs") {
      EXPECT_TRUE(file.ok()) << file.status().ToString();
    } else {
      EXPECT_EQ(file.status().code(), Code::kUnsupported) << file.status().ToString();
    }
  }
  ASSERT_TRUE(store_->DeleteUploadParts(session).ok());
}

INSTANTIATE_TEST_SUITE_P(Drivers, BlobStoreContractTest, ::testing::Values("fs", "s3"),
                         [](const auto& p) { return p.param; });

// ---- session-file part names (store/blob_store.h) ----

TEST(SessionFilePartTest, NamesRoundTripAndOrdinaryPartsAreNotThem) {
  const std::string name = SessionFilePartName(67108864, 134217728);
  EXPECT_EQ(name, "00000000000067108864-session-00000000000134217728");
  EXPECT_TRUE(CheckUploadPartId("part", name).ok());
  uint64_t start = 0, end = 0;
  ASSERT_TRUE(ParseSessionFilePart(name, &start, &end));
  EXPECT_EQ(start, 67108864u);
  EXPECT_EQ(end, 134217728u);
  for (const char* other : {"00000000000067108864-0123456789abcdef", "",
                            "00000000000000000010-session-00000000000000000009",  // end < start
                            "0000000000000000001x-session-00000000000000000019",
                            "99999999999999999999-session-99999999999999999999",  // > 2^64
                            "00000000000000000000-session-0000000000000000001"}) {
    EXPECT_FALSE(ParseSessionFilePart(other, &start, &end)) << other;
  }
}

TEST(SessionFilePartTest, HoldsAllOnlyForContiguousSessionFilePartsFromZero) {
  EXPECT_TRUE(SessionFileHoldsAll({}, 0));
  EXPECT_FALSE(SessionFileHoldsAll({}, 1));
  EXPECT_TRUE(SessionFileHoldsAll({SessionFilePartName(0, 10), SessionFilePartName(10, 25)}, 25));
  EXPECT_FALSE(SessionFileHoldsAll({SessionFilePartName(0, 10), SessionFilePartName(10, 25)}, 30));
  EXPECT_FALSE(SessionFileHoldsAll({SessionFilePartName(0, 10), SessionFilePartName(11, 25)}, 25));
  EXPECT_FALSE(SessionFileHoldsAll({SessionFilePartName(5, 10)}, 10));
  EXPECT_FALSE(SessionFileHoldsAll({SessionFilePartName(0, 10), "00000000000000000010-00ff00ff00ff00ff"}, 20));
}

// ---- s3-only behaviour ----

class S3BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::CephS3Server& s3 = testing::CephS3Server::Get();
    if (!s3.available()) GTEST_SKIP() << s3.skip_reason();
    ASSERT_TRUE(s3.CreateBucket(kBucket).ok());
    prefix_ = std::string("s3only-") + RandomHex(4);
  }
  std::string Url() const { return std::string("s3://") + kBucket + "/" + prefix_; }

  testing::TempDir tmp_;
  std::string prefix_;
};

TEST_F(S3BlobStoreTest, ObjectKeysFollowTheDocumentedLayout) {
  auto store = s3::S3BlobStore::Open(tmp_ / "data", testing::CephS3Server::Get().Config(Url()));
  ASSERT_TRUE(store.ok());
  auto info = (*store)->PutBytes("layout");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  s3::S3Client client(testing::CephS3Server::Get().Config(std::string("s3://") + kBucket));
  auto got = client.GetObject(prefix_ + "/blobs/sha256/" + info->digest.substr(7));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "layout");
}

TEST_F(S3BlobStoreTest, LocalCacheStaysWithinItsBoundAndRefetchesVerified) {
  s3::S3BlobStoreOptions options;
  options.cache_bytes = 2500;
  auto opened = s3::S3BlobStore::Open(tmp_ / "data", testing::CephS3Server::Get().Config(Url()),
                                      options);
  ASSERT_TRUE(opened.ok());
  s3::S3BlobStore& store = **opened;
  std::vector<std::string> blobs;
  for (uint32_t i = 0; i < 4; ++i) {
    blobs.push_back(RandomBytes(1000, 10 + i));
    ASSERT_TRUE(store.PutBytes(blobs.back()).ok());
    EXPECT_LE(store.cached_bytes(), 2500u);
  }
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp_ / "data/cache/blobs")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 2u);
  // The first blob was evicted: fetched again (and verified) on demand.
  auto local = store.LocalFile(D(blobs[0]));
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_TRUE(testing::ReadFileBytes(local->path) == blobs[0]);
  EXPECT_LE(store.cached_bytes(), 2500u);

  // A damaged local copy never condemns an intact object: quarantine drops only the copy.
  testing::WriteFileBytes(local->path, std::string(1000, 'x'));
  auto q = store.Quarantine(D(blobs[0]));
  EXPECT_EQ(q.status().code(), Code::kNotFound) << (q.ok() ? *q : q.status().ToString());
  EXPECT_TRUE(store.Contains(D(blobs[0])));
  auto again = store.LocalFile(D(blobs[0]));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(testing::ReadFileBytes(again->path) == blobs[0]);
}

// Issue 25: blob GETs proxy ranges. A ranged read of a 20 MiB object is one ranged GET: the
// local cache (what LocalFile downloads whole into) neither grows nor is read.
TEST_F(S3BlobStoreTest, OpenRangeNeitherDownloadsTheObjectWholeNorFillsTheCache) {
  const std::string bytes = RandomBytes(20ull << 20, 4);
  const std::string digest = D(bytes);
  {
    auto writer_store =
        s3::S3BlobStore::Open(tmp_ / "writer", testing::CephS3Server::Get().Config(Url()));
    ASSERT_TRUE(writer_store.ok());
    ASSERT_TRUE((*writer_store)->PutBytes(bytes).ok());
  }
  auto opened = s3::S3BlobStore::Open(tmp_ / "reader", testing::CephS3Server::Get().Config(Url()));
  ASSERT_TRUE(opened.ok());
  s3::S3BlobStore& store = **opened;
  auto reader = store.OpenRange(digest, 7ull << 20, 3ull << 20);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE(ReadAll(**reader) == bytes.substr(7ull << 20, 3ull << 20));
  auto whole = store.OpenRange(digest, 0, bytes.size());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_TRUE(ReadAll(**whole) == bytes);
  EXPECT_EQ(store.cached_bytes(), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(tmp_ / "reader/cache/blobs"));
  // Where they end up otherwise: LocalFile downloads the object whole into the cache.
  ASSERT_TRUE(store.LocalFile(digest).ok());
  EXPECT_EQ(store.cached_bytes(), bytes.size());
}

TEST_F(S3BlobStoreTest, ReopenedStoreKeepsItsCache) {
  {
    auto store = s3::S3BlobStore::Open(tmp_ / "data", testing::CephS3Server::Get().Config(Url()));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->PutBytes("kept across restarts").ok());
  }
  auto store = s3::S3BlobStore::Open(tmp_ / "data", testing::CephS3Server::Get().Config(Url()));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->cached_bytes(), 20u);
}

TEST_F(S3BlobStoreTest, WrongSecretFailsTheReachabilityCheckNamingBucketAndCode) {
  const std::string secret = "wrongSecretKey000000000000000000000000042";
  auto store = s3::S3BlobStore::Open(
      tmp_ / "data", testing::CephS3Server::Get().Config(Url(), secret));
  ASSERT_TRUE(store.ok());
  Status s = (*store)->CheckReachable();
  EXPECT_EQ(s.code(), Code::kUnauthorized) << s.ToString();
  EXPECT_NE(s.message().find(kBucket), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("SignatureDoesNotMatch"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(secret), std::string::npos) << "leaks the secret";

  auto good = s3::S3BlobStore::Open(tmp_ / "data2", testing::CephS3Server::Get().Config(Url()));
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE((*good)->CheckReachable().ok());
  auto missing = s3::S3BlobStore::Open(
      tmp_ / "data3", testing::CephS3Server::Get().Config("s3://no-such-bucket-blz/x"));
  ASSERT_TRUE(missing.ok());
  Status m = (*missing)->CheckReachable();
  EXPECT_EQ(m.code(), Code::kNotFound) << m.ToString();
  EXPECT_NE(m.message().find("no-such-bucket-blz"), std::string::npos) << m.message();
}

TEST(OpenBlobStoreTest, PicksTheDriverByUrl) {
  testing::TempDir tmp;
  auto def = OpenBlobStore("", tmp / "a");
  ASSERT_TRUE(def.ok());
  EXPECT_EQ((*def)->driver(), "file");
  EXPECT_TRUE(std::filesystem::is_directory(tmp / "a/blobs/sha256"));
  auto dir = OpenBlobStore("file:" + (tmp / "b"), tmp / "a");
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(std::filesystem::is_directory(tmp / "b/blobs/sha256"));
  auto env = [](const char* name) -> const char* {
    std::string n(name);
    if (n == "AWS_ACCESS_KEY_ID") return "AKIDEXAMPLE";
    if (n == "AWS_SECRET_ACCESS_KEY") return "topsecretvalue";
    return nullptr;
  };
  auto s3 = OpenBlobStore("s3://bucket/p?endpoint=http://127.0.0.1:9&path_style=1", tmp / "c",
                          {}, env);
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ((*s3)->driver(), "s3");
  EXPECT_EQ((*s3)->Describe(), "s3://bucket/p");
  auto no_keys = OpenBlobStore("s3://bucket/p?endpoint=http://127.0.0.1:9", tmp / "d", {},
                               [](const char*) -> const char* { return nullptr; });
  EXPECT_EQ(no_keys.status().code(), Code::kUnauthorized);
  auto unknown = OpenBlobStore("gs://bucket?secret=x", tmp / "e");
  EXPECT_EQ(unknown.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(unknown.status().message().find("secret=x"), std::string::npos);
}

}  // namespace
}  // namespace blz::store
