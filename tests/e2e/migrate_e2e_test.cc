// `blz admin migrate` end to end (issue 25): a single box (`blz serve --data DIR`: SQLite +
// file) is populated through the real binary (two versions of a model, tags, a token), stopped,
// and moved to a real PostgreSQL 15 (tests/store/postgres/postgres_server.h) + a real S3 server
// (Ceph's RADOS Gateway, tests/store/s3/ceph_s3_server.h), both started once for this binary;
// then `blz serve --metadata postgresql://... --storage s3://...` serves every version
// byte-identical to the old token. Cases skip, saying why, when PostgreSQL or Ceph is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/file_util.h"
#include "store/s3/s3_client.h"
#include "tests/e2e/subprocess.h"
#include "tests/store/postgres/postgres_fixture.h"
#include "tests/store/s3/ceph_s3_server.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
constexpr char kBucket[] = "blz-migrate";

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

class MigrateE2ETest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    CephS3Server& s3 = CephS3Server::Get();
    if (!s3.available()) GTEST_SKIP() << s3.skip_reason();
    ASSERT_TRUE(s3.CreateBucket(kBucket).ok());
    prefix_ = "mig-" + RandomHex(4);
  }
  void TearDown() override { StopServe(&server_); }

  std::string StorageUrl() const { return CephS3Server::Get().StorageUrl(kBucket, prefix_); }
  std::map<std::string, std::string> S3Env(const std::string& secret = {}) {
    return CephS3Server::Get().AwsEnv(secret);
  }
  ProcessResult Blz(std::vector<std::string> args,
                    const std::map<std::string, std::string>& env) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, env, work_.path());
  }
  std::map<std::string, std::string> Client(const std::string& name, const std::string& token) {
    std::map<std::string, std::string> env = {{"BLZ_CONFIG_DIR", work_ / ("config-" + name)},
                                              {"BLZ_CACHE_DIR", work_ / ("cache-" + name)}};
    if (!token.empty()) {
      ProcessResult r = Blz({"login", server_.addr, "--token", token}, env);
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    return env;
  }
  ProcessResult Migrate(std::vector<std::string> extra,
                        const std::map<std::string, std::string>& env) {
    std::vector<std::string> args = {"admin", "migrate", "--from-data", work_ / "data", "--to",
                                     db_ + "," + StorageUrl()};
    args.insert(args.end(), extra.begin(), extra.end());
    return Blz(args, env);
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
  nlohmann::json Tags(const std::map<std::string, std::string>& env) {
    ProcessResult r = Blz({"tags", server_.addr + "/e2e/model", "--json"}, env);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_discarded() ? nlohmann::json() : j.value("tags", nlohmann::json());
  }

  TempDir work_;
  std::string prefix_;
  std::string db_;
  ServeProcess server_;
};

TEST_F(MigrateE2ETest, SingleBoxMovesToPostgresAndS3AndEveryVersionPullsByteIdentical) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string v1 = corpus + "/tiny-gpt2/base";
  const std::string v2 = corpus + "/tiny-gpt2/ft-v1";
  db_ = FreshDatabase();
  ASSERT_FALSE(db_.empty());

  // A single box: SQLite + file under <work>/data. Two versions, three tags, a token.
  server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "single");
  ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "single.err");
  const std::string admin = server_.token;
  ASSERT_FALSE(admin.empty());
  auto pusher = Client("pusher", admin);
  for (auto [dir, tag] : {std::pair{v1, "v1"}, std::pair{v2, "v2"}, std::pair{v2, "latest"}}) {
    ProcessResult r = Blz({"push", dir, server_.addr + "/e2e/model:" + tag}, pusher);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  ProcessResult created = Blz({"token", "create", "reader", "--scope", "*:pull", "--registry",
                               server_.addr},
                              pusher);
  ASSERT_EQ(created.exit_code, 0) << created.out << created.err;
  const std::string reader = Trim(created.out);
  ASSERT_FALSE(reader.empty());
  const nlohmann::json tags_before = Tags(pusher);
  ASSERT_EQ(tags_before.size(), 3u) << tags_before.dump();

  // While it serves, the data directory is locked: migrate refuses.
  ProcessResult busy = Migrate({}, S3Env());
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_NE(busy.err.find("in use by another blz serve"), std::string::npos) << busy.err;
  StopServe(&server_);

  // A wrong S3 secret for the target fails before anything is copied: the database and the
  // bucket stay empty (the run below, without --resume, would be refused otherwise).
  ProcessResult wrong = Migrate({}, S3Env("not-the-secret"));
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("target storage"), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find(kBucket), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("403"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("not-the-secret"), std::string::npos) << wrong.err;
  EXPECT_TRUE(BucketDigests().empty());

  // The migration.
  ProcessResult m = Migrate({}, S3Env());
  ASSERT_EQ(m.exit_code, 0) << m.out << m.err;
  std::fprintf(stderr, "%s", m.out.c_str());  // the summary (rows, blobs, bytes, time)
  EXPECT_NE(m.out.find("table repositories: 1 rows (1 copied"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("table tags: 3 rows (3 copied"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("table tokens: 2 rows (2 copied"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("table settings:"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("blz serve --data DIR --metadata " + db_ + " --storage '" + StorageUrl() +
                       "'"),
            std::string::npos)
      << m.out;
  EXPECT_NE(m.out.find(" 0 already present (0.00 MB)"), std::string::npos) << m.out;
  const std::set<std::string> bucket = BucketDigests();
  EXPECT_GE(bucket.size(), 4u);  // two configs and the two archives (or their full patches)

  // The new registry: PostgreSQL + S3, a fresh local directory, private (reads need a token).
  for (const auto& [k, v] : S3Env()) ::setenv(k.c_str(), v.c_str(), 1);
  server_ = StartServe(BLZ_BINARY, work_ / "replica",
                       {"--metadata", db_, "--storage", StorageUrl(), "--private"},
                       work_ / "replica");
  for (const auto& [k, v] : S3Env()) ::unsetenv(k.c_str());
  ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "replica.err");
  EXPECT_TRUE(server_.token.empty()) << "the migrated admin token is kept; no new one is made";

  // The old read token pulls every version byte-identical; the tags are the same.
  auto puller = Client("puller", reader);
  for (auto [dir, tag] : {std::pair{v1, "v1"}, std::pair{v2, "v2"}, std::pair{v2, "latest"}}) {
    const std::string out = work_ / ("out-" + std::string(tag));
    ProcessResult r = Blz({"pull", server_.addr + "/e2e/model:" + tag, "-o", out}, puller);
    ASSERT_EQ(r.exit_code, 0) << tag << ": " << r.out << r.err;
    EXPECT_EQ(ReadTree(out), ReadTree(dir)) << tag;
  }
  EXPECT_EQ(Tags(puller), tags_before);
  // The old admin token still administers (and sees the migrated token).
  auto admin_env = Client("admin", admin);
  ProcessResult list = Blz({"token", "list", "--registry", server_.addr}, admin_env);
  ASSERT_EQ(list.exit_code, 0) << list.out << list.err;
  EXPECT_NE(list.out.find("reader"), std::string::npos) << list.out;
  // A new push works on the migrated database (its sequences moved past the copied ids).
  ProcessResult p3 = Blz({"push", v1, server_.addr + "/e2e/other:v1"}, admin_env);
  EXPECT_EQ(p3.exit_code, 0) << p3.out << p3.err;
  StopServe(&server_);

  // Again without --resume: refused, naming what the target holds.
  ProcessResult again = Migrate({}, S3Env());
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("is not empty"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("--resume"), std::string::npos) << again.err;

  // With --resume: nothing left to copy, and it verifies and succeeds.
  ProcessResult resumed = Migrate({"--resume"}, S3Env());
  // The target now holds a repository the source lacks (pushed above), so its verification
  // counts differ: a resumed run compares the copied tables and says which one differs.
  EXPECT_NE(resumed.exit_code, 0);
  EXPECT_NE(resumed.err.find("verification: table repositories has 2 rows"), std::string::npos)
      << resumed.out << resumed.err;
}

// A run that stopped half-way (here: one tag row and one blob object missing from the target)
// is continued by --resume, which copies only what is missing; a second --resume is a no-op.
TEST_F(MigrateE2ETest, ResumeContinuesAHalfFinishedMigrationAndIsThenANoOp) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string psql = "/usr/lib/postgresql/15/bin/psql";
  if (!fs::exists(psql)) GTEST_SKIP() << "no " << psql;
  db_ = FreshDatabase();
  ASSERT_FALSE(db_.empty());
  server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "single");
  ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "single.err");
  auto pusher = Client("pusher", server_.token);
  for (const char* tag : {"v1", "latest"}) {
    ProcessResult r = Blz({"push", corpus + "/tiny-gpt2/base", server_.addr + "/e2e/model:" + tag},
                          pusher);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  StopServe(&server_);

  ProcessResult first = Migrate({}, S3Env());
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const std::set<std::string> bucket = BucketDigests();
  ASSERT_FALSE(bucket.empty());

  // Undo part of it, as an interrupted run would have left it.
  ProcessResult del = RunProcess(
      {psql, db_, "-v", "ON_ERROR_STOP=1", "-c", "DELETE FROM tags WHERE tag = 'latest'"}, {},
      work_.path());
  ASSERT_EQ(del.exit_code, 0) << del.out << del.err;
  store::s3::S3Client client(CephS3Server::Get().Config(std::string("s3://") + kBucket));
  const std::string lost = *bucket.begin();
  ASSERT_TRUE(client.DeleteObject(prefix_ + "/blobs/sha256/" + lost.substr(7)).ok());

  ProcessResult resumed = Migrate({"--resume"}, S3Env());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("table tags: 2 rows (1 copied, 1 already present)"),
            std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find("table repositories: 1 rows (0 copied, 1 already present)"),
            std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find("blobs: 1 copied"), std::string::npos) << resumed.out;
  EXPECT_EQ(BucketDigests(), bucket);

  ProcessResult noop = Migrate({"--resume"}, S3Env());
  ASSERT_EQ(noop.exit_code, 0) << noop.out << noop.err;
  EXPECT_NE(noop.out.find("table tags: 2 rows (0 copied, 2 already present)"), std::string::npos)
      << noop.out;
  EXPECT_NE(noop.out.find("blobs: 0 copied (0.00 MB)"), std::string::npos) << noop.out;
}

