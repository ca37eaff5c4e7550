#include "patcher/lossy/lowrank.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <Eigen/Dense>

#include "tests/patcher/lossy/lossy_test_util.h"

namespace blz::lossy {
namespace {

using testing::AsPayload;
using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A matrix with orthonormal columns (m x p), from the QR of a fixed-seed Gaussian matrix.
Eigen::MatrixXd Orthonormal(Eigen::Index m, Eigen::Index p, uint64_t seed) {
  const auto g = testing::GaussianValues(uint64_t(m * p), 1.0, seed);
  Eigen::MatrixXd a(m, p);
  for (Eigen::Index i = 0; i < m * p; ++i) a.data()[i] = g[size_t(i)];
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  return qr.householderQ() * Eigen::MatrixXd::Identity(m, p);
}

// U diag(sigma) V^T as float32, row-major.
std::vector<float> WithSingularValues(Eigen::Index m, Eigen::Index n,
                                      const std::vector<double>& sigma, uint64_t seed) {
  const Eigen::Index p = Eigen::Index(sigma.size());
  const Eigen::VectorXd s = Eigen::Map<const Eigen::VectorXd>(sigma.data(), p);
  const RowMatD a = Orthonormal(m, p, seed) * s.asDiagonal() *
                    Orthonormal(n, p, seed + 1).transpose();
  std::vector<float> out(size_t(m * n));
  for (Eigen::Index i = 0; i < m * n; ++i) out[size_t(i)] = float(a.data()[i]);
  return out;
}

// Exactly rank r (up to float32 rounding): singular values 1, 1/2, ..., 1/r.
std::vector<float> RankR(Eigen::Index m, Eigen::Index n, Eigen::Index r, uint64_t seed) {
  std::vector<double> sigma(static_cast<size_t>(r));
  for (Eigen::Index i = 0; i < r; ++i) sigma[size_t(i)] = 1.0 / double(i + 1);
  return WithSingularValues(m, n, sigma, seed);
}

double Norm2(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * double(v);
  return s;
}

double Dist2(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += (double(x[i]) - double(y[i])) * (double(x[i]) - double(y[i]));
  return s;
}

struct Decoded {
  std::string of;
  uint64_t rank = 0;
  std::vector<float> recon;
};

// Encodes d against base, decodes onto a copy of base.
Decoded RoundTrip(const std::vector<float>& d, const std::vector<float>& base, uint64_t m,
                  uint64_t n, double energy) {
  auto out = EncodeLowRank("w", d, base, {m, n}, energy);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return {};
  auto p = AsPayload(std::move(*out));
  Decoded r{p->meta["of"].get<std::string>(), p->meta["rank"].get<uint64_t>(), base};
  const Status st = DecodeAddLowRank(p->payload, r.recon);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

std::vector<float> Add(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

TEST(LowRankTest, MetaAndFieldsLayout) {
  const auto d = RankR(6, 5, 2, 7);
  auto out = EncodeLowRank("w", d, std::vector<float>(30, 0.0f), {6, 5}, 0.99);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->meta.dump(),
            R"({"strategy":"lowrank","shape":[6,5],"dtype":"float32","of":"delta","rank":2,)"
            R"("energy":0.99})");
  ASSERT_EQ(out->fields.size(), 2u);
  EXPECT_EQ(out->fields[0].first, "a");
  EXPECT_EQ(out->fields[0].second.dtype, "float32");
  EXPECT_EQ(out->fields[0].second.shape, (std::vector<uint64_t>{6, 2}));
  EXPECT_EQ(out->fields[0].second.bytes.size(), 6u * 2 * 4);
  EXPECT_EQ(out->fields[1].first, "b");
  EXPECT_EQ(out->fields[1].second.shape, (std::vector<uint64_t>{2, 5}));
  EXPECT_EQ(out->fields[1].second.bytes.size(), 2u * 5 * 4);
}

TEST(LowRankTest, ExactLowRankDeltaIsRecoveredAtItsRank) {
  // 40 x 30 takes the full BDCSVD; 300 x 270 the randomized range finder (min(m, n) > 256).
  struct Case {
    uint64_t m, n, r;
  };
  for (const Case& c : {Case{40, 30, 3}, Case{30, 40, 5}, Case{300, 270, 4}, Case{270, 300, 7}}) {
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n));
    const auto d = RankR(Eigen::Index(c.m), Eigen::Index(c.n), Eigen::Index(c.r), c.m + c.r);
    const auto base = testing::GaussianValues(c.m * c.n, 0.02, 99);
    const auto target = Add(base, d);
    for (double energy : {0.9999, 1.0}) {
      const Decoded r = RoundTrip(d, base, c.m, c.n, energy);
      EXPECT_EQ(r.of, "delta");
      EXPECT_EQ(r.rank, c.r) << energy;
      EXPECT_LT(Dist2(r.recon, target), 1e-10 * Norm2(d)) << energy;
    }
  }
}

TEST(LowRankTest, MaxRankRefusesWhatWouldCostMoreAndKeepsWhatFits) {
  // Rank 7 (randomized range: 300 x 270) and rank 5 (full SVD: 40 x 30) at energy 1: a cap at
  // the rank is met with the uncapped result, a cap one below is kTooLarge.
  struct Case {
    uint64_t m, n, r;
  };
  for (const Case& c : {Case{300, 270, 7}, Case{40, 30, 5}}) {
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n));
    const auto d = RankR(Eigen::Index(c.m), Eigen::Index(c.n), Eigen::Index(c.r), 5);
    const auto base = testing::GaussianValues(c.m * c.n, 0.02, 3);
    auto free = EncodeLowRank("w", d, base, {c.m, c.n}, 1.0);
    auto capped = EncodeLowRank("w", d, base, {c.m, c.n}, 1.0, c.r);
    ASSERT_TRUE(free.ok() && capped.ok()) << capped.status().ToString();
    EXPECT_EQ(capped->meta.dump(), free->meta.dump());
    EXPECT_EQ(capped->fields[0].second.bytes, free->fields[0].second.bytes);
    auto refused = EncodeLowRank("w", d, base, {c.m, c.n}, 1.0, c.r - 1);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), Code::kTooLarge);
    EXPECT_NE(refused.status().message().find("tensor 'w'"), std::string::npos);
    EXPECT_NE(refused.status().message().find("rank above " + std::to_string(c.r - 1)),
              std::string::npos)
        << refused.status().ToString();
  }
  // A full-rank (Gaussian) delta under a small cap is refused by the randomized rounds alone.
  const auto noise = testing::GaussianValues(512 * 384, 1.0, 17);
  auto full = EncodeLowRank("w", noise, std::vector<float>(noise.size(), 0.0f), {512, 384}, 0.95,
                            20);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Code::kTooLarge);
}

