#include "patcher/lossy/wdelta_strategies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/float_convert.h"
#include "formats/wdelta.h"
#include "tests/test_util.h"

namespace blz::lossy {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A TensorPayload viewing an encoder's output in memory (meta gets its "_ref" entries, as the
// writer adds them).
struct InMemory {
  explicit InMemory(const formats::WdeltaTensorOut& t, uint32_t version = 1) : out(t) {
    meta = out.meta;
    for (const auto& [field, arr] : out.fields) meta[field] = {{"_ref", field}};
    p.name = out.name;
    p.meta = &meta;
    p.version = version;
    for (const auto& [field, arr] : out.fields) {
      p.fields.emplace(field, formats::WdeltaArrayView{arr.dtype, arr.shape,
                                                       ByteSpan(arr.bytes.data(), arr.bytes.size())});
    }
  }
  formats::WdeltaTensorOut out;
  nlohmann::ordered_json meta;
  TensorPayload p;
};

template <typename T>
std::vector<T> As(const formats::WdeltaArray& a) {
  std::vector<T> v(a.bytes.size() / sizeof(T));
  std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
  return v;
}

const formats::WdeltaArray& FieldOf(const formats::WdeltaTensorOut& t, const std::string& f) {
  for (const auto& [name, arr] : t.fields) {
    if (name == f) return arr;
  }
  static formats::WdeltaArray none;
  ADD_FAILURE() << "no field " << f;
  return none;
}

std::vector<std::string> MetaKeys(const nlohmann::ordered_json& m) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : m.items()) keys.push_back(k);
  return keys;
}

// --- numpy-exact building blocks ----------------------------------------------------------------

TEST(NumpyArithmetic, DoubleToF16RoundsOnce) {
  // 1 + 2^-11 + 2^-40: above the half-way point between 1 and 1 + 2^-10, so binary16 rounds
  // up; through float32 the 2^-40 is lost first and the tie goes to even (1.0).
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(detail::DoubleToF16(x), 0x3C01);
  EXPECT_EQ(formats::F32ToF16(static_cast<float>(x)), 0x3C00);
  EXPECT_EQ(detail::DoubleToF16(14.0 / 15.0), 15223);  // numpy: np.float16(14/15)
  EXPECT_EQ(detail::DoubleToF16(65504.0), 0x7BFF);
  EXPECT_EQ(detail::DoubleToF16(65519.99), 0x7BFF);
  EXPECT_EQ(detail::DoubleToF16(65520.0), 0x7C00);
  EXPECT_EQ(detail::DoubleToF16(-1e9), 0xFC00);
  EXPECT_EQ(detail::DoubleToF16(std::ldexp(1.0, -25)), 0x0000);      // tie -> even (0)
  EXPECT_EQ(detail::DoubleToF16(3 * std::ldexp(1.0, -25)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(detail::DoubleToF16(std::ldexp(1.0, -25) * 1.0000001), 0x0001);
  EXPECT_EQ(detail::DoubleToF16(std::ldexp(1.0, -14) * (1 - std::ldexp(1.0, -12))), 0x0400);
  EXPECT_EQ(detail::DoubleToF16(-0.0), 0x8000);
  EXPECT_EQ(detail::DoubleToF16(2.0), 0x4000);
  // Agrees with F32ToF16 on float32 values (exact in binary64).
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = u(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 30));
    ASSERT_EQ(detail::DoubleToF16(f), formats::F32ToF16(f)) << f;
  }
}

TEST(NumpyArithmetic, PairwiseSumUsesEightAccumulators) {
  // 2^24 then fifteen 1s: a running float32 sum stays 2^24 (each +1 ties to even); numpy's
  // eight accumulators give r0 = 2^24, r1..r7 = 2, combined ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))
  // = 2^24 + 14 (numpy: np.add.reduce gives 16777230.0).
  std::vector<float> a(16, 1.0f);
  a[0] = 16777216.0f;
  EXPECT_EQ(detail::PairwiseSumF32(a.data(), a.size()), 16777230.0f);
  // Below 8 elements: a plain loop.
  EXPECT_EQ(detail::PairwiseSumF32(a.data(), 7), 16777216.0f);
  EXPECT_EQ(detail::NumpyMeanF32(a.data() + 1, 4), 1.0f);
}

