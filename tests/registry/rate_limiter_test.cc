// registry/rate_limiter.h: the token bucket and the client key.
#include "registry/rate_limiter.h"

#include <gtest/gtest.h>

#include <chrono>

namespace blz::registry {
namespace {

TEST(RateLimiterTest, TokenBucket) {
  RateLimiter limiter(/*per_minute=*/6, /*burst=*/2);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(limiter.Take("a", t0), 0u);
  EXPECT_EQ(limiter.Take("a", t0), 0u);
  EXPECT_EQ(limiter.Take("a", t0), 10u);  // one token per 10 s
  EXPECT_EQ(limiter.Take("b", t0), 0u);   // its own bucket
  EXPECT_EQ(limiter.Take("a", t0 + std::chrono::seconds(4)), 6u);
  EXPECT_EQ(limiter.Take("a", t0 + std::chrono::seconds(10)), 0u);
  EXPECT_EQ(limiter.Take("a", t0 + std::chrono::seconds(10)), 10u);
  // Refills never exceed the burst.
  EXPECT_EQ(limiter.Take("a", t0 + std::chrono::hours(1)), 0u);
  EXPECT_EQ(limiter.Take("a", t0 + std::chrono::hours(1)), 0u);
  EXPECT_GT(limiter.Take("a", t0 + std::chrono::hours(1)), 0u);
  RateLimiter off(0, 10);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(off.Take("a", t0), 0u);
}

TEST(RateLimiterTest, ClientKeyIsTheTokenElseTheAddress) {
  RequestHead head;
  head.client_address = "192.0.2.7:51234";
  Principal anonymous;
  EXPECT_EQ(ClientKey(anonymous, head), "addr:192.0.2.7");
  head.client_address = "[2001:db8::1]:443";
  EXPECT_EQ(ClientKey(anonymous, head), "addr:2001:db8::1");
  head.client_address = "2001:db8::2";  // forwarded by a trusted proxy: no port
  EXPECT_EQ(ClientKey(anonymous, head), "addr:2001:db8::2");
  Principal token;
  token.token_id = 7;
  token.token_name = "ci";
  EXPECT_EQ(ClientKey(token, head), "token:ci");
}

}  // namespace
}  // namespace blz::registry