TEST(LowRankTest, EnergyPicksTheSmallestSufficientRank) {
  // sigma^2 = 64, 16, 4, 1, 0.25, 0.0625 (sum 85.3125): cumulative shares 0.75018, 0.93773,
  // 0.98462, 0.99634, 0.99927, 1.
  const std::vector<double> sigma = {8, 4, 2, 1, 0.5, 0.25};
  const double total = 85.3125;
  struct Pick {
    double energy;
    uint64_t rank;
  };
  const Pick picks[] = {{0.1, 1},  {0.74, 1},   {0.76, 2},  {0.9, 2},     {0.95, 3},
                        {0.98, 3}, {0.99, 4},   {0.996, 4}, {0.997, 5},   {0.9995, 6},
                        {1.0, 6}};
  struct Size {
    uint64_t m, n;
  };
  for (const Size& s : {Size{48, 40}, Size{300, 280}}) {
    SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n));
    const auto d = WithSingularValues(Eigen::Index(s.m), Eigen::Index(s.n), sigma, s.m);
    EXPECT_NEAR(Norm2(d), total, 1e-4);
    const std::vector<float> base(s.m * s.n, 0.0f);
    for (const Pick& pick : picks) {
      const Decoded r = RoundTrip(d, base, s.m, s.n, pick.energy);
      EXPECT_EQ(r.rank, pick.rank) << pick.energy;
      // The promise: ||recon - target||^2 <= (1 - energy) ||d||^2, here with the residual
      // the kept singular values leave.
      double rest = 0;
      for (size_t i = size_t(r.rank); i < sigma.size(); ++i) rest += sigma[i] * sigma[i];
      EXPECT_NEAR(Dist2(r.recon, d), rest, 1e-4 * total) << pick.energy;
      EXPECT_LE(Dist2(r.recon, d), (1 - pick.energy) * total + 1e-4 * total) << pick.energy;
    }
  }
}

