#include "formats/tensor_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/blz_archive.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::blz::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
std::string F16Bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  EXPECT_TRUE(ConvertF32ToF16(v, h).ok());
  return Bytes(h);
}
std::string BF16Bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  EXPECT_TRUE(ConvertF32ToBF16(v, h).ok());
  return Bytes(h);
}

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::string bytes;
};

void WriteModel(const std::string& path, const std::vector<TensorSpec>& specs) {
  std::vector<SafetensorsTensorView> views;
  for (const TensorSpec& s : specs) views.push_back({s.name, s.dtype, s.shape, AsBytes(s.bytes)});
  Status st = WriteSafetensors(path, views);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

const TensorStatsEntry* Find(const ModelStats& s, const std::string& name) {
  for (const auto& e : s.tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// --- ParallelFor ----------------------------------------------------------------------------

TEST(ParallelFor, RunsEveryIndexOnce) {
  for (unsigned threads : {0u, 1u, 3u, 64u}) {
    std::vector<std::atomic<int>> hits(1000);
    ParallelFor(hits.size(), threads, [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
  ParallelFor(0, 4, [](size_t) { FAIL() << "no work"; });
  EXPECT_GE(EffectiveThreads(0), 1u);
  EXPECT_EQ(EffectiveThreads(5), 5u);
}

// --- Accumulator ----------------------------------------------------------------------------

TEST(TensorStats, KnownValues) {
  StatsAccumulator acc;
  const std::vector<double> v = {1, 2, 3, 4, kNaN, kInf, -kInf, 0, -0.0};
  acc.Add(v);
  const TensorStats s = acc.Finish();
  EXPECT_EQ(s.count, 9u);
  EXPECT_EQ(s.finite, 6u);
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.pos_inf, 1u);
  EXPECT_EQ(s.neg_inf, 1u);
  EXPECT_EQ(s.zeros, 2u);
  EXPECT_DOUBLE_EQ(s.ZeroFraction(), 2.0 / 9.0);
  EXPECT_EQ(s.min, 0.0);
  EXPECT_EQ(s.max, 4.0);
  EXPECT_DOUBLE_EQ(s.mean, 10.0 / 6.0);
  // Population variance of {1, 2, 3, 4, 0, 0}: 30/6 - (10/6)^2 = 20/9.
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(20.0 / 9.0));
  EXPECT_FALSE(s.all_non_finite);
}

TEST(TensorStats, ChunkingDoesNotChangeTheResult) {
  std::mt19937 rng(3);
  std::normal_distribution<double> n(5.0, 2.0);
  std::vector<double> v(10000);
  for (double& x : v) x = n(rng);
  v[17] = kNaN;
  v[4000] = -kInf;
  StatsAccumulator whole;
  whole.Add(v);
  StatsAccumulator parts, tail;
  size_t at = 0;
  for (size_t len : {1u, 7u, 1000u, 3u, 4000u}) {
    parts.Add(std::span<const double>(v).subspan(at, len));
    at += len;
  }
  tail.Add(std::span<const double>(v).subspan(at));
  parts.Merge(tail);
  const TensorStats a = whole.Finish(), b = parts.Finish();
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.finite, b.finite);
  EXPECT_EQ(a.nan, 1u);
  EXPECT_EQ(b.neg_inf, 1u);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.max, b.max);
  EXPECT_NEAR(a.mean, b.mean, 1e-12);
  EXPECT_NEAR(a.stddev, b.stddev, 1e-12);
  EXPECT_NEAR(a.mean, 5.0, 0.1);
  EXPECT_NEAR(a.stddev, 2.0, 0.1);
}

TEST(TensorStats, NumericallyStableForALargeOffset) {
  // 1e9 +- 1 alternating: the naive E[x^2] - E[x]^2 loses everything in double; the exact
  // answer is mean 1e9, std 1. Odd-sized chunks make the chunk means differ.
  std::vector<double> v(100000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1e9 + (i % 2 == 0 ? 1.0 : -1.0);
  StatsAccumulator acc;
  for (size_t at = 0; at < v.size(); at += 777) {
    acc.Add(std::span<const double>(v).subspan(at, std::min<size_t>(777, v.size() - at)));
  }
  const TensorStats s = acc.Finish();
  EXPECT_DOUBLE_EQ(s.mean, 1e9);
  EXPECT_NEAR(s.stddev, 1.0, 1e-9);
}

TEST(TensorStats, AllNonFiniteAndEmpty) {
  StatsAccumulator acc;
  acc.Add(std::vector<double>{kNaN, kInf, kNaN});
  TensorStats s = acc.Finish();
  EXPECT_TRUE(s.all_non_finite);
  EXPECT_EQ(s.finite, 0u);
  EXPECT_EQ(s.mean, 0.0);
  EXPECT_EQ(s.stddev, 0.0);
  StatsAccumulator empty;
  s = empty.Finish();
  EXPECT_EQ(s.count, 0u);
  EXPECT_FALSE(s.all_non_finite);
  EXPECT_EQ(s.ZeroFraction(), 0.0);
}

TEST(TensorStats, ComputeTensorStatsDecodesTheType) {
  const std::string h = F16Bytes({1.0f, -3.0f, 0.0f, 65504.0f});
  auto s = ComputeTensorStats(ValueType::kF16, AsBytes(h), 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->min, -3.0);
  EXPECT_EQ(s->max, 65504.0);
  EXPECT_EQ(s->zeros, 1u);
  EXPECT_EQ(ComputeTensorStats(ValueType::kF16, AsBytes(h), 5).status().code(),
            Code::kInvalidArgument);
}

// --- Models ---------------------------------------------------------------------------------

TEST(ModelStats, HandMadeSafetensors) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  WriteModel(path, {
                       {"w", DType::kF32, {2, 3}, Bytes(std::vector<float>{1, -2, 3, 0, 5, 6})},
                       {"nan", DType::kF16, {4}, F16Bytes({NAN, NAN, INFINITY, NAN})},
                       {"some", DType::kBF16, {3}, BF16Bytes({1.0f, NAN, 2.0f})},
                       {"i", DType::kI32, {2}, Bytes(std::vector<int32_t>{-7, 9})},
                       {"empty", DType::kF32, {0, 4}, ""},
                   });
  ProgressCounters counters;
  StatsOptions options;
  options.counters = &counters;
  auto r = ComputeModelStats(path, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The elements of the supported tensors, all read.
  EXPECT_EQ(counters.total.load(), 6u + 4u + 3u + 2u);
  EXPECT_EQ(counters.done.load(), counters.total.load());
  const ModelStats& s = *r;
  EXPECT_EQ(s.format, "safetensors");
  ASSERT_EQ(s.tensors.size(), 5u);
  const TensorStatsEntry* w = Find(s, "w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->file, "m.safetensors");
  EXPECT_EQ(w->dtype, "F32");
  EXPECT_EQ(w->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(w->stats.count, 6u);
  EXPECT_EQ(w->stats.min, -2.0);
  EXPECT_EQ(w->stats.max, 6.0);
  EXPECT_DOUBLE_EQ(w->stats.mean, 13.0 / 6.0);
  EXPECT_EQ(w->stats.zeros, 1u);
  const TensorStatsEntry* n = Find(s, "nan");
  EXPECT_TRUE(n->stats.all_non_finite);
  EXPECT_EQ(n->stats.nan, 3u);
  EXPECT_EQ(n->stats.pos_inf, 1u);
  const TensorStatsEntry* some = Find(s, "some");
  EXPECT_FALSE(some->stats.all_non_finite);
  EXPECT_EQ(some->stats.nan, 1u);
  EXPECT_DOUBLE_EQ(some->stats.mean, 1.5);
  EXPECT_EQ(Find(s, "i")->stats.min, -7.0);
  EXPECT_EQ(Find(s, "empty")->stats.count, 0u);
  EXPECT_EQ(s.all_non_finite, 1u);
  EXPECT_EQ(s.some_non_finite, 1u);
  EXPECT_EQ(s.nan, 4u);
  EXPECT_EQ(s.elements, 6u + 4 + 3 + 2);

  const std::string text = ModelStatsText(s);
  EXPECT_THAT(text, HasSubstr("warning: tensor nan is all NaN/Inf (3 NaN, 1 +Inf, 0 -Inf of 4 "
                              "values)\n"));
  EXPECT_THAT(text, HasSubstr("warning: tensor some has 1 NaN/Inf values"));
  EXPECT_THAT(text, HasSubstr("warning: 1 of 5 tensors are all NaN/Inf, 1 more contain NaN/Inf "
                              "values\n"));
  EXPECT_THAT(text, Not(HasSubstr("tensor w is")));
  EXPECT_THAT(text, HasSubstr("TENSOR"));

  const auto j = ModelStatsJson(s);
  EXPECT_EQ(j.begin().key(), "path");
  EXPECT_EQ(j["summary"]["all_non_finite"], 1);
  EXPECT_EQ(j["tensors"][0]["name"], s.tensors[0].name);
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "nan") {
      EXPECT_TRUE(t["all_non_finite"].get<bool>());
      EXPECT_TRUE(t["mean"].is_null());
    }
    if (t["name"] == "w") {
      EXPECT_EQ(t["max"].get<double>(), 6.0);
    }
  }
  ASSERT_EQ(j["warnings"].size(), 3u);
  EXPECT_THAT(j["warnings"][0].get<std::string>(), HasSubstr("is all NaN/Inf"));
}

// StatsOptions::non_finite_only: the raw-bit scan counts exactly what decoding counts, for every
// bit pattern of the IEEE types (random 16-bit words cover all NaN payloads, both infinities,
// subnormals and -0), across segment boundaries, and leaves the moments 0; integer tensors are
// counted, F8 tensors decoded as usual.
TEST(ModelStats, NonFiniteOnlyCountsWhatTheFullPassCounts) {
  std::mt19937_64 rng(7);
  auto random_words = [&rng](size_t bytes) {
    std::string out(bytes, '\0');
    for (char& c : out) c = char(rng());
    return out;
  };
  const uint64_t big = kStatsSegmentElements * 2 + 5;  // three segments
  std::vector<float> f32(big, 0.25f);
  for (uint64_t i = 3; i < big; i += 9973) {
    f32[i] = i % 3 == 0 ? NAN : (i % 3 == 1 ? INFINITY : -INFINITY);
  }
  std::vector<double> f64 = {1.0, kNaN, -kInf, kInf, -0.0, 5e-324};
  uint32_t snan_bits = 0x7F800001u;  // a signalling NaN
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  WriteModel(path, {
                       {"f32", DType::kF32, {big}, Bytes(f32)},
                       {"snan", DType::kF32, {3}, Bytes(std::vector<float>{snan, -0.0f, 1e-45f})},
                       {"f16", DType::kF16, {40000}, random_words(80000)},
                       {"bf16", DType::kBF16, {40000}, random_words(80000)},
                       {"f64", DType::kF64, {6}, Bytes(f64)},
                       {"f8", DType::kF8_E5M2, {256}, random_words(256)},
                       {"i", DType::kI32, {2}, Bytes(std::vector<int32_t>{-7, 9})},
                       {"allnan", DType::kBF16, {2}, BF16Bytes({NAN, -INFINITY})},
                   });
  auto full = ComputeModelStats(path, {2});
  ProgressCounters counters;
  StatsOptions options{2};
  options.non_finite_only = true;
  options.counters = &counters;
  auto fast = ComputeModelStats(path, options);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  EXPECT_EQ(counters.done.load(), counters.total.load());
  ASSERT_EQ(fast->tensors.size(), full->tensors.size());
  for (size_t i = 0; i < full->tensors.size(); ++i) {
    const TensorStats& a = full->tensors[i].stats;
    const TensorStats& b = fast->tensors[i].stats;
    SCOPED_TRACE(full->tensors[i].name);
    EXPECT_EQ(b.count, a.count);
    EXPECT_EQ(b.finite, a.finite);
    EXPECT_EQ(b.nan, a.nan);
    EXPECT_EQ(b.pos_inf, a.pos_inf);
    EXPECT_EQ(b.neg_inf, a.neg_inf);
    EXPECT_EQ(b.all_non_finite, a.all_non_finite);
    if (full->tensors[i].dtype == "F8_E5M2") {
      EXPECT_EQ(b.min, a.min);  // decoded: every statistic
      EXPECT_EQ(b.zeros, a.zeros);
    } else {
      EXPECT_EQ(b.min, 0.0);  // not read
      EXPECT_EQ(b.max, 0.0);
      EXPECT_EQ(b.zeros, 0u);
    }
  }
  // The random words do hold NaN and both infinities, so the comparison above means something.
  const TensorStats& f16 = Find(*full, "f16")->stats;
  EXPECT_GT(f16.nan, 0u);
  EXPECT_GT(f16.pos_inf + f16.neg_inf, 0u);
  EXPECT_EQ(Find(*full, "snan")->stats.nan, 1u);
  EXPECT_EQ(Find(*full, "f32")->stats.nan + Find(*full, "f32")->stats.pos_inf +
                Find(*full, "f32")->stats.neg_inf,
            (big - 3 + 9972) / 9973);
  EXPECT_EQ(fast->nan, full->nan);
  EXPECT_EQ(fast->pos_inf, full->pos_inf);
  EXPECT_EQ(fast->neg_inf, full->neg_inf);
  EXPECT_EQ(fast->all_non_finite, full->all_non_finite);
  EXPECT_EQ(fast->some_non_finite, full->some_non_finite);
  EXPECT_EQ(fast->elements, full->elements);
}

TEST(ModelStats, CleanModelHasNoWarnings) {
  TempDir dir;
  WriteModel(dir / "m.safetensors",
             {{"w", DType::kF32, {3}, Bytes(std::vector<float>{1, 2, 3})}});
  auto r = ComputeModelStats(dir / "m.safetensors");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(ModelStatsText(*r), Not(HasSubstr("warning")));
  EXPECT_TRUE(ModelStatsJson(*r)["warnings"].empty());
}

TEST(ModelStats, SameResultForDirectoryArchiveAndAnyThreadCount) {
  // Large enough to be split into several segments (kStatsSegmentElements each).
  const size_t n = size_t(kStatsSegmentElements) * 2 + 1000;
  std::vector<float> big(n);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& x : big) x = nd(rng);
  big[12345] = NAN;
  TempDir src, work;
  WriteModel(src / "model-00001.safetensors",
             {{"model.layers.0.w", DType::kBF16, {n}, BF16Bytes(big)}});
  WriteModel(src / "model-00002.safetensors",
             {{"model.layers.1.w", DType::kF32, {4}, Bytes(std::vector<float>{1, 2, 3, 4})}});
  testing::WriteFileBytes(src / "config.json", "{}");
  ASSERT_TRUE(Pack(src.path(), work / "m.blz", nullptr).ok());

  auto one = ComputeModelStats(src.path(), {1});
  auto many = ComputeModelStats(src.path(), {3});
  auto archived = ComputeModelStats(work / "m.blz", {2});
  ASSERT_TRUE(one.ok() && many.ok() && archived.ok()) << archived.status().ToString();
  EXPECT_EQ(one->format, "hf-dir");
  EXPECT_EQ(archived->format, "blz");
  auto ja = ModelStatsJson(*one), jb = ModelStatsJson(*many), jc = ModelStatsJson(*archived);
  EXPECT_EQ(ja["tensors"].dump(), jb["tensors"].dump());
  EXPECT_EQ(ja["tensors"].dump(), jc["tensors"].dump());
  ASSERT_EQ(one->tensors.size(), 2u);
  EXPECT_EQ(one->tensors[0].file, "model-00001.safetensors");
  EXPECT_EQ(one->tensors[0].stats.count, n);
  EXPECT_EQ(one->tensors[0].stats.nan, 1u);
  EXPECT_NEAR(one->tensors[0].stats.stddev, 0.02, 0.001);

  // The segmented result equals a single-pass reference over the decoded values.
  StatsAccumulator ref;
  std::vector<double> vals(n);
  for (size_t i = 0; i < n; ++i) vals[i] = BF16ToF32(F32ToBF16(big[i]));
  ref.Add(vals);
  const TensorStats r = ref.Finish();
  EXPECT_EQ(one->tensors[0].stats.min, r.min);
  EXPECT_EQ(one->tensors[0].stats.max, r.max);
  EXPECT_NEAR(one->tensors[0].stats.mean, r.mean, 1e-12);
  EXPECT_NEAR(one->tensors[0].stats.stddev, r.stddev, 1e-12);
}

TEST(ModelStats, GgufQuantizedAndUnsupportedTypes) {
  // f32 [4], q8_0 [32] (one block, d = 1), q4_0 [32] (d = 0.5), q4_K [256] (unsupported).
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String("llama")});
  h.tensors.push_back({"f", {4}, GgmlType::kF32, 0, 0});
  h.tensors.push_back({"q8", {32}, GgmlType::kQ8_0, 0, 0});
  h.tensors.push_back({"q4", {32}, GgmlType::kQ4_0, 0, 0});
  h.tensors.push_back({"qk", {256, 1}, GgmlType::kQ4_K, 0, 0});
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  std::vector<float> f = {0.5f, -1.5f, 2.0f, 0.0f};
  std::string q8(34, '\0');
  q8[1] = 0x3C;        // d = 1
  q8[2] = char(-100);  // q0 = -100
  q8[3] = 27;          // q1 = 27
  std::string q4(18, char(0x88));  // all q = 8 -> 0
  q4[0] = 0x00;
  q4[1] = 0x38;                    // d = 0.5
  q4[2] = char(0x8F);              // element 0: 15 -> 3.5
  std::string qk(144, '\x11');
  const std::string fb = Bytes(f);
  std::vector<ByteSpan> data = {AsBytes(fb), AsBytes(q8), AsBytes(q4), AsBytes(qk)};
  TempDir dir;
  Status st = WriteGgufFile(dir / "m.gguf", h, data, {});
  ASSERT_TRUE(st.ok()) << st.ToString();

  auto r = ComputeModelStats(dir / "m.gguf");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "gguf");
  ASSERT_EQ(r->tensors.size(), 4u);
  EXPECT_EQ(r->tensors[0].dtype, "F32");
  EXPECT_EQ(r->tensors[0].stats.min, -1.5);
  EXPECT_EQ(r->tensors[1].dtype, "Q8_0");
  EXPECT_EQ(r->tensors[1].stats.min, -100.0);
  EXPECT_EQ(r->tensors[1].stats.max, 27.0);
  EXPECT_EQ(r->tensors[1].stats.zeros, 30u);
  EXPECT_EQ(r->tensors[2].stats.max, 3.5);
  EXPECT_EQ(r->tensors[2].stats.zeros, 31u);
  EXPECT_EQ(r->tensors[3].dtype, "Q4_K");
  EXPECT_EQ(r->tensors[3].shape, (std::vector<uint64_t>{1, 256}));  // C order
  EXPECT_FALSE(r->tensors[3].supported);
  EXPECT_EQ(r->unsupported, 1u);
  EXPECT_THAT(ModelStatsText(*r), HasSubstr("unsupported type Q4_K"));
  const auto j = ModelStatsJson(*r);
  EXPECT_EQ(j["tensors"][3]["error"], "unsupported type Q4_K");
  EXPECT_FALSE(j["tensors"][3].contains("mean"));
}

