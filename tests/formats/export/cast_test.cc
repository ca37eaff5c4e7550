// Casts of formats/export/cast.h: byte for byte against what ggml's own reference code wrote
// for corpus tensors (../shared/golden/ggml-casts, see its README), plus the error measure.
#include "formats/export/cast.h"

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/tensor_stats.h"
#include "tests/test_util.h"

namespace blz::exporter {
namespace {

using formats::ModelTensors;
using formats::ValueTensor;

// ../shared/golden next to the corpus ("" when absent).
std::string GoldenDir(const std::string& corpus) {
  std::string dir = corpus + "/../golden/ggml-casts";
  return std::filesystem::is_directory(dir) ? dir : std::string();
}

struct GoldenCase {
  const char* golden_stem;  // <stem>.<cast>.safetensors
  const char* source;       // relative to the corpus
  const char* cast;
};

constexpr GoldenCase kCases[] = {
    {"checkpoint-2400", "roberta-lora/checkpoint-2400/adapter_model.safetensors", "f16"},
    {"checkpoint-2400", "roberta-lora/checkpoint-2400/adapter_model.safetensors", "bf16"},
    {"checkpoint-2400", "roberta-lora/checkpoint-2400/adapter_model.safetensors", "q8_0"},
    {"checkpoint-2400", "roberta-lora/checkpoint-2400/adapter_model.safetensors", "q4_0"},
    {"opt125m-lora-bf16", "adapters/opt125m-lora-bf16/adapter_model.safetensors", "f16"},
    {"opt125m-lora-bf16", "adapters/opt125m-lora-bf16/adapter_model.safetensors", "bf16"},
    {"opt125m-lora-bf16", "adapters/opt125m-lora-bf16/adapter_model.safetensors", "q8_0"},
    {"opt125m-lora-bf16", "adapters/opt125m-lora-bf16/adapter_model.safetensors", "q4_0"},
    {"tiny-gpt2-base", "tiny-gpt2/base/model.safetensors", "f16"},
    {"tiny-gpt2-base", "tiny-gpt2/base/model.safetensors", "bf16"},
};

const ValueTensor* FindTensor(const ModelTensors& m, const std::string& name) {
  for (const ValueTensor& t : m.tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

class GoldenCastTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenCastTest, ReproducesGgmlByteForByte) {
  BLZ_REQUIRE_CORPUS(corpus);
  std::string golden_dir = GoldenDir(corpus);
  if (golden_dir.empty()) GTEST_SKIP() << "../shared/golden/ggml-casts not found";
  const GoldenCase& c = GetParam();
  auto cast = ParseCastType(c.cast);
  ASSERT_TRUE(cast.ok());
  auto golden = ModelTensors::Open(golden_dir + "/" + c.golden_stem + "." + c.cast +
                                   ".safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  auto source = ModelTensors::Open(corpus + "/" + c.source);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_FALSE(golden->tensors().empty());
  size_t compared = 0;
  for (const ValueTensor& g : golden->tensors()) {
    const ValueTensor* s = FindTensor(*source, g.name);
    ASSERT_NE(s, nullptr) << g.name;
    ASSERT_TRUE(s->type.has_value()) << g.name;
    auto values = formats::DecodeToFloat(*s->type, s->data, s->elements);
    ASSERT_TRUE(values.ok()) << values.status().ToString();
    auto bytes = CastBytes(*cast, s->elements);
    ASSERT_TRUE(bytes.ok()) << g.name;
    std::vector<uint8_t> out(*bytes);
    CastError error;
    ASSERT_TRUE(CastFloats(*values, *cast, out, &error).ok()) << g.name;
    ASSERT_EQ(out.size(), g.data.size()) << g.name;
    EXPECT_TRUE(std::equal(out.begin(), out.end(), g.data.begin())) << "tensor " << g.name;
    EXPECT_TRUE(std::isfinite(error.RelativeL2())) << g.name;
    ++compared;
  }
  EXPECT_EQ(compared, golden->tensors().size());
}

INSTANTIATE_TEST_SUITE_P(AllGoldens, GoldenCastTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<GoldenCase>& p) {
                           std::string n = std::string(p.param.golden_stem) + "_" +
                                           p.param.cast;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(CastTest, ParseNamesEveryTypeAndRejectsOthers) {
  for (const char* n : {"f32", "F16", "bf16", "Q8_0", "q4_0"}) {
    auto t = ParseCastType(n);
    ASSERT_TRUE(t.ok()) << n;
  }
  auto bad = ParseCastType("q4_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("known: f32, f16, bf16, q8_0, q4_0"), std::string::npos);
}

TEST(CastTest, QuantizedCastRejectsPartialBlocksAndNaN) {
  std::vector<float> v(33, 1.0f);
  std::vector<uint8_t> out(34);
  EXPECT_FALSE(CastFloats(v, CastType::kQ8_0, out).ok());  // 33 values: not whole blocks
  v.resize(32);
  v[7] = NAN;
  Status s = CastFloats(v, CastType::kQ8_0, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("7"), std::string::npos) << s.message();
}

TEST(CastTest, ErrorMeasuresTheDecodedOutput) {
  std::vector<float> v = {1.0f, 1.0f / 3.0f, -2.5f, 70000.0f};
  std::vector<uint8_t> out(8);
  CastError e;
  ASSERT_TRUE(CastFloats(v, CastType::kF16, out, &e).ok());
  EXPECT_EQ(e.elements, 4u);
  EXPECT_TRUE(std::isinf(e.max_abs));  // 70000 overflows F16 to Inf
  CastError exact;
  std::vector<float> w = {1.0f, -2.5f};
  std::vector<uint8_t> out2(4);
  ASSERT_TRUE(CastFloats(w, CastType::kBF16, out2, &exact).ok());
  EXPECT_EQ(exact.max_abs, 0.0);
  EXPECT_EQ(exact.RelativeL2(), 0.0);
}

}  // namespace
}  // namespace blz::exporter
