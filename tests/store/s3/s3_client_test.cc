// S3Client against a real S3 server: Ceph's RADOS Gateway started by
// ../shared/tools/ceph-s3/start.sh (one throwaway cluster per test binary, ~2 s to start).
// Skipped with a message when that folder is absent.
#include "store/s3/s3_client.h"

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

namespace blz::store::s3 {
namespace {

namespace fs = std::filesystem;

const std::string kToolDir = std::string(BLZ_SOURCE_DIR) + "/../shared/tools/ceph-s3";

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class S3ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kToolDir + "/start.sh")) {
      skip_reason_ = "no S3 server: " + kToolDir + "/start.sh is absent";
      return;
    }
    // start.sh prints only KEY=VALUE lines (and an export line) on stdout; progress on stderr.
    FILE* p = popen(("bash '" + kToolDir + "/start.sh'").c_str(), "r");
    ASSERT_NE(p, nullptr);
    char line[512];
    while (std::fgets(line, sizeof(line), p)) {
      std::string l(line);
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      size_t eq = l.find('=');
      if (eq != std::string::npos && l.rfind("export", 0) != 0) env_[l.substr(0, eq)] = l.substr(eq + 1);
    }
    const int rc = pclose(p);
    ASSERT_EQ(rc, 0) << "ceph-s3/start.sh failed (its stderr above; logs kept in "
                     << env_["CEPH_S3_DIR"] << "/log)";
    ASSERT_FALSE(env_["S3_ENDPOINT"].empty());
    S3Client admin(Config());
    Status st = admin.CreateBucket();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  static void TearDownTestSuite() {
    if (!env_["CEPH_S3_DIR"].empty()) {
      const std::string cmd = "bash '" + kToolDir + "/stop.sh' '" + env_["CEPH_S3_DIR"] + "' 1>&2";
      if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "ceph-s3/stop.sh failed";
    }
    env_.clear();
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_FALSE(env_["S3_ENDPOINT"].empty()) << "the S3 server did not start";
    dir_ = fs::temp_directory_path() / ("blz_s3_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Path style: the gateway has no DNS name for virtual-host buckets.
  static S3Config Config() {
    auto c = ParseS3Url("s3://blz-test/prefix?path_style=1&endpoint=" + env_["S3_ENDPOINT"]);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    S3Config config = c.ok() ? *c : S3Config{};
    std::map<std::string, std::string> vars = {{"AWS_ACCESS_KEY_ID", env_["S3_ACCESS_KEY"]},
                                               {"AWS_SECRET_ACCESS_KEY", env_["S3_SECRET_KEY"]},
                                               {"AWS_REGION", env_["S3_REGION"]}};
    Status st = ApplyS3Environment(&config, [vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    config.timeout = std::chrono::seconds(20);
    config.backoff = std::chrono::milliseconds(50);
    return config;
  }

  static inline std::map<std::string, std::string> env_;
  static inline std::string skip_reason_;
  fs::path dir_;
};

TEST_F(S3ClientTest, PutGetRangeHeadDeleteRoundTrip) {
  S3Client s3(Config());
  const std::string data = RandomBytes(100000, 1);
  ASSERT_TRUE(s3.PutObject("rt/obj", data).ok());
  auto got = s3.GetObject("rt/obj");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, data);

  auto mid = s3.GetObject("rt/obj", ByteRange{10, 19});
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  EXPECT_EQ(*mid, data.substr(10, 10));
  auto tail = s3.GetObject("rt/obj", ByteRange{99990, std::nullopt});
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(*tail, data.substr(99990));

  auto past_end = s3.GetObject("rt/obj", ByteRange{200000, std::nullopt});
  EXPECT_EQ(past_end.status().code(), Code::kInvalidArgument) << past_end.status().ToString();

  auto head = s3.HeadObject("rt/obj");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size, data.size());
  EXPECT_FALSE(head->etag.empty());

  // Streamed from and to files, with a key that needs encoding.
  const std::string in = (dir_ / "in.bin").string();
  const std::string out = (dir_ / "out.bin").string();
  const std::string big = RandomBytes(3 << 20, 2);
  std::ofstream(in, std::ios::binary) << big;
  const std::string odd_key = "rt/odd key+&=$,é~.bin";
  ASSERT_TRUE(s3.PutObjectFromFile(odd_key, in).ok());
  Status to_file = s3.GetObjectToFile(odd_key, out);
  ASSERT_TRUE(to_file.ok()) << to_file.ToString();
  EXPECT_EQ(ReadFile(out), big);
  ASSERT_TRUE(s3.GetObjectToFile(odd_key, out, ByteRange{5, 9}).ok());
  EXPECT_EQ(ReadFile(out), big.substr(5, 5));

  ASSERT_TRUE(s3.DeleteObject("rt/obj").ok());
  ASSERT_TRUE(s3.DeleteObject(odd_key).ok());
  EXPECT_EQ(s3.HeadObject("rt/obj").status().code(), Code::kNotFound);
  EXPECT_TRUE(s3.DeleteObject("rt/obj").ok()) << "deleting a missing key is not an error";
}

TEST_F(S3ClientTest, MissingKeyIsNotFoundNamingBucketKeyStatusAndCode) {
  S3Client s3(Config());
  auto got = s3.GetObject("no/such/key");
  const Status st = got.status();
  ASSERT_EQ(st.code(), Code::kNotFound) << st.ToString();
  const std::string& m = st.message();
  EXPECT_NE(m.find("blz-test/no/such/key"), std::string::npos) << m;
  EXPECT_NE(m.find("404"), std::string::npos) << m;
  EXPECT_NE(m.find("NoSuchKey"), std::string::npos) << m;
}

TEST_F(S3ClientTest, MultipartUploadOfTwoPartsReassemblesByteIdentical) {
  S3Client s3(Config());
  const std::string part1 = RandomBytes(kMinMultipartPartSize + 17, 3);
  const std::string part2 = RandomBytes(123457, 4);
  auto id = s3.CreateMultipartUpload("mp/obj");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto e1 = s3.UploadPart("mp/obj", *id, 1, part1);
  ASSERT_TRUE(e1.ok()) << e1.status().ToString();
  auto e2 = s3.UploadPart("mp/obj", *id, 2, part2);
  ASSERT_TRUE(e2.ok()) << e2.status().ToString();
  Status done = s3.CompleteMultipartUpload("mp/obj", *id, {{1, *e1}, {2, *e2}});
  ASSERT_TRUE(done.ok()) << done.ToString();

  const std::string out = (dir_ / "mp.bin").string();
  ASSERT_TRUE(s3.GetObjectToFile("mp/obj", out).ok());
  EXPECT_TRUE(ReadFile(out) == part1 + part2) << "the reassembled object differs";
  // A range across the part boundary.
  auto across = s3.GetObject("mp/obj", ByteRange{part1.size() - 3, part1.size() + 2});
  ASSERT_TRUE(across.ok()) << across.status().ToString();
  EXPECT_EQ(*across, part1.substr(part1.size() - 3) + part2.substr(0, 3));
  ASSERT_TRUE(s3.DeleteObject("mp/obj").ok());
}

TEST_F(S3ClientTest, ListWithPrefixAndContinuation) {
  S3Client s3(Config());
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) keys.push_back("list/a/k" + std::to_string(i));
  for (const auto& k : keys) ASSERT_TRUE(s3.PutObject(k, k).ok());
  ASSERT_TRUE(s3.PutObject("list/b/other", "x").ok());

  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto page = s3.ListObjectsV2("list/a/", token, 2);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    EXPECT_LE(page->objects.size(), 2u);
    for (const auto& o : page->objects) {
      seen.push_back(o.key);
      EXPECT_EQ(o.size, o.key.size());
    }
    token = page->next_continuation_token;
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  EXPECT_EQ(seen, keys);
  EXPECT_EQ(pages, 3);
  for (const auto& k : keys) ASSERT_TRUE(s3.DeleteObject(k).ok());
  ASSERT_TRUE(s3.DeleteObject("list/b/other").ok());
}

