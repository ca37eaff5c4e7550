#include "patcher/lossy/error_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/patcher/lossy/lossy_test_util.h"

namespace blz::lossy {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

ErrorMetrics Measure(const std::vector<float>& b, const std::vector<float>& t,
                     const std::vector<float>& r) {
  ErrorAccumulator acc;
  acc.Add(b, t, r);
  return acc.Finish();
}

TEST(ErrorMetricsTest, HandComputedValues) {
  // t = (3, 4, 0), r = (3, 0, 0): error (0, -4, 0), ||e|| = 4, ||t|| = 5, <r, t> = 9,
  // ||r|| = 3; base 1 everywhere: d = (2, 3, -1), ||d||^2 = 14.
  const ErrorMetrics m = Measure({1, 1, 1}, {3, 4, 0}, {3, 0, 0});
  EXPECT_EQ(m.elements, 3u);
  EXPECT_EQ(m.nonfinite, 0u);
  EXPECT_DOUBLE_EQ(m.rel_l2, 0.8);
  EXPECT_DOUBLE_EQ(m.delta_rel_l2, 4.0 / std::sqrt(14.0));
  EXPECT_DOUBLE_EQ(m.cosine, 0.6);
  EXPECT_DOUBLE_EQ(m.max_abs, 4.0);
}

TEST(ErrorMetricsTest, ExactReconstructionAndOpposite) {
  const ErrorMetrics same = Measure({0, 0}, {1.5f, -2}, {1.5f, -2});
  EXPECT_EQ(same.rel_l2, 0.0);
  EXPECT_EQ(same.delta_rel_l2, 0.0);
  EXPECT_DOUBLE_EQ(same.cosine, 1.0);
  EXPECT_EQ(same.max_abs, 0.0);
  const ErrorMetrics opposite = Measure({0, 0}, {1, 2}, {-1, -2});
  EXPECT_DOUBLE_EQ(opposite.cosine, -1.0);
  EXPECT_DOUBLE_EQ(opposite.rel_l2, 2.0);
}

TEST(ErrorMetricsTest, ZeroNormConventions) {
  const ErrorMetrics all_zero = Measure({0, 0}, {0, 0}, {0, 0});
  EXPECT_EQ(all_zero.rel_l2, 0.0);
  EXPECT_EQ(all_zero.delta_rel_l2, 0.0);
  EXPECT_EQ(all_zero.cosine, 1.0);
  const ErrorMetrics only_r = Measure({0, 0}, {0, 0}, {1, 0});
  EXPECT_EQ(only_r.rel_l2, std::numeric_limits<double>::infinity());
  EXPECT_EQ(only_r.delta_rel_l2, std::numeric_limits<double>::infinity());
  EXPECT_EQ(only_r.cosine, 0.0);
  const ErrorMetrics only_t = Measure({0, 0}, {0, 2}, {0, 0});
  EXPECT_DOUBLE_EQ(only_t.rel_l2, 1.0);
  EXPECT_EQ(only_t.cosine, 0.0);
  // Target equal to the base (no true delta) but the reconstruction moved: +inf.
  const ErrorMetrics no_delta = Measure({1, 2}, {1, 2}, {1, 3});
  EXPECT_EQ(no_delta.delta_rel_l2, std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(no_delta.max_abs, 1.0);
}

TEST(ErrorMetricsTest, NonFiniteElementsAreCountedNotSummed) {
  // Finite triples: (0, 3, 3) and (0, 4, 0) as in HandComputedValues with base 0.
  const std::vector<float> b = {0, kNaN, 0, 0, 0};
  const std::vector<float> t = {3, 1, kNaN, 4, 1};
  const std::vector<float> r = {3, 1, 1, 0, -kInf};
  const ErrorMetrics m = Measure(b, t, r);
  EXPECT_EQ(m.elements, 5u);
  EXPECT_EQ(m.nonfinite, 3u);
  EXPECT_DOUBLE_EQ(m.rel_l2, 0.8);
  EXPECT_DOUBLE_EQ(m.delta_rel_l2, 0.8);
  EXPECT_DOUBLE_EQ(m.cosine, 0.6);
  EXPECT_DOUBLE_EQ(m.max_abs, 4.0);
  EXPECT_FALSE(std::isnan(m.rel_l2));
}

TEST(ErrorMetricsTest, DifferencesAreTakenInDouble) {
  // 2^24 - 0.001: rounded to float32 this would be 2^24; in double it is exact.
  const float big = 16777216.0f;
  const ErrorMetrics m = Measure({0}, {big}, {1e-3f});
  EXPECT_DOUBLE_EQ(m.max_abs, double(big) - double(1e-3f));
}

TEST(ErrorMetricsTest, MergeAndChunksEqualOnePass) {
  // Small integers: every sum is exact, so the results are identical.
  const std::vector<float> b = {0, 1, -2, 3, 5, -1, 0, 2};
  const std::vector<float> t = {1, 1, -1, 4, 7, -3, 2, 2};
  const std::vector<float> r = {1, 2, -1, 3, 7, -2, 2, 1};
  ErrorAccumulator one;
  one.Add(b, t, r);
  ErrorAccumulator first, second, chunked;
  const auto part = [](const std::vector<float>& v, size_t from, size_t n) {
    return std::span<const float>(v).subspan(from, n);
  };
  first.Add(part(b, 0, 3), part(t, 0, 3), part(r, 0, 3));
  second.Add(part(b, 3, 5), part(t, 3, 5), part(r, 3, 5));
  chunked.Add(part(b, 0, 3), part(t, 0, 3), part(r, 0, 3));
  chunked.Add(part(b, 3, 5), part(t, 3, 5), part(r, 3, 5));
  ErrorAccumulator merged = first;
  merged.Merge(second);
  for (const ErrorAccumulator* acc : {&merged, &chunked}) {
    const ErrorMetrics a = acc->Finish(), e = one.Finish();
    EXPECT_EQ(a.elements, e.elements);
    EXPECT_EQ(a.rel_l2, e.rel_l2);
    EXPECT_EQ(a.delta_rel_l2, e.delta_rel_l2);
    EXPECT_EQ(a.cosine, e.cosine);
    EXPECT_EQ(a.max_abs, e.max_abs);
  }
  // Random values: equal up to double rounding of the sums.
  const auto rb = testing::GaussianValues(10001, 1.0, 1);
  const auto rt = testing::GaussianValues(10001, 1.0, 2);
  const auto rr = testing::GaussianValues(10001, 1.0, 3);
  ErrorAccumulator whole, x, y;
  whole.Add(rb, rt, rr);
  x.Add(part(rb, 0, 4000), part(rt, 0, 4000), part(rr, 0, 4000));
  y.Add(part(rb, 4000, 6001), part(rt, 4000, 6001), part(rr, 4000, 6001));
  x.Merge(y);
  const ErrorMetrics a = x.Finish(), e = whole.Finish();
  EXPECT_EQ(a.elements, 10001u);
  EXPECT_NEAR(a.rel_l2, e.rel_l2, 1e-12);
  EXPECT_NEAR(a.delta_rel_l2, e.delta_rel_l2, 1e-12);
  EXPECT_NEAR(a.cosine, e.cosine, 1e-12);
  EXPECT_EQ(a.max_abs, e.max_abs);
}

}  // namespace
}  // namespace blz::lossy
