// `blz serve --storage s3://...` end to end against a real S3 server (Ceph's RADOS Gateway,
// tests/store/s3/ceph_s3_server.h, started once for this binary; skipped with a message when
// Ceph is not installed): push, byte-identical pull, a patch pull (the server mmaps archives
// fetched into its local cache), garbage collection removing an unreferenced blob from the
// bucket, `--redirect` answering blob GETs with 307 to the gateway, and a wrong secret failing
// the start with the bucket and S3's error code named; and the S3 gateway stopping while the
// registry serves (clear 5xx, readiness false, recovery without a restart).
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "core/digest.h"
#include "core/file_util.h"
#include "store/s3/s3_client.h"
#include "tests/e2e/subprocess.h"
#include "tests/store/s3/ceph_s3_server.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
constexpr char kBucket[] = "blz-e2e";

class S3StorageE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    CephS3Server& s3 = CephS3Server::Get();
    if (!s3.available()) GTEST_SKIP() << s3.skip_reason();
    ASSERT_TRUE(s3.CreateBucket(kBucket).ok());
    prefix_ = "reg-" + RandomHex(4);
  }
  void TearDown() override { StopServe(&server_); }

  std::string StorageUrl() const { return CephS3Server::Get().StorageUrl(kBucket, prefix_); }
  std::map<std::string, std::string> ServerEnv(const std::string& secret = {}) {
    return CephS3Server::Get().AwsEnv(secret);
  }

  // Starts `blz serve --storage <bucket>` on <work>/data with `extra` flags and the S3 keys in
  // its environment (StartServe passes only the test's own environment, so set them there).
  void Start(const std::vector<std::string>& extra) {
    for (const auto& [k, v] : ServerEnv()) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> flags = {"--storage", StorageUrl(), "--log-format", "json",
                                      "--gc-grace", "1s"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    const std::string token = server_.token;
    server_ = StartServe(BLZ_BINARY, work_ / "data", flags, work_ / ("serve" + std::to_string(++starts_)));
    if (server_.token.empty()) server_.token = token;
    for (const auto& [k, v] : ServerEnv()) ::unsetenv(k.c_str());
    ASSERT_FALSE(server_.addr.empty())
        << ReadFileBytes(work_ / ("serve" + std::to_string(starts_) + ".err"));
  }
  std::string ServeErr() { return ReadFileBytes(work_ / ("serve" + std::to_string(starts_) + ".err")); }

  std::map<std::string, std::string> Client(const std::string& name, bool login = true) {
    std::map<std::string, std::string> env = {{"BLZ_CONFIG_DIR", work_ / ("config-" + name)},
                                              {"BLZ_CACHE_DIR", work_ / ("cache-" + name)}};
    if (login) {
      ProcessResult r = Blz({"login", server_.addr, "--token", server_.token}, env);
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    return env;
  }
  ProcessResult Blz(std::vector<std::string> args, const std::map<std::string, std::string>& env) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, env, work_.path());
  }
  ProcessResult Curl(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/curl", "-sS", "-H", "Authorization: Bearer " + server_.token});
    return RunProcess(args, {}, work_.path());
  }

  // The blob digests in the bucket under this test's prefix.
  std::set<std::string> BucketDigests() {
    store::s3::S3Client client(CephS3Server::Get().Config(std::string("s3://") + kBucket));
    std::set<std::string> out;
    const std::string p = prefix_ + "/blobs/sha256/";
    auto page = client.ListObjectsV2(p);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (page.ok()) {
      for (const auto& o : page->objects) out.insert("sha256:" + o.key.substr(p.size()));
    }
    return out;
  }

  void WaitForStorageIdle() {
    for (int i = 0; i < 1200; ++i) {
      ProcessResult r = Curl({"--fail-with-body", "http://" + server_.addr + "/v2/_blz/storage"});
      auto j = nlohmann::json::parse(r.out, nullptr, false);
      if (!j.is_discarded() && j.value("pending", uint64_t(1)) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the registry's storage thread did not become idle";
  }

  // Access-log lines of the current server with this status on a blob GET.
  int BlobGetsAnswered(int status) {
    int n = 0;
    std::istringstream in(ServeErr());
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      if (j.value("method", "") == "GET" && j.value("path", "").find("/blobs/sha256:") != std::string::npos &&
          j.value("status", 0) == status) {
        ++n;
      }
    }
    return n;
  }

  TempDir work_;
  std::string prefix_;
  ServeProcess server_;
  int starts_ = 0;
};

