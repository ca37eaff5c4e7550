// GET /readyz tells anonymous callers (load balancers, anyone on the network) which part is
// down, never what the error says: the database's host and port and the bucket stay in the
// log, and in the answer to an admin token (registry/health_handlers.h).
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "registry/health_handlers.h"
#include "registry/readiness.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;

constexpr char kDbError[] =
    "postgresql://blz@db.internal:5432/blz: connection refused (is the server running?)";
constexpr char kS3Error[] = "storage s3://models/reg (endpoint http://10.0.0.5:7480) is not usable";

Readiness Down() {
  Readiness r;
  r.ready = false;
  r.metadata = Unavailable(kDbError);
  r.storage = Unavailable(kS3Error);
  return r;
}

TEST(ReadyzTest, AnonymousCallersLearnOnlyWhichPartIsDown) {
  Response res = ReadyzResponse(Down(), /*detail=*/false);
  EXPECT_EQ(res.status, 503);
  EXPECT_EQ(res.body.find("db.internal"), std::string::npos) << res.body;
  EXPECT_EQ(res.body.find("5432"), std::string::npos) << res.body;
  EXPECT_EQ(res.body.find("models"), std::string::npos) << res.body;
  EXPECT_EQ(res.body.find("10.0.0.5"), std::string::npos) << res.body;
  json j = json::parse(res.body);
  EXPECT_EQ(j["status"], "unavailable");
  ASSERT_EQ(j["failed"].size(), 2u);
  EXPECT_EQ(j["failed"][0]["part"], "metadata");
  EXPECT_EQ(j["failed"][0]["error"], "metadata unavailable");
  EXPECT_EQ(j["failed"][1]["part"], "storage");
  EXPECT_EQ(res.Get("Retry-After"), "1");

  Response admin = ReadyzResponse(Down(), /*detail=*/true);
  EXPECT_NE(admin.body.find("db.internal:5432"), std::string::npos) << admin.body;
  EXPECT_NE(admin.body.find("10.0.0.5:7480"), std::string::npos) << admin.body;
}

TEST(ReadyzTest, OnlyAnAdminTokenMaySeeTheDetail) {
  testing::Harness h;
  RequestHead head;
  head.method = "GET";
  head.target = "/readyz";
  EXPECT_FALSE(ReadinessDetailAllowed(h.registry(), head));  // anonymous
  head.headers = {{"Authorization", "Bearer not-a-token"}};
  EXPECT_FALSE(ReadinessDetailAllowed(h.registry(), head));
  Response created =
      h.Call("POST", "/v2/_blz/tokens", R"({"name":"ci","scope":"org/*:pull"})");
  ASSERT_EQ(created.status, 201) << created.body;
  head.headers = {{"Authorization", "Bearer " + json::parse(created.body)["token"].get<std::string>()}};
  EXPECT_FALSE(ReadinessDetailAllowed(h.registry(), head));  // a pull token
  head.headers = {{"Authorization", "Bearer " + h.token()}};
  EXPECT_TRUE(ReadinessDetailAllowed(h.registry(), head));
}

TEST(ReadyzTest, TheProbeLogsEachDistinctFailureOnceWithItsDetail) {
  std::vector<std::string> lines;
  Status metadata = Unavailable(kDbError);
  ReadinessProbe probe([&] { return metadata; }, [] { return Status::Ok(); },
                       std::chrono::milliseconds(0),
                       [&](const std::string& line) { lines.push_back(line); });
  EXPECT_FALSE(probe.Check().ready);
  EXPECT_FALSE(probe.Check().ready);  // the same failure: not logged again
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("db.internal:5432"), std::string::npos) << lines[0];
  metadata = Status::Ok();
  EXPECT_TRUE(probe.Check().ready);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "readiness: ready again");
}

// End to end on a real failure: the registry's PostgreSQL database disappears. The anonymous
// /readyz answer names the part only; the log names the server.
TEST(ReadyzTest, ARegistryWhoseDatabaseIsGoneAnswersAnonymousCallersGenerically) {
  const std::string skip = testing::PostgresSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  std::mutex mu;
  std::vector<std::string> lines;
  RegistryOptions o;
  o.metadata_url = testing::FreshTestDatabase();
  ASSERT_FALSE(o.metadata_url.empty());
  o.storage.log = [&](const std::string& line) {
    std::lock_guard lock(mu);
    lines.push_back(line);
  };
  testing::Harness h(o);
  const std::string name = o.metadata_url.substr(o.metadata_url.rfind('/') + 1);
  {
    blz::testing::PostgresServer* server = testing::TestPostgresServer();
    ASSERT_NE(server, nullptr);
    auto admin = store::sql::OpenDatabase(server->url());
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    Status dropped = admin->Exec("DROP DATABASE " + name + " WITH (FORCE)");
    ASSERT_TRUE(dropped.ok()) << dropped.ToString();
  }
  const std::string port = std::to_string(testing::TestPostgresServer()->port());
  RequestHead head;
  head.method = "GET";
  head.target = "/readyz";
  // The probe's result is cached up to a second: ask until it has seen the loss.
  Response res;
  for (int i = 0; i < 100; ++i) {
    res = HandleHealth(h.registry(), head, HealthTarget::kReadyz);
    if (res.status == 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(res.status, 503) << res.body;
  EXPECT_EQ(res.body.find(port), std::string::npos) << res.body;
  EXPECT_EQ(res.body.find("127.0.0.1"), std::string::npos) << res.body;
  EXPECT_EQ(json::parse(res.body)["failed"][0]["error"], "metadata unavailable") << res.body;
  std::lock_guard lock(mu);
  bool logged = false;
  for (const std::string& line : lines) {
    logged = logged || (line.find("readiness: not ready") == 0 &&
                        line.find("127.0.0.1:" + port) != std::string::npos);
  }
  EXPECT_TRUE(logged) << "no log line names the database server";
}

}  // namespace
}  // namespace blz::registry