// The generic copier the other way of the seams: SQLite + file into a second SQLite + file
// (SQLite rowids kept), served from there.
TEST_F(MigrateE2ETest, SqliteAndFileIntoAnotherSqliteAndFile) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string v1 = corpus + "/tiny-gpt2/base";
  server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "single");
  ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "single.err");
  const std::string admin = server_.token;
  auto pusher = Client("pusher", admin);
  ProcessResult r = Blz({"push", v1, server_.addr + "/e2e/model:v1"}, pusher);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  StopServe(&server_);

  const std::string to = work_ / "moved";
  ProcessResult m = Blz({"admin", "migrate", "--from",
                         "sqlite:" + (work_ / "data/blz.db") + ",file:" + (work_ / "data"),
                         "--to", "sqlite:" + to + "/blz.db,file:" + to},
                        {});
  ASSERT_EQ(m.exit_code, 0) << m.out << m.err;
  EXPECT_NE(m.out.find("0 sequences reset"), std::string::npos) << m.out;
  server_ = StartServe(BLZ_BINARY, to, {"--private"}, work_ / "moved");
  ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "moved.err");
  EXPECT_TRUE(server_.token.empty());
  auto puller = Client("puller", admin);
  const std::string out = work_ / "out";
  ProcessResult p = Blz({"pull", server_.addr + "/e2e/model:v1", "-o", out}, puller);
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  EXPECT_EQ(ReadTree(out), ReadTree(v1));
  ProcessResult p2 = Blz({"push", v1, server_.addr + "/e2e/second:v1"}, puller);
  EXPECT_EQ(p2.exit_code, 0) << p2.out << p2.err;
}

}  // namespace
}  // namespace blz::testing