TEST(NumpyArithmetic, Int4LutOfAnExactScale) {
  // scale 2, zero point 0: q / 15 * 30 rounds back to 2q for every q (hand-checked: the
  // float32 product lands within half an ulp of 2q).
  const auto lut = detail::Int4Lut(2.0f, 0.0f);
  for (int q = 0; q < 16; ++q) EXPECT_EQ(lut[q], 2.0f * q) << q;
  const auto lut2 = detail::Int4Lut(formats::F16ToF32(15223), -1.0f);
  EXPECT_EQ(lut2[0], -1.0f);
  EXPECT_EQ(lut2[15], -1.0f + 13.99658203125f);  // 15/15 = 1 exactly; scale*15 exact
}

// --- sparse -----------------------------------------------------------------------------------

TEST(Sparse, HandComputedWithTies) {
  const std::vector<float> d = {0.5f, -2.0f, 0.0f, 1.0f, -1.0f, 3.0f};
  auto t = EncodeSparse("w", d, {2, 3}, 0.5);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_THAT(MetaKeys(t->meta), ElementsAre("strategy", "shape", "dtype", "sparsity"));
  EXPECT_EQ(t->meta["sparsity"], 0.5);
  // k = int(6 * 0.5) = 3: |3|, |-2|, then |1| and |-1| tie: the lower index (3) wins.
  EXPECT_EQ(FieldOf(*t, "indices").dtype, "int64");
  EXPECT_THAT(As<int64_t>(FieldOf(*t, "indices")), ElementsAre(1, 3, 5));
  EXPECT_THAT(As<float>(FieldOf(*t, "values")), ElementsAre(-2.0f, 1.0f, 3.0f));
  InMemory m(*t);
  std::vector<float> acc(6, 10.0f);
  ASSERT_TRUE(DecodeAddSparse(m.p, acc).ok());
  EXPECT_THAT(acc, ElementsAre(10.0f, 8.0f, 10.0f, 11.0f, 10.0f, 13.0f));
}

TEST(Sparse, AllTiesKeepTheFirstIndices) {
  const std::vector<float> d = {1.0f, -1.0f, 1.0f, -1.0f};
  auto t = EncodeSparse("w", d, {4}, 0.5);
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(As<int64_t>(FieldOf(*t, "indices")), ElementsAre(0, 1));
  // k is at least 1; sparsity outside [0, 1) is refused.
  auto one = EncodeSparse("w", d, {4}, 0.99);
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(As<int64_t>(FieldOf(*one, "indices")), ElementsAre(0));
  EXPECT_EQ(EncodeSparse("w", d, {4}, 1.0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EncodeSparse("w", d, {5}, 0.5).status().code(), Code::kInvalidArgument);
  const std::vector<float> nan = {1.0f, std::nanf("")};
  EXPECT_THAT(EncodeSparse("w", nan, {2}, 0.5).status().message(), HasSubstr("not finite"));
}

// --- quantized --------------------------------------------------------------------------------

TEST(Quantized, HandComputed) {
  const std::vector<float> d = {1, -2, 3, -4, 0, 0.5f, -0.5f, 0};
  auto t = EncodeQuantized("q", d, {2, 4});
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(MetaKeys(t->meta), ElementsAre("strategy", "shape", "dtype", "n_elements", "n_cols"));
  EXPECT_EQ(t->meta["n_elements"], 8);
  EXPECT_EQ(t->meta["n_cols"], 4);
  // mean |row|: 2.5 and 0.25 (exact in fp16: 0x4100, 0x3400).
  EXPECT_THAT(As<uint16_t>(FieldOf(*t, "scales")), ElementsAre(0x4100, 0x3400));
  // signs (1 when >= 0): 1010 1101, MSB first across rows.
  EXPECT_THAT(FieldOf(*t, "packed_signs").bytes, ElementsAre(0xAD));
  InMemory m(*t);
  std::vector<float> acc(8, 0.0f);
  ASSERT_TRUE(DecodeAddQuantized(m.p, acc).ok());
  EXPECT_THAT(acc, ElementsAre(2.5f, -2.5f, 2.5f, -2.5f, 0.25f, 0.25f, -0.25f, 0.25f));
}

TEST(Quantized, OneDimensionalIsOneRow) {
  const std::vector<float> d = {-1, 2, -0.0f};
  auto t = EncodeQuantized("q", d, {3});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->meta["n_cols"], 3);
  EXPECT_THAT(As<uint16_t>(FieldOf(*t, "scales")), ElementsAre(0x3C00));  // mean 1
  EXPECT_THAT(FieldOf(*t, "packed_signs").bytes, ElementsAre(0x60));     // 0 1 1, -0 >= 0
}