TEST_F(S3ClientTest, AbortAndListStaleMultipartUploads) {
  S3Client s3(Config());
  auto a = s3.CreateMultipartUpload("stale/a");
  auto b = s3.CreateMultipartUpload("stale/b");
  ASSERT_TRUE(a.ok() && b.ok());
  auto ids = [&]() {
    std::vector<std::string> out;
    auto l = s3.ListMultipartUploads("stale/");
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (l.ok()) {
      for (const auto& u : l->uploads) {
        EXPECT_FALSE(u.initiated.empty());
        out.push_back(u.key + ":" + u.upload_id);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(ids(), (std::vector<std::string>{"stale/a:" + *a, "stale/b:" + *b}));
  ASSERT_TRUE(s3.AbortMultipartUpload("stale/a", *a).ok());
  EXPECT_EQ(ids(), (std::vector<std::string>{"stale/b:" + *b}));
  ASSERT_TRUE(s3.AbortMultipartUpload("stale/b", *b).ok());
  EXPECT_TRUE(ids().empty());
}

TEST_F(S3ClientTest, WrongSecretIsAClearErrorAndNotRetried) {
  S3Config config = Config();
  config.credentials.secret_access_key = "wrong-secret-0123456789";
  int retries = 0;
  config.on_retry = [&retries](int, const Status&) { ++retries; };
  S3Client s3(config);
  Status st = s3.PutObject("auth/obj", "x");
  EXPECT_EQ(st.code(), Code::kUnauthorized) << st.ToString();
  EXPECT_NE(st.message().find("403"), std::string::npos) << st.message();
  EXPECT_TRUE(st.message().find("SignatureDoesNotMatch") != std::string::npos ||
              st.message().find("AccessDenied") != std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("blz-test/auth/obj"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("wrong-secret"), std::string::npos) << "the secret leaked";
  EXPECT_EQ(retries, 0) << "a 403 must not be retried";
}

// A plain HTTP/1.1 GET (no signing) of an http:// URL; returns status and body.
std::pair<int, std::string> PlainGet(const std::string& url) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  using tcp = boost::asio::ip::tcp;
  const std::string rest = url.substr(std::string("http://").size());
  const std::string hostport = rest.substr(0, rest.find('/'));
  const std::string target = rest.substr(hostport.size());
  const std::string host = hostport.substr(0, hostport.find(':'));
  const std::string port = hostport.substr(hostport.find(':') + 1);
  boost::asio::io_context ioc;
  tcp::resolver resolver(ioc);
  tcp::socket socket(ioc);
  boost::asio::connect(socket, resolver.resolve(host, port));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, hostport);
  http::write(socket, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(socket, buf, res);
  return {static_cast<int>(res.result_int()), res.body()};
}

TEST_F(S3ClientTest, PresignedGetUrlWorksWithAPlainHttpGet) {
  S3Client s3(Config());
  const std::string data = RandomBytes(4096, 5);
  ASSERT_TRUE(s3.PutObject("presign/obj", data).ok());
  auto url = s3.PresignUrl("GET", "presign/obj", 600, static_cast<int64_t>(std::time(nullptr)));
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->rfind(env_["S3_ENDPOINT"] + "/blz-test/presign/obj?", 0), 0u) << *url;
  EXPECT_EQ(url->find(env_["S3_SECRET_KEY"]), std::string::npos);
  auto [status, body] = PlainGet(*url);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(body == data) << "presigned GET returned other bytes";

  // A tampered signature is refused.
  std::string bad = *url;
  bad.back() = bad.back() == '0' ? '1' : '0';
  EXPECT_EQ(PlainGet(bad).first, 403);
  ASSERT_TRUE(s3.DeleteObject("presign/obj").ok());
}

}  // namespace
}  // namespace blz::store::s3
