// Tests of the synthetic model helper itself (tests/formats/test_models.h).
#include "tests/formats/test_models.h"

#include <gtest/gtest.h>

#include <cstring>

#include "formats/safetensors.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

TEST(TestModels, DeterministicBaseAndPerturbedFineTune) {
  TempDir a, b, ft;
  TestModelOptions o;
  o.with_edge_tensors = true;
  const auto info = WriteTestModel(a.path(), o);
  WriteTestModel(b.path(), o);
  TestModelOptions f = o;
  f.perturb_scale = 0.01;
  f.frozen_prefix = "model.embed_tokens";
  WriteTestModel(ft.path(), f);
  EXPECT_EQ(ReadFileBytes(a / "model.safetensors"), ReadFileBytes(b / "model.safetensors"));

  auto base = formats::SafetensorsFile::Open(a / "model.safetensors");
  auto tuned = formats::SafetensorsFile::Open(ft / "model.safetensors");
  ASSERT_TRUE(base.ok() && tuned.ok());
  ASSERT_EQ(base->tensors().size(), info.tensors.size());
  ASSERT_EQ(tuned->tensors().size(), info.tensors.size());
  for (size_t i = 0; i < base->tensors().size(); ++i) {
    const auto& t = base->tensors()[i];
    const int64_t j = tuned->header().Find(t.name);
    ASSERT_GE(j, 0);
    EXPECT_EQ(tuned->tensors()[size_t(j)].shape, t.shape);
    EXPECT_EQ(tuned->tensors()[size_t(j)].dtype, t.dtype);
    const ByteSpan x = base->TensorData(i), y = tuned->TensorData(size_t(j));
    const bool same = std::equal(x.begin(), x.end(), y.begin(), y.end());
    const bool expect_same = t.name.rfind("model.embed_tokens", 0) == 0 ||
                             !formats::IsFloat(t.dtype) || t.NumElements() == 0;
    EXPECT_EQ(same, expect_same) << t.name;
  }
}

TEST(TestModels, HalfPrecisionRounding) {
  using test_models_internal::FloatToBF16;
  using test_models_internal::FloatToF16;
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToF16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToF16(0.5f), 0x3800);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToF16(1e6f), 0x7C00);          // overflows to infinity
  EXPECT_EQ(FloatToF16(5.9604645e-8f), 0x0001);  // smallest subnormal
  // 1 + 2^-11 is halfway between 1 and the next F16: ties to even (1.0).
  EXPECT_EQ(FloatToF16(1.0f + 1.0f / 2048), 0x3C00);
  EXPECT_EQ(FloatToF16(1.0f + 3.0f / 2048), 0x3C02);
}

}  // namespace
}  // namespace blz::testing
