#include "registry/handler_pools.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>

namespace blz::registry {
namespace {

// A liveness guard, not a timing: work that can run finishes in microseconds; work that is
// starved never finishes, and the test fails instead of hanging.
constexpr std::chrono::seconds kLiveness{60};

// Issue 9, defect 1: slow requests (e.g. manifest PUTs of 20k-tensor archives) occupied every
// handler thread and every other client waited. Cheap requests must run while every heavy
// thread is busy.
TEST(HandlerPoolsTest, LightWorkRunsWhileEveryHeavyThreadIsBusy) {
  HandlerPools pools(1, 2, 8);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> heavy_started{0};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(pools.Post(true, [&, released] {
      heavy_started.fetch_add(1);
      released.wait();
    }));
  }
  std::promise<void> light_done;
  ASSERT_TRUE(pools.Post(false, [&] { light_done.set_value(); }));
  const bool ran = light_done.get_future().wait_for(kLiveness) == std::future_status::ready;
  release.set_value();
  pools.Join();
  EXPECT_TRUE(ran) << "a cheap request waited for the slow ones";
  EXPECT_EQ(heavy_started.load(), 2);
}

TEST(HandlerPoolsTest, HeavyWorkIsBoundedAndAdmittedAgainWhenDone) {
  HandlerPools pools(1, 1, 3);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pools.Post(true, [&, released] {
      released.wait();
      ran.fetch_add(1);
    })) << i;
  }
  EXPECT_EQ(pools.heavy_pending(), 3u);
  // One running and two queued: the fourth is refused, and never runs.
  EXPECT_FALSE(pools.Post(true, [&] { ran.fetch_add(100); }));
  EXPECT_EQ(pools.heavy_pending(), 3u);
  // Refusing heavy work does not refuse light work.
  std::promise<void> light_done;
  EXPECT_TRUE(pools.Post(false, [&] { light_done.set_value(); }));
  EXPECT_EQ(light_done.get_future().wait_for(kLiveness), std::future_status::ready);
  release.set_value();
  // Once the admitted ones finish, heavy work is admitted again.
  std::promise<void> later;
  std::future<void> later_done = later.get_future();
  bool admitted = false;
  for (int i = 0; i < 1000000 && !admitted; ++i) {
    if (pools.heavy_pending() == 0) admitted = pools.Post(true, [&] { later.set_value(); });
    if (!admitted) std::this_thread::yield();
  }
  ASSERT_TRUE(admitted);
  EXPECT_EQ(later_done.wait_for(kLiveness), std::future_status::ready);
  pools.Join();
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(pools.heavy_pending(), 0u);
}

}  // namespace
}  // namespace blz::registry
