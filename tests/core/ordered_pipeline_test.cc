// Tests for the ordered work pipeline of the patch container (core/ordered_pipeline.h).
#include "core/ordered_pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
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

}  // namespace
}  // namespace blz