TEST(ModelStats, Rejections) {
  TempDir dir;
  EXPECT_EQ(ComputeModelStats(dir / "missing.safetensors").status().code(), Code::kNotFound);
  testing::WriteFileBytes(dir / "notes.txt", "hello");
  auto r = ComputeModelStats(dir / "notes.txt");
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  testing::WriteFileBytes(dir / "bad.safetensors", std::string("\x08\0\0\0\0\0\0\0{}", 10));
  EXPECT_EQ(ComputeModelStats(dir / "bad.safetensors").status().code(), Code::kCorruption);
}

// --- Corpus ---------------------------------------------------------------------------------

TEST(ModelStatsCorpus, NaNAdapterIsFlagged) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string path = corpus + "/adapters/gemma2b-lora-f16/adapter_model.safetensors";
  auto r = ComputeModelStats(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->tensors.empty());
  EXPECT_EQ(r->all_non_finite, r->tensors.size());
  EXPECT_EQ(r->elements, 1'843'200u);
  EXPECT_EQ(r->nan, 1'843'200u);
  const std::string text = ModelStatsText(*r);
  for (const TensorStatsEntry& e : r->tensors) {
    EXPECT_EQ(e.dtype, "F16");
    EXPECT_TRUE(e.stats.all_non_finite) << e.name;
    EXPECT_THAT(text, HasSubstr("warning: tensor " + e.name + " is all NaN/Inf")) << e.name;
  }
  EXPECT_THAT(text, HasSubstr("warning: " + std::to_string(r->tensors.size()) + " of " +
                              std::to_string(r->tensors.size()) + " tensors are all NaN/Inf"));
}

