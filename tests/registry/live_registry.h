// A test fixture: a Registry in a temporary directory served by a real Server (registry/server.h)
// on 127.0.0.1 with an ephemeral port, with its admin token. Stopped after each test.
#ifndef BLZ_TESTS_REGISTRY_LIVE_REGISTRY_H_
#define BLZ_TESTS_REGISTRY_LIVE_REGISTRY_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "registry/registry.h"
#include "registry/server.h"
#include "tests/registry/test_backends.h"
#include "tests/test_util.h"

namespace blz::registry::testing {

class LiveRegistryTest : public ::testing::Test {
 protected:
  // Opens the registry with `options` and serves it on 2 I/O threads with `session` (its
  // access log dropped unless `session.log` is set). Call with ASSERT_NO_FATAL_FAILURE. The
  // backends are those of tests/registry/test_backends.h unless `options` names its own.
  void Start(RegistryOptions options = {}, SessionOptions session = {}) {
    ApplyTestBackends(&options);
    auto r = Registry::Open(tmp_ / "data", std::move(options));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    registry_ = std::move(*r);
    auto token = registry_->EnsureAdminToken();
    ASSERT_TRUE(token.ok() && token->has_value());
    token_ = **token;
    if (!session.log) session.log = [](const std::string&) {};
    auto s = Server::Start(registry_.get(), "127.0.0.1:0", 2, std::move(session));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    ASSERT_NE(server_->port(), 0);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  blz::testing::TempDir tmp_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<Server> server_;
  std::string token_;
};

}  // namespace blz::registry::testing

#endif  // BLZ_TESTS_REGISTRY_LIVE_REGISTRY_H_
