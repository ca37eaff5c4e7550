// End-to-end on PostgreSQL metadata (issue 25): real `blz serve --metadata postgresql://...`
// processes on a throwaway PostgreSQL 15 (tests/store/postgres/postgres_server.h; the cases
// skip, saying why, when PostgreSQL is not installed), driven through the `blz` binary and
// curl. The blobs stay in each replica's --data directory (the shared object store is another
// seam), so pushes and pulls go through one replica while the metadata (tokens, tags, the
// catalog) is read through another.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <map>
#include <string>
#include <vector>

#include "core/digest.h"
#include "tests/e2e/subprocess.h"
#include "tests/store/postgres/postgres_fixture.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;

class PostgresE2ETest : public PostgresTest {
 protected:
  ProcessResult Blz(std::vector<std::string> args, const std::map<std::string, std::string>& env) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, env, work_.path());
  }
  ProcessResult Curl(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/curl", "-sS"});
    return RunProcess(args, {}, work_.path());
  }
  // Runs curl; returns the HTTP status ("000" when none) and puts the body in *body.
  std::string Http(std::vector<std::string> args, std::string* body = nullptr) {
    const std::string out = work_ / "curl-body";
    args.insert(args.begin(), {"-o", out, "-w", "%{http_code}", "--max-time", "30"});
    ProcessResult r = Curl(args);
    if (body != nullptr) *body = ReadFileBytes(out);
    return r.out;
  }
  std::map<std::string, std::string> ClientEnv(const std::string& name) {
    return {{"BLZ_CONFIG_DIR", work_ / ("config-" + name)},
            {"BLZ_CACHE_DIR", work_ / ("cache-" + name)}};
  }
  TempDir work_;
};

TEST_F(PostgresE2ETest, MigrateOnlyAppliesTheSchemaAndPrintsItsVersion) {
  const std::string url = FreshDatabase();
  ProcessResult r = Blz({"serve", "--data", work_ / "data", "--metadata", url, "--migrate-only"},
                        {});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("metadata: " + url + ": schema version "), std::string::npos) << r.out;
  // Again: nothing left to apply, the same version.
  ProcessResult again =
      Blz({"serve", "--data", work_ / "data", "--metadata", url, "--migrate-only"}, {});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);

  // An unreachable server: a clear error naming host and port, never the password.
  ProcessResult down = Blz({"serve", "--data", work_ / "data", "--metadata",
                            "postgresql://blz:pw-s3cret@127.0.0.1:1/blz?connect_timeout=2",
                            "--migrate-only"},
                           {});
  EXPECT_NE(down.exit_code, 0);
  EXPECT_NE(down.err.find("127.0.0.1"), std::string::npos) << down.err;
  EXPECT_EQ(down.err.find("pw-s3cret"), std::string::npos) << down.err;
  EXPECT_EQ(down.out.find("pw-s3cret"), std::string::npos) << down.out;
}

