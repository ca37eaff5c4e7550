// Tests for the ordered work pipeline of the patch container (core/ordered_pipeline.h).
#include "core/ordered_pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace blz {
namespace {

TEST(OrderedPipelineTest, ConsumesEveryResultInOrder) {
  for (unsigned threads : {1u, 2u, 5u}) {
    std::vector<size_t> seen;
    Status s = RunOrdered<size_t>(
        1000, threads, [](size_t i) -> Result<size_t> { return i * 3; },
        [&](size_t i, size_t& v) -> Status {
          EXPECT_EQ(v, i * 3);
          seen.push_back(i);
          return Status::Ok();
        });
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(seen.size(), 1000u);
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);
  }
}

TEST(OrderedPipelineTest, NoWorkIsFine) {
  bool called = false;
  Status s = RunOrdered<int>(
      0, 4, [&](size_t) -> Result<int> { called = true; return 0; },
      [&](size_t, int&) -> Status { called = true; return Status::Ok(); });
  EXPECT_TRUE(s.ok());
  EXPECT_FALSE(called);
}

TEST(OrderedPipelineTest, ProduceErrorIsReturnedInIndexOrder) {
  for (unsigned threads : {1u, 3u}) {
    size_t consumed = 0;
    Status s = RunOrdered<int>(
        100, threads,
        [](size_t i) -> Result<int> {
          if (i == 17 || i == 40) return Corruption("bad chunk " + std::to_string(i));
          return int(i);
        },
        [&](size_t i, int&) -> Status {
          EXPECT_EQ(i, consumed);
          ++consumed;
          return Status::Ok();
        });
    EXPECT_EQ(s.code(), Code::kCorruption);
    EXPECT_EQ(s.message(), "bad chunk 17");
    EXPECT_EQ(consumed, 17u);
  }
}

TEST(OrderedPipelineTest, ConsumeErrorStopsTheRun) {
  std::atomic<size_t> produced{0};
  size_t consumed = 0;
  Status s = RunOrdered<int>(
      10000, 2,
      [&](size_t) -> Result<int> {
        ++produced;
        return 1;
      },
      [&](size_t i, int&) -> Status {
        ++consumed;
        return i == 5 ? IOError("disk full") : Status::Ok();
      });
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_EQ(consumed, 6u);
  // At most a window (kWindowPerThread results per thread) beyond the failing index.
  EXPECT_LE(produced.load(), 6u + kWindowPerThread * 2);
}

TEST(OrderedPipelineTest, AtMostTwoResultsPerThreadWait) {
  const unsigned threads = 3;
  std::atomic<int> outstanding{0};
  std::atomic<int> peak{0};
  Status s = RunOrdered<int>(
      2000, threads,
      [&](size_t) -> Result<int> {
        int now = ++outstanding;
        int p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
        return 0;
      },
      [&](size_t, int&) -> Status {
        --outstanding;
        return Status::Ok();
      });
  ASSERT_TRUE(s.ok());
  EXPECT_LE(peak.load(), int(kWindowPerThread * threads));
  EXPECT_EQ(outstanding.load(), 0);
}

TEST(OrderedPipelineTest, ExceptionsBecomeInternalErrors) {
  Status s = RunOrdered<int>(
      10, 2,
      [](size_t i) -> Result<int> {
        if (i == 3) throw std::runtime_error("boom");
        return 0;
      },
      [](size_t, int&) -> Status { return Status::Ok(); });
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
}

TEST(OrderedPipelineTest, ResolveThreads) {
  EXPECT_EQ(ResolveThreads(3), 3u);
  EXPECT_GE(ResolveThreads(0), 1u);
}

// SerialStage: every item's work runs in push order on one thread that is not the caller's,
// each item is released once, and no more than `capacity` wait.
TEST(SerialStageTest, RunsEveryItemInOrderOnItsOwnThread) {
  std::vector<int> seen;
  std::atomic<int> released{0};
  std::atomic<int> waiting{0};
  std::atomic<int> peak{0};
  std::thread::id worker;
  const std::thread::id caller = std::this_thread::get_id();
  {
    SerialStage<std::unique_ptr<int>> stage(
        3,
        [&](std::unique_ptr<int>& v) -> Status {
          worker = std::this_thread::get_id();
          seen.push_back(*v);
          --waiting;
          return Status::Ok();
        },
        [&](std::unique_ptr<int>& v) {
          EXPECT_NE(v, nullptr);
          ++released;
        });
    for (int i = 0; i < 500; ++i) {
      int now = ++waiting;
      int p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
      ASSERT_TRUE(stage.Push(std::make_unique<int>(i)).ok());
    }
    Status s = stage.Finish();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_EQ(seen.size(), 500u);
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], int(i));
  EXPECT_EQ(released.load(), 500);
  EXPECT_NE(worker, caller);
  // Pushed but not yet worked on: at most the queue plus the one in hand (and the one being
  // pushed, counted before its Push).
  EXPECT_LE(peak.load(), 3 + 2);
}

// After an error of `work`, later items are released without their work, Push returns that
// error, and Finish returns it too.
TEST(SerialStageTest, AnErrorStopsTheWorkAndIsReturned) {
  std::atomic<int> worked{0};
  std::atomic<int> released{0};
  SerialStage<int> stage(
      2,
      [&](int& v) -> Status {
        ++worked;
        return v == 5 ? IOError("disk full at item 5") : Status::Ok();
      },
      [&](int&) { ++released; });
  Status pushed;
  int pushes = 0;
  for (int i = 0; i < 1000 && pushed.ok(); ++i, ++pushes) pushed = stage.Push(i);
  EXPECT_EQ(pushed.code(), Code::kIOError) << pushed.ToString();
  Status s = stage.Finish();
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_NE(s.message().find("item 5"), std::string::npos) << s.message();
  EXPECT_EQ(worked.load(), 6);  // 0..5: nothing after the failed one
  EXPECT_EQ(released.load(), pushes);  // the refused one too
}

// Cancel: the queued items are released, not worked on; Finish is OK (no work failed); an
// exception in `work` is an internal error.
TEST(SerialStageTest, CancelReleasesAndExceptionsBecomeInternalErrors) {
  std::atomic<int> released{0};
  std::mutex gate;
  gate.lock();  // holds the first item's work until the rest are queued
  std::atomic<int> worked{0};
  {
    SerialStage<int> stage(
        8,
        [&](int&) -> Status {
          std::lock_guard<std::mutex> g(gate);
          ++worked;
          return Status::Ok();
        },
        [&](int&) { ++released; });
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(stage.Push(i).ok());
    stage.Cancel();
    gate.unlock();
    EXPECT_TRUE(stage.Finish().ok());
    EXPECT_EQ(stage.Push(9).code(), Code::kInternal);
  }
  EXPECT_LE(worked.load(), 1);  // at most the one already in hand
  EXPECT_EQ(released.load(), 6);

  SerialStage<int> throwing(
      1, [](int&) -> Status { throw std::runtime_error("boom"); }, [](int&) {});
  (void)throwing.Push(1);
  Status s = throwing.Finish();
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
}

}  // namespace
}  // namespace blz