TEST(LowRankTest, RandomizedSearchKeepsTheBudgetAndNearlyTheOptimalRank) {
  // A Gaussian matrix has a flat spectrum, the hard case for a randomized range finder. At
  // 600 x 520 the search starts at a 32-dimensional subspace, doubles to 64 (energy 0.2
  // needs about 40) and must still meet the budget exactly; the rank it keeps may exceed the
  // optimal one (from a double precision eigendecomposition of d^T d here) only by a little.
  const uint64_t m = 600, n = 520;
  const auto d = testing::GaussianValues(m * n, 1e-3, 31);
  const std::vector<float> base(m * n, 0.0f);
  Eigen::MatrixXd dm(m, n);
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t j = 0; j < n; ++j) dm(Eigen::Index(i), Eigen::Index(j)) = d[i * n + j];
  }
  // Squared singular values, descending.
  const Eigen::VectorXd sigma2 =
      Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(dm.transpose() * dm, Eigen::EigenvaluesOnly)
          .eigenvalues()
          .reverse();
  const double total = sigma2.sum();
  for (double energy : {0.02, 0.2}) {
    uint64_t optimal = 0;
    double kept = 0;
    while (kept < energy * total) {
      kept += sigma2[Eigen::Index(optimal)];
      ++optimal;
    }
    const Decoded r = RoundTrip(d, base, m, n, energy);
    EXPECT_GE(r.rank, optimal) << energy;
    EXPECT_LE(r.rank, optimal + optimal / 10 + 1) << energy;
    EXPECT_LE(Dist2(r.recon, d), (1 - energy) * Norm2(d) * (1 + 1e-5)) << energy;
  }
}

TEST(LowRankTest, TargetIsStoredWhenItIsLowerRankThanTheDelta) {
  // The target is rank 2 (singular values 2, 1); the base is full-rank noise (||base||^2 ~
  // 1800 x 0.05^2 = 4.5), so d = W - base is full rank and its top two singular values hold
  // only about 60% of ||d||^2 ~ 9.5. The budget, 5% of that (~0.48), is below 1^2: the
  // target needs rank 2, the delta far more.
  const uint64_t m = 50, n = 36;
  auto w = RankR(Eigen::Index(m), Eigen::Index(n), 2, 5);
  for (float& v : w) v *= 2.0f;
  const auto base = testing::GaussianValues(m * n, 0.05, 6);
  std::vector<float> d(m * n);
  for (size_t i = 0; i < d.size(); ++i) d[i] = w[i] - base[i];
  const auto target = Add(base, d);  // what the encoder factors: float32(base + d)
  const Decoded r = RoundTrip(d, base, m, n, 0.95);
  EXPECT_EQ(r.of, "target");
  EXPECT_EQ(r.rank, 2u);
  // Decode REPLACES the base: the result is the rank-2 target, far inside the budget.
  EXPECT_LT(Dist2(r.recon, target), 1e-8 * Norm2(d));

  // The usual case: a low-rank delta on a full-rank base is stored as a delta.
  const auto d2 = RankR(Eigen::Index(m), Eigen::Index(n), 3, 8);
  EXPECT_EQ(RoundTrip(d2, base, m, n, 0.95).of, "delta");
}

TEST(LowRankTest, TargetMustMeetTheDeltasBudget) {
  // W = base + d where base is rank 1 and large and d is rank 4 and small: W has a dominant
  // rank-1 part that keeps 95% of ||W||^2, but the error budget is 5% of ||d||^2, which a
  // rank-1 target misses by far; the delta candidate (rank <= 4) is stored.
  const uint64_t m = 40, n = 32;
  const auto base = RankR(Eigen::Index(m), Eigen::Index(n), 1, 11);
  auto d = RankR(Eigen::Index(m), Eigen::Index(n), 4, 12);
  for (float& v : d) v *= 0.01f;
  const Decoded r = RoundTrip(d, base, m, n, 0.95);
  EXPECT_EQ(r.of, "delta");
  EXPECT_LE(Dist2(r.recon, Add(base, d)), 0.05 * Norm2(d));
}