TEST_F(S3StorageE2ETest, PushPullPatchGcAndRedirectThroughTheBucket) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string base = corpus + "/tiny-gpt2/base";
  const std::string ft = corpus + "/tiny-gpt2/ft-v1";
  ASSERT_NO_FATAL_FAILURE(Start({}));
  auto pusher = Client("pusher");
  for (auto [dir, tag] : {std::pair{base, "base"}, std::pair{ft, "ft"}}) {
    ProcessResult r = Blz({"push", dir, server_.addr + "/e2e/s3:" + tag}, pusher);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  WaitForStorageIdle();
  // Nothing of the blobs is kept under <data>/blobs: they are in the bucket.
  EXPECT_FALSE(fs::exists(work_ / "data/blobs"));
  EXPECT_GE(BucketDigests().size(), 4u);  // two configs, archives (or their full patches)

  // A pull, byte-identical; then a patch pull (the server reads both archives from its cache).
  auto puller = Client("puller", /*login=*/false);
  const std::string out_base = work_ / "out-base";
  ProcessResult r1 = Blz({"pull", server_.addr + "/e2e/s3:base", "-o", out_base, "--json"}, puller);
  ASSERT_EQ(r1.exit_code, 0) << r1.out << r1.err;
  EXPECT_EQ(ReadTree(out_base), ReadTree(base));
  const std::string out_ft = work_ / "out-ft";
  ProcessResult r2 = Blz({"pull", server_.addr + "/e2e/s3:ft", "-o", out_ft, "--json"}, puller);
  ASSERT_EQ(r2.exit_code, 0) << r2.out << r2.err;
  EXPECT_TRUE(nlohmann::json::parse(r2.out).at("used_patch").get<bool>()) << r2.out;
  EXPECT_EQ(ReadTree(out_ft), ReadTree(ft));
  EXPECT_TRUE(fs::exists(work_ / "data/cache/blobs"));
  // A first collection past the grace period: the full patch of a version stored as a chain
  // is a cache the collection forgets (docs/storage.md, "Chains").
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ProcessResult gc0 = Curl({"--fail-with-body", "-X", "POST", "http://" + server_.addr + "/v2/_blz/gc"});
  ASSERT_EQ(gc0.exit_code, 0) << gc0.out << gc0.err;
  const std::set<std::string> stored = BucketDigests();  // now with the computed patch

  // An unreferenced blob goes up, then garbage collection removes it from the bucket.
  const std::string junk = "an unreferenced blob " + RandomHex(8);
  const std::string junk_digest = MakeDigest(Sha256Hex(junk));
  WriteFileBytes(work_ / "junk.bin", junk);
  ProcessResult up = Curl({"-X", "POST", "--data-binary", "@" + (work_ / "junk.bin"), "-w", "%{http_code}",
                           "-o", "/dev/null",
                           "http://" + server_.addr + "/v2/e2e/junk/blobs/uploads/?digest=" + junk_digest});
  ASSERT_EQ(up.out, "201") << up.err;
  EXPECT_EQ(BucketDigests().count(junk_digest), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past --gc-grace 1s
  ProcessResult gc = Curl({"--fail-with-body", "-X", "POST", "http://" + server_.addr + "/v2/_blz/gc"});
  ASSERT_EQ(gc.exit_code, 0) << gc.out << gc.err;
  auto report = nlohmann::json::parse(gc.out, nullptr, false);
  EXPECT_GE(report.value("blobs_removed", 0), 1) << gc.out;
  EXPECT_EQ(BucketDigests().count(junk_digest), 0u) << "GC left the blob in the bucket: " << gc.out;
  // Every referenced blob stayed.
  for (const std::string& d : BucketDigests()) EXPECT_EQ(stored.count(d), 1u) << d;
  EXPECT_EQ(BucketDigests().size(), stored.size());
  EXPECT_EQ(BlobGetsAnswered(307), 0) << "no redirects without --redirect";

  // --redirect: the same registry restarted (keeping raw archives, so that the archive itself
  // is in the bucket); a fresh client's blob GET goes to the gateway.
  StopServe(&server_);
  ASSERT_NO_FATAL_FAILURE(Start({"--redirect", "--keep-raw-archives"}));
  // Another model (the archives above are kept only as full patches, which are proxied).
  const std::string other = corpus + "/llama-tiny-random";
  ProcessResult p3 = Blz({"push", other, server_.addr + "/e2e/redirect:v1"}, Client("pusher2"));
  ASSERT_EQ(p3.exit_code, 0) << p3.out << p3.err;
  // Logged in, as a real user is: the client follows the 307 to the gateway, dropping its
  // registry Authorization header there (client/registry_client.h; unit-tested in
  // RegistryClientTest.BlobRedirectToAnotherHostDropsAuthorization).
  auto fresh = Client("fresh");
  const std::string out_r = work_ / "out-redirect";
  ProcessResult r3 =
      Blz({"pull", server_.addr + "/e2e/redirect:v1", "-o", out_r, "--no-patch", "--json"}, fresh);
  ASSERT_EQ(r3.exit_code, 0) << r3.out << r3.err;
  EXPECT_EQ(ReadTree(out_r), ReadTree(other));
  EXPECT_GE(BlobGetsAnswered(307), 1) << ServeErr();
  EXPECT_EQ(BlobGetsAnswered(200) + BlobGetsAnswered(206), 0) << "proxied anyway: " << ServeErr();
  // The Location is the gateway's presigned URL.
  const std::string archive = nlohmann::json::parse(r3.out).at("digest").get<std::string>();
  ProcessResult head = Curl({"-o", "/dev/null", "-w", "%{http_code} %{redirect_url}",
                             "http://" + server_.addr + "/v2/e2e/redirect/blobs/" + archive});
  EXPECT_EQ(head.out.rfind("307 " + CephS3Server::Get().endpoint() + "/" + kBucket + "/" + prefix_ +
                               "/blobs/sha256/",
                           0),
            0u)
      << head.out;
}

TEST_F(S3StorageE2ETest, WrongSecretFailsTheStartNamingTheBucketAndS3sCode) {
  const std::string secret = "notTheSecret00000000000000000000000000077";
  for (const auto& [k, v] : ServerEnv(secret)) ::setenv(k.c_str(), v.c_str(), 1);
  ProcessResult r = RunProcess({BLZ_BINARY, "serve", "--data", work_ / "data", "--listen",
                                "127.0.0.1:0", "--storage", StorageUrl()},
                               {}, work_.path(), 60);
  for (const auto& [k, v] : ServerEnv()) ::unsetenv(k.c_str());
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;  // kExitUnauthorized
  EXPECT_NE(r.err.find(kBucket), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SignatureDoesNotMatch"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(secret), std::string::npos) << "the secret was printed";
  EXPECT_EQ(r.out.find("listening on"), std::string::npos) << r.out;
}

// The S3 server stops while `blz serve --storage s3://` runs (its RADOS Gateway process is
// stopped; the cluster's monitor and OSD keep the objects), then comes back on the same port:
// requests that need the bucket (a blob GET and HEAD, a monolithic upload, a chunk of an open
// upload session) answer a 5xx naming S3 within the client's retries (no hang, no crash), /readyz says not ready naming the storage, requests that need only the database
// keep working, nothing half-written reaches the bucket, and once the gateway is back the same
// process serves everything again (no restart of blz).
TEST_F(S3StorageE2ETest, S3DownWhileServingIsReportedAndRecoveredWithoutRestart) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string base = corpus + "/tiny-gpt2/base";
  ASSERT_NO_FATAL_FAILURE(Start({}));
  ProcessResult push = Blz({"push", base, server_.addr + "/e2e/down:base", "--json"}, Client("pusher"));
  ASSERT_EQ(push.exit_code, 0) << push.out << push.err;
  WaitForStorageIdle();
  const std::string archive = nlohmann::json::parse(push.out).at("digest").get<std::string>();
  const std::string url = "http://" + server_.addr;
  // The local cache would serve the archive without S3: empty it, so that its GET needs the bucket.
  for (auto& e : fs::recursive_directory_iterator(work_ / "data/cache/blobs")) {
    if (e.is_regular_file()) fs::remove(e.path());
  }
  const std::set<std::string> before = BucketDigests();
  // A chunked upload session, opened while S3 is up; its chunk comes while it is down.
  ProcessResult opened = Curl({"-X", "POST", "-D", work_ / "open.h", "-o", "/dev/null",
                               url + "/v2/e2e/down/blobs/uploads/"});
  ASSERT_EQ(opened.exit_code, 0) << opened.err;
  std::string session;
  {
    std::istringstream in(ReadFileBytes(work_ / "open.h"));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Location: ", 0) == 0 || line.rfind("location: ", 0) == 0) {
        session = line.substr(10);
        while (!session.empty() && (session.back() == '\r' || session.back() == ' ')) session.pop_back();
      }
    }
  }
  ASSERT_EQ(session.rfind("/v2/e2e/down/blobs/uploads/", 0), 0u) << ReadFileBytes(work_ / "open.h");
  const std::string chunk = "a chunk sent while S3 was down " + RandomHex(8);
  WriteFileBytes(work_ / "chunk.bin", chunk);
  const std::vector<std::string> patch = {
      "-X", "PATCH", "-H", "Content-Type: application/octet-stream", "-H",
      "Content-Range: 0-" + std::to_string(chunk.size() - 1), "--data-binary",
      "@" + (work_ / "chunk.bin"), url + session};

  // The gateway goes away (SIGTERM to radosgw; the rest of the Ceph cluster stays up).
  const std::string dir = CephS3Server::Get().var("CEPH_S3_DIR");
  ASSERT_FALSE(dir.empty());
  const std::string pid_file = dir + "/run/client.rgw.s3.pid";
  std::string pid = ReadFileBytes(pid_file);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  ASSERT_FALSE(pid.empty()) << pid_file;
  ASSERT_EQ(std::system(("kill -TERM " + pid + " && for i in $(seq 1 200); do kill -0 " + pid +
                         " 2>/dev/null || exit 0; sleep 0.05; done; exit 1").c_str()),
            0)
      << "radosgw did not stop";
  struct GatewayBack {  // whatever the assertions do, the gateway comes back for later tests
    std::string dir;
    bool done = false;
    void Start() {
      if (done) return;
      done = true;
      const std::string cmd = "radosgw -c '" + dir + "/ceph.conf' -n client.rgw.s3 </dev/null >>'" +
                              dir + "/log/client.rgw.s3.out' 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << "radosgw did not start again";
    }
    ~GatewayBack() { Start(); }
  } back{dir};

  auto curl = [&](std::vector<std::string> args) {
    // --max-time: a hang is a failure here, not a stuck test.
    args.insert(args.begin(), {"--max-time", "120", "-w", "\n%{http_code}"});
    ProcessResult r = Curl(args);
    const size_t nl = r.out.rfind('\n');
    return std::pair<std::string, std::string>{r.out.substr(nl + 1), r.out.substr(0, nl)};
  };
  // Readiness names the storage.
  auto [ready_code, ready_body] = curl({url + "/readyz"});
  EXPECT_EQ(ready_code, "503") << ready_body;
  EXPECT_NE(ready_body.find("storage"), std::string::npos) << ready_body;
  EXPECT_EQ(curl({url + "/healthz"}).first, "200");
  // A blob GET that needs the bucket, a HEAD (asks S3), an upload (publishes to S3): 5xx, naming S3.
  auto [get_code, get_body] =
      curl({"-o", work_ / "get.out", url + "/v2/e2e/down/blobs/" + archive});
  EXPECT_EQ(get_code[0], '5') << get_code;
  EXPECT_NE(ReadFileBytes(work_ / "get.out").find("S3"), std::string::npos)
      << ReadFileBytes(work_ / "get.out");
  auto [head_code, head_body] = curl({"-I", url + "/v2/e2e/down/blobs/" + archive});
  EXPECT_EQ(head_code[0], '5') << head_code << head_body;
  const std::string blob = "written while S3 was down " + RandomHex(8);
  const std::string blob_digest = MakeDigest(Sha256Hex(blob));
  WriteFileBytes(work_ / "down.bin", blob);
  const std::string upload_url = url + "/v2/e2e/down/blobs/uploads/?digest=" + blob_digest;
  auto [up_code, up_body] = curl({"-X", "POST", "--data-binary", "@" + (work_ / "down.bin"), upload_url});
  EXPECT_EQ(up_code[0], '5') << up_code << up_body;
  EXPECT_NE(up_body.find("S3"), std::string::npos) << up_body;
  auto [patch_code, patch_body] = curl(patch);
  EXPECT_EQ(patch_code[0], '5') << patch_code << patch_body;
  // The database alone still answers: the manifest, the tag list.
  EXPECT_EQ(curl({"-o", "/dev/null", "-H", "Accept: application/vnd.oci.image.manifest.v1+json",
                  url + "/v2/e2e/down/manifests/base"}).first,
            "200");
  EXPECT_EQ(curl({"-o", "/dev/null", url + "/v2/e2e/down/tags/list"}).first, "200");

  // The gateway comes back on the same port; the same blz process recovers.
  back.Start();
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    ready = curl({url + "/readyz"}).first == "200";
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(ready) << curl({url + "/readyz"}).second;
  // Nothing of the failed upload reached the bucket (blobs or upload parts).
  EXPECT_EQ(BucketDigests(), before);
  {
    store::s3::S3Client client(CephS3Server::Get().Config(std::string("s3://") + kBucket));
    auto parts = client.ListObjectsV2(prefix_ + "/uploads/");
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    EXPECT_TRUE(parts->objects.empty()) << parts->objects.size() << " upload parts left";
  }
  // The chunk that failed moved nothing: the session takes it again at offset 0 and finishes.
  auto [patch2_code, patch2_body] = curl(patch);
  EXPECT_EQ(patch2_code, "202") << patch2_body;
  const std::string chunk_digest = MakeDigest(Sha256Hex(chunk));
  auto [put_code, put_body] = curl({"-X", "PUT", url + session + "?digest=" + chunk_digest});
  EXPECT_EQ(put_code, "201") << put_body;
  EXPECT_EQ(curl({url + "/v2/e2e/down/blobs/" + chunk_digest}).second, chunk);
  auto [up2_code, up2_body] = curl({"-X", "POST", "--data-binary", "@" + (work_ / "down.bin"), upload_url});
  EXPECT_EQ(up2_code, "201") << up2_body;
  auto [get2_code, get2_body] = curl({url + "/v2/e2e/down/blobs/" + blob_digest});
  EXPECT_EQ(get2_code, "200");
  EXPECT_EQ(get2_body, blob);
  const std::string out = work_ / "out-after";
  ProcessResult pull = Blz({"pull", server_.addr + "/e2e/down:base", "-o", out, "--no-patch"},
                           Client("puller", /*login=*/false));
  ASSERT_EQ(pull.exit_code, 0) << pull.out << pull.err;
  EXPECT_EQ(ReadTree(out), ReadTree(base));
}

}  // namespace
}  // namespace blz::testing
