// Manifest PUTs of two replicas racing on one PostgreSQL database (issue 25): the same
// manifest and tag pushed at once must behave as on SQLite (both succeed; one version, one
// tag), never a 403 DENIED because one transaction met the other's row in a unique index
// (SQLSTATE 23505). These tests always use PostgreSQL (a fresh database on this binary's
// server, tests/registry/test_backends.h) and skip when it is not installed.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "core/digest.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using testing::ErrorCodeOf;
using testing::Harness;
using testing::TinyArchive;

class PostgresPutRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string skip = testing::PostgresSkipReason();
    if (!skip.empty()) GTEST_SKIP() << skip;
    url_ = testing::FreshTestDatabase();
    ASSERT_FALSE(url_.empty());
  }
  RegistryOptions OnPostgres() {
    RegistryOptions o;
    o.metadata_url = url_;
    return o;
  }
  std::string url_;
};

// Two replicas push the same manifest under the same tag at the same moment, into a new
// repository each round (so the repository row is created by the race too).
TEST_F(PostgresPutRaceTest, TwoReplicasPushingTheSameManifestAndTagBothSucceed) {
  Harness a(OnPostgres());
  Harness b(a, RegistryOptions());
  const std::string archive = TinyArchive(7);
  for (int round = 0; round < 8; ++round) {
    const std::string repo = "race/m" + std::to_string(round);
    const std::string manifest = a.ManifestFor(repo, archive);  // its blobs pushed by a
    Response ra;
    Response rb;
    std::thread ta([&] { ra = a.PutManifest(repo, "v1", manifest); });
    std::thread tb([&] { rb = b.PutManifest(repo, "v1", manifest); });
    ta.join();
    tb.join();
    EXPECT_EQ(ra.status, 201) << round << ": " << ra.body;
    EXPECT_EQ(rb.status, 201) << round << ": " << rb.body;
    const std::string digest = MakeDigest(Sha256Hex(manifest));
    Response tag = b.Call("GET", "/v2/" + repo + "/manifests/v1");
    EXPECT_EQ(tag.status, 200) << tag.body;
    EXPECT_EQ(tag.Get("Docker-Content-Digest"), digest);
  }
}

// What the losing transaction of such a race sees, made certain: the database answers the
// PUT's first insert into `tags` with a unique violation once (a trigger standing for the
// other replica's row, committed after this transaction's statement started). The PUT is
// retried and succeeds, as the SQLite registry's serialized writers would; it was 403 DENIED.
TEST_F(PostgresPutRaceTest, AUniqueViolationInAPutIsRetriedNotDenied) {
  Harness a(OnPostgres());
  const std::string manifest = a.ManifestFor("m", TinyArchive(3));
  {
    auto db = a.OpenMetadataSql();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    // A sequence, not a table: nextval is not rolled back with the failing transaction.
    Status s = db->Exec(
        "CREATE SEQUENCE blz_test_collisions; "
        "CREATE FUNCTION blz_test_collide() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF nextval('blz_test_collisions') = 1 THEN RAISE unique_violation USING MESSAGE = "
        "'duplicate key value violates unique constraint \"tags_pkey\"'; END IF; "
        "RETURN NEW; END $$; "
        "CREATE TRIGGER blz_test_collide BEFORE INSERT ON tags FOR EACH ROW "
        "EXECUTE FUNCTION blz_test_collide()");
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Response put = a.PutManifest("m", "v1", manifest);
  EXPECT_EQ(put.status, 201) << put.body;
  EXPECT_NE(ErrorCodeOf(put), "DENIED");
  Response tag = a.Call("GET", "/v2/m/manifests/v1");
  EXPECT_EQ(tag.status, 200) << tag.body;
}

// A unique violation that does not go away after the retries is a retryable 503, not DENIED.
TEST_F(PostgresPutRaceTest, AUniqueViolationThatPersistsIsUnavailableNotDenied) {
  Harness a(OnPostgres());
  const std::string manifest = a.ManifestFor("m", TinyArchive(4));
  {
    auto db = a.OpenMetadataSql();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    Status s = db->Exec(
        "CREATE FUNCTION blz_test_collide() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE unique_violation USING MESSAGE = 'duplicate key value violates unique "
        "constraint \"tags_pkey\"'; END $$; "
        "CREATE TRIGGER blz_test_collide BEFORE INSERT ON tags FOR EACH ROW "
        "EXECUTE FUNCTION blz_test_collide()");
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Response put = a.PutManifest("m", "v1", manifest);
  EXPECT_EQ(put.status, 503) << put.body;
  EXPECT_EQ(ErrorCodeOf(put), "UNAVAILABLE");
}

}  // namespace
}  // namespace blz::registry