TEST(LowRankTest, AllZeroDeltaHasRankZeroAndLeavesTheBaseBitForBit) {
  const uint64_t m = 8, n = 6;
  std::vector<float> base = testing::GaussianValues(m * n, 1.0, 3);
  base[5] = -0.0f;
  auto out = EncodeLowRank("w", std::vector<float>(m * n, 0.0f), base, {m, n}, 0.95);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->meta["rank"], 0);
  EXPECT_EQ(out->meta["of"], "delta");
  EXPECT_EQ(out->fields[0].second.shape, (std::vector<uint64_t>{m, 0}));
  EXPECT_TRUE(out->fields[0].second.bytes.empty());
  EXPECT_EQ(out->fields[1].second.shape, (std::vector<uint64_t>{0, n}));
  EXPECT_TRUE(out->fields[1].second.bytes.empty());
  auto p = AsPayload(std::move(*out));
  std::vector<float> acc = base;
  ASSERT_TRUE(DecodeAddLowRank(p->payload, acc).ok());
  EXPECT_EQ(std::memcmp(acc.data(), base.data(), acc.size() * 4), 0);  // -0.0 kept too
}

// The decode order as docs/wdelta.md states it, written out naively.
std::vector<float> ReferenceDecode(const std::vector<float>& a, const std::vector<float>& b,
                                   uint64_t m, uint64_t n, uint64_t k, bool replace,
                                   std::vector<float> acc) {
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (uint64_t l = 0; l < k; ++l) {
        const float prod = a[i * k + l] * b[l * n + j];
        s = s + prod;
      }
      acc[i * n + j] = replace ? s : acc[i * n + j] + s;
    }
  }
  return acc;
}

std::vector<float> Floats(const formats::WdeltaArray& array) {
  std::vector<float> v(array.bytes.size() / 4);
  std::memcpy(v.data(), array.bytes.data(), array.bytes.size());
  return v;
}

TEST(LowRankTest, DecodeIsTheDocumentedSumOrderAndRepeatable) {
  const uint64_t m = 37, n = 29;
  const auto d = testing::LaplaceValues(m * n, 1e-3, 21);  // full rank: large k
  const auto base = testing::GaussianValues(m * n, 0.02, 22);
  auto out = EncodeLowRank("w", d, base, {m, n}, 0.9);
  ASSERT_TRUE(out.ok());
  const uint64_t k = out->meta["rank"].get<uint64_t>();
  EXPECT_GT(k, 10u);
  const auto a = Floats(out->fields[0].second);
  const auto b = Floats(out->fields[1].second);
  const bool replace = out->meta["of"] == "target";
  auto p = AsPayload(std::move(*out));
  std::vector<float> first = base, second = base;
  ASSERT_TRUE(DecodeAddLowRank(p->payload, first).ok());
  ASSERT_TRUE(DecodeAddLowRank(p->payload, second).ok());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0);
  const auto expected = ReferenceDecode(a, b, m, n, k, replace, base);
  EXPECT_EQ(std::memcmp(first.data(), expected.data(), first.size() * 4), 0);
  // And the encode itself is repeatable (fixed seed, same input).
  auto again = EncodeLowRank("w", d, base, {m, n}, 0.9);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->fields[0].second.bytes, p->out.fields[0].second.bytes);
}