TEST_F(PostgresE2ETest, PushPullAndListThroughReplicasSharingTheDatabase) {
  const std::string url = FreshDatabase();
  // The replica that initializes the database prints the admin token; the second does not.
  ServeProcess a = StartServe(BLZ_BINARY, work_ / "data-a", {"--metadata", url}, work_ / "a");
  ASSERT_FALSE(a.addr.empty()) << ReadFileBytes(work_ / "a.err");
  ASSERT_EQ(a.token.size(), 64u) << ReadFileBytes(work_ / "a.out");
  // B reads its metadata URL from its config file.
  WriteFileBytes(work_ / "b.toml", "[serve]\nmetadata = \"" + url + "\"\n");
  ServeProcess b =
      StartServe(BLZ_BINARY, work_ / "data-b", {"--config", work_ / "b.toml"}, work_ / "b");
  ASSERT_FALSE(b.addr.empty()) << ReadFileBytes(work_ / "b.err");
  EXPECT_TRUE(b.token.empty()) << "a second replica printed another admin token";
  // Nothing of the metadata is in the data directories.
  EXPECT_FALSE(fs::exists(work_ / "data-a/blz.db"));

  const std::string models = work_ / "generated";
  ProcessResult g = RunProcess(
      {"/usr/bin/python3", std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py", models},
      {}, work_.path());
  ASSERT_EQ(g.exit_code, 0) << g.err;

  auto pusher = ClientEnv("pusher");
  ASSERT_EQ(Blz({"login", a.addr, "--token", a.token}, pusher).exit_code, 0);
  for (auto [dir, tag] : {std::pair{models + "/base", "v1"}, std::pair{models + "/ft", "v2"}}) {
    ProcessResult r = Blz({"push", dir, a.addr + "/team/demo:" + tag}, pusher);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  auto puller = ClientEnv("puller");
  const std::string out1 = work_ / "out-v1", out2 = work_ / "out-v2";
  ProcessResult p1 = Blz({"pull", a.addr + "/team/demo:v1", "-o", out1}, puller);
  ASSERT_EQ(p1.exit_code, 0) << p1.out << p1.err;
  EXPECT_EQ(ReadTree(out1), ReadTree(models + "/base"));
  ProcessResult p2 = Blz({"pull", a.addr + "/team/demo:v2", "-o", out2}, puller);
  ASSERT_EQ(p2.exit_code, 0) << p2.out << p2.err;
  EXPECT_EQ(ReadTree(out2), ReadTree(models + "/ft"));

  // Listings through either replica: the catalog and the tags are the database's.
  for (const std::string& addr : {a.addr, b.addr}) {
    SCOPED_TRACE(addr);
    ProcessResult cat = Curl({"--fail-with-body", "-H", "Authorization: Bearer " + a.token,
                              "http://" + addr + "/v2/_catalog"});
    ASSERT_EQ(cat.exit_code, 0) << cat.out << cat.err;
    EXPECT_NE(cat.out.find("\"team/demo\""), std::string::npos) << cat.out;
    ProcessResult tags = Curl({"--fail-with-body", "-H", "Authorization: Bearer " + a.token,
                               "http://" + addr + "/v2/team/demo/tags/list"});
    ASSERT_EQ(tags.exit_code, 0) << tags.out << tags.err;
    EXPECT_NE(tags.out.find("\"v1\""), std::string::npos) << tags.out;
    EXPECT_NE(tags.out.find("\"v2\""), std::string::npos) << tags.out;
  }
  // A token made through B is accepted by A at once.
  auto admin_b = ClientEnv("admin-b");
  ASSERT_EQ(Blz({"login", b.addr, "--token", a.token}, admin_b).exit_code, 0);
  ProcessResult created =
      Blz({"token", "create", "reader", "--scope", "team/*:pull", "--registry", b.addr}, admin_b);
  ASSERT_EQ(created.exit_code, 0) << created.out << created.err;
  ProcessResult listed = Blz({"token", "list", "--registry", a.addr}, pusher);
  ASSERT_EQ(listed.exit_code, 0) << listed.out << listed.err;
  EXPECT_NE(listed.out.find("reader"), std::string::npos) << listed.out;

  // A restart of A on the same database prints no new admin token.
  StopServe(&a);
  ServeProcess again = StartServe(BLZ_BINARY, work_ / "data-a", {"--metadata", url},
                                  work_ / "a2");
  ASSERT_FALSE(again.addr.empty()) << ReadFileBytes(work_ / "a2.err");
  EXPECT_TRUE(again.token.empty());
  StopServe(&again);
  StopServe(&b);
}

// Replicas starting at the same moment on a fresh database: migrations are applied once (the
// advisory lock), and exactly one of them creates and prints the admin token.
TEST_F(PostgresE2ETest, ReplicasStartingTogetherPrintOneAdminToken) {
  const std::string url = FreshDatabase();
  constexpr int kReplicas = 3;
  std::vector<pid_t> pids;
  for (int i = 0; i < kReplicas; ++i) {
    const std::string name = "r" + std::to_string(i);
    pids.push_back(StartProcess({BLZ_BINARY, "serve", "--data", work_ / ("data-" + name),
                                 "--listen", "127.0.0.1:0", "--metadata", url},
                                {}, work_ / (name + ".out"), work_ / (name + ".err")));
    ASSERT_GT(pids.back(), 0);
  }
  int listening = 0, tokens = 0;
  for (int tries = 0; tries < 600 && listening < kReplicas; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    listening = tokens = 0;
    for (int i = 0; i < kReplicas; ++i) {
      const std::string out = ReadFileBytes(work_ / ("r" + std::to_string(i) + ".out"));
      if (out.find("listening on ") != std::string::npos) ++listening;
      if (out.find("admin token: ") != std::string::npos) ++tokens;
    }
  }
  for (pid_t pid : pids) {
    ServeProcess p;
    p.pid = pid;
    StopServe(&p);
  }
  std::string errors;
  for (int i = 0; i < kReplicas; ++i) errors += ReadFileBytes(work_ / ("r" + std::to_string(i) + ".err"));
  EXPECT_EQ(listening, kReplicas) << errors;
  EXPECT_EQ(tokens, 1) << errors;
}

// Faults (issue 25): the PostgreSQL server stops while `blz serve` is serving. /readyz turns
// 503 naming the metadata part (the database's address goes to the log), a manifest GET answers 503 (the process lives on, /healthz
// stays 200), and once the server is back on the same port and data directory the replica
// reconnects by itself: /readyz 200 and the same manifest, without restarting blz.
TEST_F(PostgresE2ETest, DatabaseDownWhileServingIsReportedAndRecoveredWithoutRestart) {
  const std::string url = FreshDatabase();
  ServeProcess a = StartServe(BLZ_BINARY, work_ / "data", {"--metadata", url}, work_ / "a");
  ASSERT_FALSE(a.addr.empty()) << ReadFileBytes(work_ / "a.err");
  ASSERT_EQ(a.token.size(), 64u) << ReadFileBytes(work_ / "a.out");
  const std::string base = "http://" + a.addr;
  const std::string auth = "Authorization: Bearer " + a.token;

  const std::string config = "{}";
  const std::string config_digest = MakeDigest(Sha256Hex(config));
  WriteFileBytes(work_ / "config.json", config);
  ASSERT_EQ(Http({"-X", "POST", "-H", auth, "-H", "Content-Type: application/octet-stream",
                  "--data-binary", "@" + (work_ / "config.json"),
                  base + "/v2/team/m/blobs/uploads/?digest=" + config_digest}),
            "201");
  const std::string manifest =
      R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
      R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
      config_digest + R"(","size":2},"layers":[]})";
  WriteFileBytes(work_ / "manifest.json", manifest);
  ASSERT_EQ(Http({"-X", "PUT", "-H", auth, "-H",
                  "Content-Type: application/vnd.oci.image.manifest.v1+json", "--data-binary",
                  "@" + (work_ / "manifest.json"), base + "/v2/team/m/manifests/v1"}),
            "201");
  std::string body;
  ASSERT_EQ(Http({"-H", auth, base + "/v2/team/m/manifests/v1"}, &body), "200");
  EXPECT_EQ(body, manifest);
  ASSERT_EQ(Http({base + "/readyz"}, &body), "200") << body;

  ASSERT_TRUE(server().Halt().ok());
  // The readiness result is cached for about a second: poll (bounded) until it turns.
  std::string code;
  for (int i = 0; i < 100 && code != "503"; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    code = Http({base + "/readyz"}, &body);
  }
  EXPECT_EQ(code, "503") << body;
  EXPECT_NE(body.find("\"part\":\"metadata\""), std::string::npos) << body;
  // Which server failed is in the log, not in the unauthenticated answer.
  EXPECT_EQ(body.find("127.0.0.1:" + std::to_string(server().port())), std::string::npos) << body;
  EXPECT_NE(ReadFileBytes(work_ / "a.err")
                .find("readiness: not ready: metadata: unavailable: postgresql://blz@127.0.0.1:" +
                      std::to_string(server().port())),
            std::string::npos)
      << ReadFileBytes(work_ / "a.err");
  EXPECT_EQ(body.find("\"part\":\"storage\""), std::string::npos) << body;
  EXPECT_EQ(Http({"-H", auth, base + "/v2/team/m/manifests/v1"}, &body), "503") << body;
  EXPECT_EQ(Http({base + "/v2/team/m/manifests/v1"}, &body), "503") << body;
  EXPECT_EQ(Http({base + "/healthz"}, &body), "200") << body;
  EXPECT_EQ(::kill(a.pid, 0), 0) << "blz serve exited: " << ReadFileBytes(work_ / "a.err");

  ASSERT_TRUE(server().Resume().ok());
  code.clear();
  for (int i = 0; i < 100 && code != "200"; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    code = Http({base + "/readyz"}, &body);
  }
  EXPECT_EQ(code, "200") << body;
  ASSERT_EQ(Http({"-H", auth, base + "/v2/team/m/manifests/v1"}, &body), "200") << body;
  EXPECT_EQ(body, manifest);
  std::string metrics;
  EXPECT_EQ(Http({base + "/metrics"}, &metrics), "200");
  EXPECT_NE(metrics.find("blz_ready 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("blz_metadata_query_errors_total "), std::string::npos) << metrics;
  StopServe(&a);
}

}  // namespace
}  // namespace blz::testing
