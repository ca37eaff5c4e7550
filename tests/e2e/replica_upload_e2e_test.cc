// An upload split across replicas (issue 25): three `blz serve` processes on one PostgreSQL
// database (tests/store/postgres/postgres_fixture.h) and one S3 bucket (Ceph's RADOS Gateway,
// tests/store/s3/ceph_s3_server.h); the cases skip, saying why, when either is not installed.
// The session is opened on A, a chunk is PATCHed to B, the upload is closed on C, and the blob
// reads back byte-identical from A; a chunk at a stale offset is refused with 416 by a replica
// that did not receive the chunk before it; a wrong digest at the closing PUT publishes
// nothing; and no upload part is left in the bucket afterwards.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/digest.h"
#include "core/file_util.h"
#include "store/s3/s3_client.h"
#include "tests/e2e/subprocess.h"
#include "tests/store/postgres/postgres_fixture.h"
#include "tests/store/s3/ceph_s3_server.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

constexpr char kBucket[] = "blz-replica-uploads";

struct HttpAnswer {
  int code = 0;
  std::string headers;  // as received, lower-cased names not guaranteed
  std::string body;
  // The value of header `name` (case-insensitive), "" when absent.
  std::string Header(const std::string& name) const {
    std::string lower_headers = headers, lower_name = name + ":";
    for (char& c : lower_headers) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : lower_name) c = char(std::tolower(static_cast<unsigned char>(c)));
    size_t at = lower_headers.rfind("\n" + lower_name);
    if (at == std::string::npos) return "";
    at += 1 + lower_name.size();
    size_t end = headers.find('\r', at);
    std::string v = headers.substr(at, end == std::string::npos ? std::string::npos : end - at);
    while (!v.empty() && v.front() == ' ') v.erase(v.begin());
    return v;
  }
};

class ReplicaUploadE2ETest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    CephS3Server& s3 = CephS3Server::Get();
    if (!s3.available()) GTEST_SKIP() << s3.skip_reason();
    ASSERT_TRUE(s3.CreateBucket(kBucket).ok());
    prefix_ = "reg-" + RandomHex(4);
    const std::string storage = s3.StorageUrl(kBucket, prefix_);
    const std::string metadata = FreshDatabase();
    ASSERT_FALSE(metadata.empty());
    const std::map<std::string, std::string> env = s3.AwsEnv();
    // StartServe passes the test's own environment: set the keys there while starting.
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    for (const char* name : {"a", "b", "c"}) {
      replicas_.push_back(StartServe(BLZ_BINARY, work_ / ("data-" + std::string(name)),
                                     {"--metadata", metadata, "--storage", storage},
                                     work_ / name));
      if (replicas_.back().addr.empty()) break;
    }
    for (const auto& [k, v] : env) ::unsetenv(k.c_str());
    for (size_t i = 0; i < replicas_.size(); ++i) {
      ASSERT_FALSE(replicas_[i].addr.empty())
          << ReadFileBytes(work_ / (std::string(1, char('a' + i)) + ".err"));
    }
    ASSERT_EQ(replicas_.size(), 3u);
    token_ = replicas_[0].token;
    ASSERT_EQ(token_.size(), 64u) << ReadFileBytes(work_ / "a.out");
  }
  void TearDown() override {
    for (ServeProcess& r : replicas_) StopServe(&r);
  }

  std::string Url(int replica, const std::string& path) {
    return "http://" + replicas_[size_t(replica)].addr + path;
  }
  // One request through curl; `body` (may be empty) is sent from a file.
  HttpAnswer Http(const std::string& method, const std::string& url,
                  const std::vector<std::string>& headers = {}, const std::string& body = {}) {
    const std::string n = std::to_string(++requests_);
    const std::string head_file = work_ / ("h" + n), body_file = work_ / ("b" + n),
                      out_file = work_ / ("o" + n);
    std::vector<std::string> args = {"/usr/bin/curl", "-sS", "-D", head_file, "-o", out_file,
                                     "-w", "%{http_code}", "-H",
                                     "Authorization: Bearer " + token_};
    if (method == "HEAD") {
      args.push_back("-I");
    } else {
      args.insert(args.end(), {"-X", method});
    }
    for (const std::string& h : headers) args.insert(args.end(), {"-H", h});
    if (method == "PATCH" || method == "PUT" || method == "POST") {
      WriteFileBytes(body_file, body);
      args.insert(args.end(), {"-H", "Content-Type: application/octet-stream",
                               "--data-binary", "@" + body_file});
    }
    args.push_back(url);
    ProcessResult r = RunProcess(args, {}, work_.path());
    HttpAnswer answer;
    answer.code = std::atoi(r.out.c_str());
    answer.headers = ReadFileBytes(head_file);
    answer.body = ReadFileBytes(out_file);
    return answer;
  }
  // The keys of upload parts left in the bucket under this test's prefix.
  std::vector<std::string> PartsInBucket() {
    store::s3::S3Client client(CephS3Server::Get().Config(std::string("s3://") + kBucket));
    std::vector<std::string> out;
    auto page = client.ListObjectsV2(prefix_ + "/uploads/");
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (page.ok()) {
      for (const auto& o : page->objects) out.push_back(o.key);
    }
    return out;
  }
  static std::string Bytes(size_t n, unsigned seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = char((i * 131 + seed * 7 + (i >> 9)) & 0xff);
    return s;
  }

  TempDir work_;
  std::string prefix_;
  std::string token_;
  std::vector<ServeProcess> replicas_;
  int requests_ = 0;
};

