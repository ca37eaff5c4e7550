// A gtest fixture over one PostgresServer per test binary (tests/store/postgres/postgres_server.h):
// started by the first test that needs it, stopped and deleted at exit. Each test gets fresh
// databases from FreshDatabase(). Tests skip, saying why, when the PostgreSQL binaries are
// not installed; they fail when the binaries are there but the server does not start.
#ifndef BLZ_TESTS_STORE_POSTGRES_POSTGRES_FIXTURE_H_
#define BLZ_TESTS_STORE_POSTGRES_POSTGRES_FIXTURE_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "tests/store/postgres/postgres_server.h"

namespace blz::testing {

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Shared& s = shared();
    if (!s.started) {
      s.started = true;
      auto server = PostgresServer::Start();
      if (server.ok()) {
        s.server = std::move(*server);
        std::fprintf(stderr, "PostgreSQL test server at %s (started in %.2f s)\n",
                     s.server->url().c_str(), s.server->start_seconds());
      } else {
        s.error = server.status();
      }
    }
    if (s.error.code() == Code::kUnsupported) {
      GTEST_SKIP() << "PostgreSQL is not installed (" << s.error.message()
                   << "); scripts/setup.sh installs postgresql-15";
    }
    ASSERT_TRUE(s.server != nullptr) << s.error.ToString();
  }

  PostgresServer& server() { return *shared().server; }

  // A new, empty database on the shared server; its URL.
  std::string FreshDatabase() {
    auto url = server().CreateDatabase("db_" + std::to_string(++shared().databases));
    EXPECT_TRUE(url.ok()) << url.status().ToString();
    return url.ok() ? *url : std::string();
  }

 private:
  struct Shared {
    bool started = false;
    Status error;
    std::unique_ptr<PostgresServer> server;  // stopped (and deleted) at exit
    int databases = 0;
  };
  static Shared& shared() {
    static Shared s;
    return s;
  }
};

}  // namespace blz::testing

#endif  // BLZ_TESTS_STORE_POSTGRES_POSTGRES_FIXTURE_H_