TEST(ModelStatsCorpus, TinyGpt2IsFinite) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto r = ComputeModelStats(corpus + "/tiny-gpt2/base");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "hf-dir");
  EXPECT_EQ(r->tensors.size(), 28u);
  EXPECT_EQ(r->elements, 102'714u);
  EXPECT_EQ(r->nan + r->pos_inf + r->neg_inf, 0u);
  EXPECT_EQ(r->all_non_finite, 0u);
  bool any_spread = false;
  for (const TensorStatsEntry& e : r->tensors) {
    EXPECT_EQ(e.stats.finite, e.stats.count) << e.name;
    EXPECT_LE(e.stats.min, e.stats.mean);
    EXPECT_LE(e.stats.mean, e.stats.max);
    any_spread = any_spread || e.stats.stddev > 0;
  }
  EXPECT_TRUE(any_spread);
  EXPECT_THAT(ModelStatsText(*r), Not(HasSubstr("warning")));
}

TEST(ModelStatsCorpus, GgufFile) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto r = ComputeModelStats(corpus + "/gguf/llama-2-tiny-random.gguf");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "gguf");
  EXPECT_EQ(r->tensors.size(), 12u);
  EXPECT_EQ(r->unsupported, 0u);
  size_t f16 = 0;
  for (const auto& e : r->tensors) f16 += e.dtype == "F16" ? 1 : 0;
  EXPECT_EQ(f16, 9u);
  EXPECT_EQ(r->nan, 0u);
}

// A model directory holding a GGUF file has its tensors (they were left out: `blz diff --values`
// of two such directories compared 0 tensors while `blz inspect` listed 12).
TEST(ModelStatsCorpus, DirectoryWithGgufFile) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir dir;
  std::filesystem::copy_file(corpus + "/gguf/llama-2-tiny-random.gguf",
                             dir.path() + "/model.gguf");
  auto r = ComputeModelStats(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "hf-dir");
  ASSERT_EQ(r->tensors.size(), 12u);
  auto direct = ComputeModelStats(corpus + "/gguf/llama-2-tiny-random.gguf");
  ASSERT_TRUE(direct.ok());
  for (size_t i = 0; i < r->tensors.size(); ++i) {
    EXPECT_EQ(r->tensors[i].name, direct->tensors[i].name);
    EXPECT_EQ(r->tensors[i].dtype, direct->tensors[i].dtype);
    EXPECT_EQ(r->tensors[i].stats.mean, direct->tensors[i].stats.mean) << r->tensors[i].name;
  }
}

}  // namespace
}  // namespace blz::formats