TEST(LowRankTest, HandBuiltPayloadDecodes) {
  // a = [[1], [2]], b = [[0.5, -1, 3]]: product [[0.5, -1, 3], [1, -2, 6]].
  formats::WdeltaTensorOut out;
  out.name = "w";
  out.meta = {{"strategy", "lowrank"}, {"shape", {2, 3}}, {"dtype", "float32"},
              {"of", "delta"},         {"rank", 1},       {"energy", 0.95}};
  auto floats = [](std::vector<float> v, std::vector<uint64_t> shape) {
    formats::WdeltaArray arr{"float32", std::move(shape), std::vector<uint8_t>(v.size() * 4)};
    std::memcpy(arr.bytes.data(), v.data(), arr.bytes.size());
    return arr;
  };
  out.fields.emplace_back("a", floats({1, 2}, {2, 1}));
  out.fields.emplace_back("b", floats({0.5f, -1, 3}, {1, 3}));
  {
    auto p = AsPayload(out);
    std::vector<float> acc = {1, 1, 1, 1, 1, 1};
    ASSERT_TRUE(DecodeAddLowRank(p->payload, acc).ok());
    EXPECT_EQ(acc, (std::vector<float>{1.5f, 0, 4, 2, -1, 7}));
  }
  out.meta["of"] = "target";
  {
    auto p = AsPayload(out);
    std::vector<float> acc = {1, 1, 1, 1, 1, 1};
    ASSERT_TRUE(DecodeAddLowRank(p->payload, acc).ok());
    EXPECT_EQ(acc, (std::vector<float>{0.5f, -1, 3, 1, -2, 6}));
  }
  // Malformed: each is kCorruption and leaves acc as it was.
  const std::vector<float> before = {1, 2, 3, 4, 5, 6};
  auto expect_corrupt = [&](formats::WdeltaTensorOut bad, const char* what) {
    auto p = AsPayload(std::move(bad));
    std::vector<float> acc = before;
    const Status st = DecodeAddLowRank(p->payload, acc);
    EXPECT_EQ(st.code(), Code::kCorruption) << what << ": " << st.ToString();
    EXPECT_EQ(acc, before) << what;
  };
  {
    auto bad = out;
    bad.meta["of"] = "base";
    expect_corrupt(bad, "of");
  }
  {
    auto bad = out;
    bad.meta["rank"] = 2;
    expect_corrupt(bad, "rank vs fields");
  }
  {
    auto bad = out;
    bad.meta["rank"] = -1;
    expect_corrupt(bad, "negative rank");
  }
  {
    auto bad = out;
    bad.fields[1].second.dtype = "float16";
    expect_corrupt(bad, "b dtype");
  }
  {
    auto bad = out;
    bad.fields[0].second.bytes.pop_back();
    expect_corrupt(bad, "a bytes");
  }
  {
    auto bad = out;
    bad.fields.pop_back();
    expect_corrupt(bad, "missing b");
  }
  {
    auto bad = out;
    bad.meta["shape"] = {6};
    expect_corrupt(bad, "rank-1 shape");
  }
  {
    auto p = AsPayload(out);
    std::vector<float> acc(5);
    EXPECT_EQ(DecodeAddLowRank(p->payload, acc).code(), Code::kInvalidArgument);
  }
}

TEST(LowRankTest, EncodeRejectsBadInput) {
  const std::vector<float> d(12, 1.0f), base(12, 0.0f);
  EXPECT_EQ(EncodeLowRank("v", d, base, {12}, 0.95).status().code(), Code::kInvalidArgument);
  for (double e : {0.0, -0.1, 1.0000001, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_EQ(EncodeLowRank("w", d, base, {3, 4}, e).status().code(), Code::kInvalidArgument)
        << e;
  }
  EXPECT_EQ(EncodeLowRank("w", d, base, {3, 5}, 0.95).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EncodeLowRank("w", d, std::vector<float>(11), {3, 4}, 0.95).status().code(),
            Code::kInvalidArgument);
  std::vector<float> bad = d;
  bad[7] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(EncodeLowRank("w", bad, base, {3, 4}, 0.95).status().code(),
            Code::kInvalidArgument);
  // Rank-3 tensors factor as shape[0] x rest.
  auto cube = EncodeLowRank("w", std::vector<float>(24, 1.0f), std::vector<float>(24, 0.0f),
                            {2, 3, 4}, 0.95);
  ASSERT_TRUE(cube.ok()) << cube.status().ToString();
  EXPECT_EQ(cube->meta["rank"], 1);
  EXPECT_EQ(cube->fields[1].second.shape, (std::vector<uint64_t>{1, 12}));
}

}  // namespace
}  // namespace blz::lossy