TEST_F(ReplicaUploadE2ETest, StartedOnAContinuedOnBFinishedOnC) {
  const std::string first = Bytes(300 * 1024 + 7, 1), second = Bytes(200 * 1024 + 3, 2);
  const std::string blob = first + second;
  const std::string digest = "sha256:" + Sha256Hex(blob);

  HttpAnswer started = Http("POST", Url(0, "/v2/team/up/blobs/uploads/"));
  ASSERT_EQ(started.code, 202) << started.headers << started.body;
  const std::string location = started.Header("Location");
  ASSERT_FALSE(location.empty()) << started.headers;

  HttpAnswer patched =
      Http("PATCH", Url(1, location),
           {"Content-Range: 0-" + std::to_string(first.size() - 1)}, first);
  ASSERT_EQ(patched.code, 202) << patched.headers << patched.body;
  EXPECT_EQ(patched.Header("Range"), "0-" + std::to_string(first.size() - 1));

  // C never saw the chunk, yet knows the offset: a chunk at a stale offset is refused.
  HttpAnswer stale = Http("PATCH", Url(2, location),
                          {"Content-Range: 0-" + std::to_string(second.size() - 1)}, second);
  EXPECT_EQ(stale.code, 416) << stale.headers << stale.body;
  EXPECT_EQ(stale.Header("Range"), "0-" + std::to_string(first.size() - 1)) << stale.headers;
  // The status through C reads the same offset.
  HttpAnswer status = Http("GET", Url(2, location));
  EXPECT_EQ(status.code, 204) << status.headers << status.body;
  EXPECT_EQ(status.Header("Range"), "0-" + std::to_string(first.size() - 1)) << status.headers;

  HttpAnswer put = Http("PUT", Url(2, location + "?digest=" + digest),
                        {"Content-Range: " + std::to_string(first.size()) + "-" +
                         std::to_string(blob.size() - 1)},
                        second);
  ASSERT_EQ(put.code, 201) << put.headers << put.body;
  EXPECT_EQ(put.Header("Docker-Content-Digest"), digest);

  HttpAnswer got = Http("GET", Url(0, "/v2/team/up/blobs/" + digest));
  ASSERT_EQ(got.code, 200) << got.headers;
  EXPECT_TRUE(got.body == blob) << "the blob read from A differs (" << got.body.size()
                                << " bytes, expected " << blob.size() << ")";
  // The session is gone everywhere, and so are its parts.
  EXPECT_EQ(Http("GET", Url(1, location)).code, 404);
  EXPECT_TRUE(PartsInBucket().empty()) << PartsInBucket().front();
}

TEST_F(ReplicaUploadE2ETest, WrongDigestAtTheClosingPutPublishesNothing) {
  const std::string first = Bytes(64 * 1024, 3), second = Bytes(1000, 4);
  const std::string actual = "sha256:" + Sha256Hex(first + second);
  const std::string claimed = "sha256:" + Sha256Hex(std::string("something else"));

  HttpAnswer started = Http("POST", Url(0, "/v2/team/bad/blobs/uploads/"));
  ASSERT_EQ(started.code, 202) << started.headers << started.body;
  const std::string location = started.Header("Location");
  ASSERT_EQ(Http("PATCH", Url(1, location), {}, first).code, 202);
  HttpAnswer put = Http("PUT", Url(2, location + "?digest=" + claimed), {}, second);
  EXPECT_EQ(put.code, 400) << put.headers << put.body;
  EXPECT_NE(put.body.find("DIGEST_INVALID"), std::string::npos) << put.body;

  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(Http("HEAD", Url(r, "/v2/team/bad/blobs/" + claimed)).code, 404);
    EXPECT_EQ(Http("HEAD", Url(r, "/v2/team/bad/blobs/" + actual)).code, 404);
    EXPECT_EQ(Http("GET", Url(r, location)).code, 404);  // the session was discarded
  }
  EXPECT_TRUE(PartsInBucket().empty()) << PartsInBucket().front();
}

}  // namespace
}  // namespace blz::testing