// --- int4 -------------------------------------------------------------------------------------

// d = [0, 3, 5, 9, 15, 30, 1000], one outlier (1000). Non-outliers span [0, 30].
const std::vector<float> kInt4D = {0, 3, 5, 9, 15, 30, 1000};

TEST(Int4, V2HandComputed) {
  auto t = EncodeInt4("x", kInt4D, {7}, 0.15, 2);  // int(7 * 0.15) = 1 outlier
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_THAT(MetaKeys(t->meta), ElementsAre("strategy", "shape", "dtype", "outlier_fraction",
                                             "n_elements", "n_outliers", "int4_layout"));
  EXPECT_EQ(t->meta["n_outliers"], 1);
  EXPECT_EQ(FieldOf(*t, "outlier_idx").dtype, "int32");
  EXPECT_THAT(As<int32_t>(FieldOf(*t, "outlier_idx")), ElementsAre(6));
  EXPECT_THAT(As<uint16_t>(FieldOf(*t, "outlier_vals")), ElementsAre(0x63D0));  // 1000 in fp16
  EXPECT_THAT(As<uint16_t>(FieldOf(*t, "scale")), ElementsAre(0x4000));        // 30 / 15 = 2
  EXPECT_THAT(As<uint16_t>(FieldOf(*t, "zero_point")), ElementsAre(0x0000));
  // q = rint(x / 2) clipped: 0, 1.5->2, 2.5->2, 4.5->4, 7.5->8, 15, 500->15; odd count: pad 0.
  EXPECT_THAT(FieldOf(*t, "packed").bytes, ElementsAre(0x02, 0x24, 0x8F, 0xF0));
  InMemory m(*t, 2);
  std::vector<float> acc(7, 1.0f);
  ASSERT_TRUE(DecodeAddInt4(m.p, acc).ok());
  EXPECT_THAT(acc, ElementsAre(1, 5, 5, 9, 17, 31, 1001));
}

