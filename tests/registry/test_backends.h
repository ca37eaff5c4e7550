// The backend pair the registry tests run on, chosen by the environment (one CTest variant per
// pair, tests/registry/CMakeLists.txt):
//   BLZ_TEST_STORAGE=s3          blobs in a fresh prefix of a bucket on a real Ceph S3 gateway
//                                (tests/store/s3/ceph_s3_server.h), one gateway per binary;
//   BLZ_TEST_METADATA=postgres   metadata in a fresh database on a real PostgreSQL 15
//                                (tests/store/postgres/postgres_server.h), one server per binary.
// Unset: the fs driver under the data directory and SQLite <data>/blz.db (the defaults).
// ApplyTestBackends fills the options a test left empty; a test that sets blob_storage or
// metadata_url itself keeps them. Tests that are genuinely about the SQLite file or the fs
// driver's files call SkipUnlessSqliteMetadata() / SkipUnlessFsStorage() (saying so).
//
// Link blz_registry_test_backends (tests/registry/CMakeLists.txt) into a binary using it.
#ifndef BLZ_TESTS_REGISTRY_TEST_BACKENDS_H_
#define BLZ_TESTS_REGISTRY_TEST_BACKENDS_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/digest.h"
#include "registry/registry.h"
#include "tests/store/postgres/postgres_server.h"
#include "tests/store/s3/ceph_s3_server.h"

namespace blz::registry::testing {

inline bool TestStorageIsS3() {
  const char* v = std::getenv("BLZ_TEST_STORAGE");
  return v != nullptr && std::string(v) == "s3";
}
inline bool TestMetadataIsPostgres() {
  const char* v = std::getenv("BLZ_TEST_METADATA");
  return v != nullptr && std::string(v) == "postgres";
}

inline void ApplyTestStorage(RegistryOptions* options) {
  if (!TestStorageIsS3() || !options->blob_storage.empty()) return;
  blz::testing::CephS3Server& s3 = blz::testing::CephS3Server::Get();
  if (!s3.available()) {
    ADD_FAILURE() << "BLZ_TEST_STORAGE=s3 but " << s3.skip_reason();
    return;
  }
  static const bool bucket_made = [&] {
    Status st = s3.CreateBucket("blz-registry-tests");
    EXPECT_TRUE(st.ok()) << st.ToString();
    ::setenv("AWS_ACCESS_KEY_ID", s3.var("S3_ACCESS_KEY").c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", s3.var("S3_SECRET_KEY").c_str(), 1);
    return st.ok();
  }();
  (void)bucket_made;
  options->blob_storage = "s3://blz-registry-tests/" + RandomHex(6) +
                          "?path_style=1&endpoint=" + s3.endpoint();
}

// The PostgreSQL server of this binary: started on first use, stopped (and its directory
// deleted) by a gtest environment at the end of the binary; or why it did not start.
struct TestPostgres {
  std::unique_ptr<blz::testing::PostgresServer> server;
  Status error;
};
inline TestPostgres& SharedTestPostgres() {
  class StopAtEnd : public ::testing::Environment {
   public:
    explicit StopAtEnd(TestPostgres* s) : s_(s) {}
    void TearDown() override {
      if (s_->server) s_->server->Stop();
    }

   private:
    TestPostgres* s_;
  };
  static TestPostgres* shared = [] {
    auto* s = new TestPostgres();
    ::testing::AddGlobalTestEnvironment(new StopAtEnd(s));
    auto server = blz::testing::PostgresServer::Start();
    if (server.ok()) {
      s->server = std::move(*server);
      std::fprintf(stderr, "PostgreSQL test server at %s (started in %.2f s)\n",
                   s->server->url().c_str(), s->server->start_seconds());
    } else {
      s->error = server.status();
    }
    return s;
  }();
  return *shared;
}

// Why a test that needs PostgreSQL skips: "" when the server runs (or is installed and failed
// to start, which TestPostgresServer reports as a failure).
inline std::string PostgresSkipReason() {
  const TestPostgres& pg = SharedTestPostgres();
  if (pg.error.code() != Code::kUnsupported) return "";
  return "PostgreSQL is not installed (" + pg.error.message() +
         "); scripts/setup.sh installs postgresql-15";
}

// The server; nullptr, with a failure reported, when it cannot start.
inline blz::testing::PostgresServer* TestPostgresServer() {
  TestPostgres& pg = SharedTestPostgres();
  if (pg.server == nullptr) {
    ADD_FAILURE() << "PostgreSQL did not start: " << pg.error.ToString();
  }
  return pg.server.get();
}

// A new, empty database on this binary's PostgreSQL server; its URL ("" after a failure).
inline std::string FreshTestDatabase() {
  blz::testing::PostgresServer* server = TestPostgresServer();
  if (server == nullptr) return "";
  static int databases = 0;
  auto url = server->CreateDatabase("reg_" + std::to_string(++databases));
  EXPECT_TRUE(url.ok()) << url.status().ToString();
  return url.ok() ? *url : std::string();
}

inline void ApplyTestMetadata(RegistryOptions* options) {
  if (!TestMetadataIsPostgres() || !options->metadata_url.empty()) return;
  options->metadata_url = FreshTestDatabase();
}

inline void ApplyTestBackends(RegistryOptions* options) {
  ApplyTestStorage(options);
  ApplyTestMetadata(options);
}

#define SkipUnlessFsStorage() \
  if (::blz::registry::testing::TestStorageIsS3()) GTEST_SKIP() << "needs the fs driver's files"
// `why`: what the test does with the SQLite file.
#define SkipUnlessSqliteMetadata(why)                        \
  if (::blz::registry::testing::TestMetadataIsPostgres()) \
  GTEST_SKIP() << "needs SQLite metadata: " << why

}  // namespace blz::registry::testing

#endif  // BLZ_TESTS_REGISTRY_TEST_BACKENDS_H_
