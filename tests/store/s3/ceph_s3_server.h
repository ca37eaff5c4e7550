// A throwaway real S3 server for tests: Ceph's RADOS Gateway started by
// ../shared/tools/ceph-s3/start.sh (about 2 s, ~110 MiB RSS), at most once per test binary, on
// first use; stopped by a gtest environment at the end of the binary. Binaries using it are
// WHOLE_BINARY CTest tests (one server for all their cases).
//
//   CephS3Server& s3 = CephS3Server::Get();
//   if (!s3.available()) GTEST_SKIP() << s3.skip_reason();
//   S3Config c = s3.Config("s3://bucket/prefix");   // path style, credentials applied
//   std::string env = s3.Env();                     // AWS_* for a child process
#ifndef BLZ_TESTS_STORE_S3_CEPH_S3_SERVER_H_
#define BLZ_TESTS_STORE_S3_CEPH_S3_SERVER_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <unistd.h>

#include "store/s3/s3_client.h"
#include "store/s3/s3_config.h"

namespace blz::testing {

class CephS3Server {
 public:
  static CephS3Server& Get() {
    static CephS3Server* server = [] {
      auto* s = new CephS3Server();
      ::testing::AddGlobalTestEnvironment(new StopAtEnd(s));
      return s;
    }();
    server->StartOnce();
    return *server;
  }

  bool available() const { return skip_reason_.empty(); }
  const std::string& skip_reason() const { return skip_reason_; }
  // S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION, CEPH_S3_DIR as start.sh printed them.
  const std::string& var(const std::string& name) { return env_[name]; }
  const std::string& endpoint() { return env_["S3_ENDPOINT"]; }

  // The AWS_* variables that give a client (a `blz serve`, the registry) this server's keys;
  // `secret` overrides the secret key when not empty.
  std::map<std::string, std::string> AwsEnv(const std::string& secret = {}) {
    return {{"AWS_ACCESS_KEY_ID", env_["S3_ACCESS_KEY"]},
            {"AWS_SECRET_ACCESS_KEY", secret.empty() ? env_["S3_SECRET_KEY"] : secret},
            {"AWS_REGION", env_["S3_REGION"]}};
  }
  // The --storage URL of `prefix` in `bucket` on this server.
  std::string StorageUrl(const std::string& bucket, const std::string& prefix) {
    return "s3://" + bucket + "/" + prefix + "?path_style=1&endpoint=" + endpoint();
  }

  // A complete config for `url` ("s3://BUCKET/PREFIX"): the endpoint, path style, the keys
  // (`secret` overrides the secret key when not empty), short timeouts.
  store::s3::S3Config Config(const std::string& url, const std::string& secret = {}) {
    auto c = store::s3::ParseS3Url(url + (url.find('?') == std::string::npos ? "?" : "&") +
                                   "path_style=1&endpoint=" + endpoint());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    store::s3::S3Config config = c.ok() ? *c : store::s3::S3Config{};
    std::map<std::string, std::string> vars = AwsEnv(secret);
    Status st = store::s3::ApplyS3Environment(&config, [vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    config.timeout = std::chrono::seconds(20);
    config.backoff = std::chrono::milliseconds(50);
    config.max_attempts = 2;
    return config;
  }

  // Creates `bucket` (an existing one is fine).
  Status CreateBucket(const std::string& bucket) {
    store::s3::S3Client client(Config("s3://" + bucket));
    return client.CreateBucket();
  }

 private:
  struct StopAtEnd : ::testing::Environment {
    explicit StopAtEnd(CephS3Server* s) : server(s) {}
    void TearDown() override { server->Stop(); }
    CephS3Server* server;
  };

  void StartOnce() {
    if (started_) return;
    started_ = true;
    const std::string tool = std::string(BLZ_SOURCE_DIR) + "/../shared/tools/ceph-s3";
    tool_dir_ = tool;
    if (!std::filesystem::exists(tool + "/start.sh")) {
      skip_reason_ = "no S3 server: " + tool + "/start.sh is absent";
      return;
    }
    if (std::system("command -v radosgw >/dev/null 2>&1") != 0 &&
        std::getenv("BLZ_CEPH_INSTALL") == nullptr) {
      skip_reason_ = "no S3 server: Ceph's radosgw is not installed (scripts/setup.sh installs "
                     "ceph-mon ceph-osd radosgw)";
      return;
    }
    FILE* p = popen(("CEPH_S3_NO_INSTALL=1 bash '" + tool + "/start.sh'").c_str(), "r");
    if (p == nullptr) {
      skip_reason_ = "popen failed";
      return;
    }
    char line[512];
    while (std::fgets(line, sizeof(line), p)) {
      std::string l(line);
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      size_t eq = l.find('=');
      if (eq != std::string::npos && l.rfind("export", 0) != 0) {
        env_[l.substr(0, eq)] = l.substr(eq + 1);
      }
    }
    const int rc = pclose(p);
    if (!env_["CEPH_S3_DIR"].empty()) {
      // A watchdog stops the cluster when this process dies without its gtest tear-down (a
      // crash, std::terminate); after a normal Stop() it finds the directory gone.
      const std::string dir = env_["CEPH_S3_DIR"];
      const std::string watchdog =
          "(while kill -0 " + std::to_string(::getpid()) + " 2>/dev/null && ! grep -q "
          "'^State:.*Z' /proc/" + std::to_string(::getpid()) + "/status 2>/dev/null; do "
          "sleep 2; done; "
          "[ -d '" + dir + "' ] && bash '" + tool + "/stop.sh' '" + dir + "') "
          ">/dev/null 2>&1 </dev/null &";
      if (std::system(watchdog.c_str()) != 0) ADD_FAILURE() << "cannot start the watchdog";
    }
    if (rc != 0 || env_["S3_ENDPOINT"].empty()) {
      ADD_FAILURE() << "ceph-s3/start.sh failed (its stderr above; logs in "
                    << env_["CEPH_S3_DIR"] << "/log)";
      skip_reason_ = "the S3 server did not start";
    }
  }

  void Stop() {
    if (env_["CEPH_S3_DIR"].empty()) return;
    const std::string cmd =
        "bash '" + tool_dir_ + "/stop.sh' '" + env_["CEPH_S3_DIR"] + "' 1>&2";
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "ceph-s3/stop.sh failed";
    env_.clear();
  }

  bool started_ = false;
  std::string tool_dir_;
  std::string skip_reason_;
  std::map<std::string, std::string> env_;
};

}  // namespace blz::testing

#endif  // BLZ_TESTS_STORE_S3_CEPH_S3_SERVER_H_