TEST(Int4, V1HandComputed) {
  auto t = EncodeInt4("x", kInt4D, {7}, 0.15, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(MetaKeys(t->meta), ElementsAre("strategy", "shape", "dtype", "outlier_fraction",
                                             "n_elements", "n_outliers"));
  EXPECT_EQ(FieldOf(*t, "outlier_idx").dtype, "int64");
  // Only the six non-outliers, against the unrounded range: (x - 0) / 30 * 15 in float32:
  // 0, 1.5->2, 2.5->2, 4.5->4, 7.5->8, 15.
  EXPECT_THAT(FieldOf(*t, "packed").bytes, ElementsAre(0x02, 0x24, 0x8F));
  InMemory m(*t, 1);
  std::vector<float> acc(7, 1.0f);
  ASSERT_TRUE(DecodeAddInt4(m.p, acc).ok());
  EXPECT_THAT(acc, ElementsAre(1, 5, 5, 9, 17, 31, 1001));
}

TEST(Int4, AllZeroDeltaTakesTheFlatPath) {
  const std::vector<float> d(5, 0.0f);
  for (uint32_t v : {1u, 2u}) {
    auto t = EncodeInt4("z", d, {5}, 0.01, v);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->meta["n_outliers"], 1);
    EXPECT_THAT(FieldOf(*t, "outlier_idx").shape, ElementsAre(1u));  // ties: index 0
    EXPECT_THAT(As<uint16_t>(FieldOf(*t, "scale")), ElementsAre(0x3C00));  // range < 1e-8: 1.0
    for (uint8_t b : FieldOf(*t, "packed").bytes) EXPECT_EQ(b, 0);
    InMemory m(*t, v);
    std::vector<float> acc = {1, -2, 3, -4, 5};
    ASSERT_TRUE(DecodeAddInt4(m.p, acc).ok());
    EXPECT_THAT(acc, ElementsAre(1, -2, 3, -4, 5));
  }
}

TEST(Int4, EveryElementAnOutlier) {
  const std::vector<float> d = {0.25f, -0.5f};
  auto t = EncodeInt4("o", d, {1, 2}, 1.0, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->meta["n_outliers"], 2);
  EXPECT_TRUE(FieldOf(*t, "packed").bytes.empty());
  InMemory m(*t, 1);
  std::vector<float> acc = {1, 1};
  ASSERT_TRUE(DecodeAddInt4(m.p, acc).ok());
  EXPECT_THAT(acc, ElementsAre(1.25f, 0.5f));
}

// --- decode rejections ------------------------------------------------------------------------

TEST(Decode, RejectsInconsistentPayloads) {
  auto t = EncodeInt4("x", kInt4D, {7}, 0.15, 2);
  ASSERT_TRUE(t.ok());
  {
    InMemory m(*t, 2);
    std::vector<float> acc(6);
    EXPECT_EQ(DecodeAddInt4(m.p, acc).code(), Code::kInvalidArgument);
  }
  {
    InMemory m(*t, 2);
    m.meta["int4_layout"] = 3;
    std::vector<float> acc(7);
    EXPECT_EQ(DecodeAddInt4(m.p, acc).code(), Code::kUnsupported);
  }
  {
    auto bad = *t;
    bad.fields[4].second.bytes.pop_back();  // packed one byte short
    bad.fields[4].second.shape = {3};
    InMemory m(bad, 2);
    std::vector<float> acc(7);
    Status s = DecodeAddInt4(m.p, acc);
    EXPECT_EQ(s.code(), Code::kCorruption);
    EXPECT_THAT(s.message(), HasSubstr("tensor 'x': field 'packed'"));
  }
  {
    auto bad = *t;
    bad.fields[0].second.bytes = {7, 0, 0, 0};  // outlier index 7 of 7 elements
    InMemory m(bad, 2);
    std::vector<float> acc(7);
    EXPECT_THAT(DecodeAddInt4(m.p, acc).message(), HasSubstr("out of range"));
  }
  auto s = EncodeSparse("s", kInt4D, {7}, 0.5);
  ASSERT_TRUE(s.ok());
  {
    auto bad = *s;
    auto idx = As<int64_t>(bad.fields[0].second);
    std::swap(idx[0], idx[1]);
    std::memcpy(bad.fields[0].second.bytes.data(), idx.data(), idx.size() * 8);
    InMemory m(bad);
    std::vector<float> acc(7);
    EXPECT_THAT(DecodeAddSparse(m.p, acc).message(), HasSubstr("not increasing"));
  }
  auto q = EncodeQuantized("q", kInt4D, {7});
  ASSERT_TRUE(q.ok());
  {
    InMemory m(*q);
    m.meta["n_cols"] = 2;
    std::vector<float> acc(7);
    EXPECT_EQ(DecodeAddQuantized(m.p, acc).code(), Code::kCorruption);
  }
  {
    InMemory m(*q);
    m.p.fields.erase("scales");
    std::vector<float> acc(7);
    EXPECT_THAT(DecodeAddQuantized(m.p, acc).message(), HasSubstr("no field 'scales'"));
  }
}

// --- round trips through a file, every strategy, both versions, several shapes -----------------

class RoundTrip : public ::testing::TestWithParam<std::vector<uint64_t>> {};

TEST_P(RoundTrip, WriteReadDecode) {
  const std::vector<uint64_t> shape = GetParam();
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  std::mt19937 rng(static_cast<unsigned>(n));
  std::normal_distribution<float> g(0.0f, 0.01f);
  std::vector<float> base(n), d(n);
  for (auto& v : base) v = g(rng) * 50;
  for (auto& v : d) v = g(rng);
  d[n / 2] = 0.5f;  // one clear outlier

  blz::testing::TempDir dir;
  for (uint32_t version : {1u, 2u}) {
    formats::WdeltaFileOut f;
    f.version = version;
    f.parent_hash = std::string(64, '0');
    f.strategy = "auto";
    auto sp = EncodeSparse("s", d, shape, 0.9);
    auto qu = EncodeQuantized("q", d, shape);
    auto i4 = EncodeInt4("i", d, shape, 0.01, version);
    ASSERT_TRUE(sp.ok() && qu.ok() && i4.ok());
    f.tensors = {*sp, *qu, *i4};
    const std::string path = dir / ("rt" + std::to_string(version) + ".wdelta");
    ASSERT_TRUE(formats::WriteWdelta(path, f).ok());
    auto r = formats::WdeltaReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();

    for (const auto& enc : f.tensors) {
      auto p = ReadPayload(*r, enc.name);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      std::vector<float> from_file = base;
      std::vector<float> from_memory = base;
      InMemory m(enc, version);
      Status s1, s2;
      if (enc.name == "s") {
        s1 = DecodeAddSparse(*p, from_file);
        s2 = DecodeAddSparse(m.p, from_memory);
      } else if (enc.name == "q") {
        s1 = DecodeAddQuantized(*p, from_file);
        s2 = DecodeAddQuantized(m.p, from_memory);
      } else {
        s1 = DecodeAddInt4(*p, from_file);
        s2 = DecodeAddInt4(m.p, from_memory);
      }
      ASSERT_TRUE(s1.ok()) << s1.ToString();
      ASSERT_TRUE(s2.ok());
      ASSERT_EQ(0, std::memcmp(from_file.data(), from_memory.data(), n * 4)) << enc.name;
      // Error bounds per strategy.
      for (uint64_t i = 0; i < n; ++i) {
        const float delta = from_file[i] - base[i];
        if (enc.name == "s") {
          EXPECT_TRUE(delta == 0.0f || std::fabs(delta - d[i]) <= 1e-6f) << i;
        } else if (enc.name == "q") {
          EXPECT_EQ(delta >= 0.0f, d[i] >= 0.0f) << i;
        } else {
          EXPECT_LE(std::fabs(delta - d[i]), 0.01f) << i;  // range / 30 plus rounding
        }
      }
      // The outlier is kept by sparse and int4 (fp16 of 0.5 is exact).
      if (enc.name != "q") {
        EXPECT_EQ(from_file[n / 2], base[n / 2] + 0.5f) << enc.name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RoundTrip,
                         ::testing::Values(std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3},
                                           std::vector<uint64_t>{7, 5},
                                           std::vector<uint64_t>{64, 33},
                                           std::vector<uint64_t>{128, 256}));

}  // namespace
}  // namespace blz::lossy
