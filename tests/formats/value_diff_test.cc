#include "formats/value_diff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
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
using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
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

TensorSpec F32(const std::string& name, std::vector<float> v) {
  return {name, DType::kF32, {v.size()}, Bytes(v)};
}

const TensorDiff* FindTensor(const ModelDiff& d, const std::string& name) {
  for (const auto& t : d.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}
const LayerDiff* FindLayer(const ModelDiff& d, const std::string& name) {
  for (const auto& l : d.layers) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

// --- Layer grouping -------------------------------------------------------------------------

TEST(LayerOf, Groups) {
  EXPECT_EQ(LayerOf("model.layers.3.mlp.up_proj.weight"), "model.layers.3");
  EXPECT_EQ(LayerOf("transformer.h.0.attn.c_attn.weight"), "transformer.h.0");
  EXPECT_EQ(LayerOf("blk.12.ffn_up.weight"), "blk.12");
  EXPECT_EQ(LayerOf("encoder.layer.5.output.dense.bias"), "encoder.layer.5");
  EXPECT_EQ(LayerOf("block.0.w"), "block.0");
  EXPECT_EQ(LayerOf("h.01.x"), "h.01");
  // The first match wins (T5: a block's sub-layers stay in the block).
  EXPECT_EQ(LayerOf("encoder.block.0.layer.1.DenseReluDense.wi.weight"), "encoder.block.0");
  EXPECT_EQ(LayerOf("base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight"),
            "base_model.model.model.layers.7");
  // Not a layer: no following component, no digits, other key names.
  EXPECT_EQ(LayerOf("model.layers.3"), "other");
  EXPECT_EQ(LayerOf("model.layers.x.w"), "other");
  EXPECT_EQ(LayerOf("model.layers.3a.w"), "other");
  EXPECT_EQ(LayerOf("hidden.0.w"), "other");
  EXPECT_EQ(LayerOf("mylayers.0.w"), "other");
  EXPECT_EQ(LayerOf("lm_head.weight"), "other");
  EXPECT_EQ(LayerOf(""), "other");
}

// --- Sums -----------------------------------------------------------------------------------

TEST(DiffSums, DefinitionsForZeroVectors) {
  DiffSums s;
  EXPECT_EQ(s.RelativeL2(), 0.0);
  EXPECT_EQ(s.Cosine(), 1.0);
  EXPECT_EQ(s.FractionChanged(), 0.0);
  s.sum_bb = 25;
  s.sum_dd = 25;
  EXPECT_TRUE(std::isinf(s.RelativeL2()));
  EXPECT_EQ(s.Cosine(), 0.0);
}

TEST(DiffTensorValues, QuantizedBitwiseChanges) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
  std::vector<uint8_t> a(68);
  ASSERT_TRUE(QuantizeQ8_0(x, a).ok());
  std::vector<uint8_t> b = a;
  b[2 + 5] ^= 1;  // block 0, element 5
  auto d = DiffTensorValues(ValueType::kQ8_0, a, b, 64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->changed, 1u);
  b[34] ^= 1;     // block 1's scale: all 32 of its elements change
  d = DiffTensorValues(ValueType::kQ8_0, a, b, 64);
  EXPECT_EQ(d->changed, 33u);
  EXPECT_LT(d->Cosine(), 1.0);

  std::vector<uint8_t> qa(36), qb;
  ASSERT_TRUE(QuantizeQ4_0(x, qa).ok());
  qb = qa;
  qb[2 + 3] ^= 0x10;  // element 19 (high nibble of byte 3)
  d = DiffTensorValues(ValueType::kQ4_0, qa, qb, 64);
  EXPECT_EQ(d->changed, 1u);
  qb[2 + 3] ^= 0x11;  // net change 0x01: now only the low nibble (element 3) differs
  d = DiffTensorValues(ValueType::kQ4_0, qa, qb, 64);
  EXPECT_EQ(d->changed, 1u);
  qb[2 + 3] ^= 0xF0;  // both nibbles differ: elements 3 and 19
  d = DiffTensorValues(ValueType::kQ4_0, qa, qb, 64);
  EXPECT_EQ(d->changed, 2u);
  EXPECT_EQ(DiffTensorValues(ValueType::kQ4_0, qa, ByteSpan(qb).first(18), 64).status().code(),
            Code::kInvalidArgument);
}

TEST(DiffTensorValues, BitwiseChangeIsNotValueChange) {
  // -0 vs +0 and two different NaN payloads are bitwise changes with no numeric difference.
  const std::vector<uint32_t> a = {0x00000000, 0x7FC00000, 0x3F800000};
  const std::vector<uint32_t> b = {0x80000000, 0x7FC00001, 0x3F800000};
  auto d = DiffTensorValues(ValueType::kF32, AsBytes(Bytes(a)), AsBytes(Bytes(b)), 3);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->changed, 2u);
  EXPECT_EQ(d->finite_pairs, 2u);
  EXPECT_EQ(d->a_nan, 1u);
  EXPECT_EQ(d->b_nan, 1u);
  EXPECT_EQ(d->max_abs, 0.0);
  EXPECT_EQ(d->RelativeL2(), 0.0);
  EXPECT_EQ(d->Cosine(), 1.0);
}

// --- Models ---------------------------------------------------------------------------------

TEST(DiffModels, IdenticalModels) {
  TempDir dir;
  std::mt19937 rng(9);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(1000);
  for (float& x : w) x = n(rng);
  WriteModel(dir / "a.safetensors", {F32("model.layers.0.w", w), F32("model.layers.1.w", w),
                                     F32("lm_head.weight", {1.5f, -2.5f})});
  ProgressCounters counters;
  DiffOptions options;
  options.counters = &counters;
  auto r = DiffModels(dir / "a.safetensors", dir / "a.safetensors", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(counters.total.load(), 2002u);
  EXPECT_EQ(counters.done.load(), 2002u);
  ASSERT_EQ(r->tensors.size(), 3u);
  for (const auto& t : r->tensors) {
    EXPECT_EQ(t.sums.changed, 0u) << t.name;
    EXPECT_EQ(t.sums.RelativeL2(), 0.0);
    EXPECT_EQ(t.sums.max_abs, 0.0);
    EXPECT_EQ(t.sums.Cosine(), 1.0) << t.name;
  }
  EXPECT_EQ(r->model.changed, 0u);
  EXPECT_EQ(r->model.elements, 2002u);
  EXPECT_EQ(r->model.Cosine(), 1.0);
  EXPECT_EQ(r->model.RelativeL2(), 0.0);
  ASSERT_EQ(r->layers.size(), 3u);
  for (const auto& l : r->layers) EXPECT_EQ(l.sums.Cosine(), 1.0) << l.name;
  EXPECT_TRUE(r->added.empty());
  EXPECT_TRUE(r->removed.empty());
  EXPECT_TRUE(r->not_comparable.empty());
}

TEST(DiffModels, HandMadePairWithKnownNumbers) {
  TempDir dir;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  WriteModel(dir / "a.safetensors",
             {F32("model.layers.0.w", {1, 2, 3, 4}), F32("model.layers.0.zero", {0, 0}),
              F32("model.layers.10.x", {1, 1}), F32("model.layers.2.x", {2, 0}),
              F32("lm_head.weight", {1, 2, 3}), F32("gone", {1}),
              F32("dtype_change", {1, 2}), F32("shape_change", {1, 2, 3, 4}),
              F32("same_bytes_other_dtype", {0})});
  WriteModel(dir / "b.safetensors",
             {F32("model.layers.0.w", {1, 2, 3, 5}), F32("model.layers.0.zero", {3, 4}),
              F32("model.layers.10.x", {-1, -1}), F32("model.layers.2.x", {0, 2}),
              F32("lm_head.weight", {1, nan, 3}), F32("new", {7}),
              {"dtype_change", DType::kI32, {2}, Bytes(std::vector<int32_t>{1, 2})},
              {"shape_change", DType::kF32, {2, 2}, Bytes(std::vector<float>{1, 2, 3, 4})},
              {"same_bytes_other_dtype", DType::kI32, {1}, Bytes(std::vector<int32_t>{0})}});
  auto r = DiffModels(dir / "a.safetensors", dir / "b.safetensors", {2});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelDiff& d = *r;

  const TensorDiff* w = FindTensor(d, "model.layers.0.w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->layer, "model.layers.0");
  EXPECT_EQ(w->sums.changed, 1u);
  EXPECT_DOUBLE_EQ(w->sums.FractionChanged(), 0.25);
  EXPECT_DOUBLE_EQ(w->sums.RelativeL2(), 1.0 / std::sqrt(30.0));
  EXPECT_EQ(w->sums.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(w->sums.Cosine(), 34.0 / std::sqrt(30.0 * 39.0));

  const TensorDiff* z = FindTensor(d, "model.layers.0.zero");
  EXPECT_TRUE(std::isinf(z->sums.RelativeL2()));  // ||a|| = 0, ||b - a|| = 5
  EXPECT_EQ(z->sums.Cosine(), 0.0);
  EXPECT_EQ(z->sums.NormDiff(), 5.0);

  EXPECT_DOUBLE_EQ(FindTensor(d, "model.layers.10.x")->sums.Cosine(), -1.0);
  EXPECT_EQ(FindTensor(d, "model.layers.2.x")->sums.Cosine(), 0.0);  // orthogonal

  const TensorDiff* head = FindTensor(d, "lm_head.weight");
  EXPECT_EQ(head->layer, "other");
  EXPECT_EQ(head->sums.changed, 1u);
  EXPECT_EQ(head->sums.b_nan, 1u);
  EXPECT_EQ(head->sums.a_nan, 0u);
  EXPECT_EQ(head->sums.finite_pairs, 2u);
  EXPECT_EQ(head->sums.Cosine(), 1.0);  // the NaN position is left out of the sums
  EXPECT_EQ(head->sums.RelativeL2(), 0.0);

  // Layer 0 aggregates sums, not ratios: aa = 30 + 0, bb = 39 + 25, ab = 34, dd = 1 + 25.
  const LayerDiff* l0 = FindLayer(d, "model.layers.0");
  ASSERT_NE(l0, nullptr);
  EXPECT_EQ(l0->tensors, 2u);
  EXPECT_DOUBLE_EQ(l0->sums.RelativeL2(), std::sqrt(26.0 / 30.0));
  EXPECT_DOUBLE_EQ(l0->sums.Cosine(), 34.0 / std::sqrt(30.0 * 64.0));
  EXPECT_EQ(l0->sums.max_abs, 4.0);
  EXPECT_EQ(l0->sums.changed, 3u);
  // Layers sort numerically, "other" last.
  std::vector<std::string> names;
  for (const auto& l : d.layers) names.push_back(l.name);
  EXPECT_THAT(names,
              ElementsAre("model.layers.0", "model.layers.2", "model.layers.10", "other"));
  // Model: everything comparable.
  EXPECT_EQ(d.tensors.size(), 5u);
  EXPECT_EQ(d.model.elements, 4u + 2 + 2 + 2 + 3);
  EXPECT_EQ(d.model.changed, 1u + 2 + 2 + 2 + 1);
  EXPECT_DOUBLE_EQ(d.model.sum_aa, 30.0 + 0 + 2 + 4 + 10);
  EXPECT_DOUBLE_EQ(d.model.sum_ab, 34.0 + 0 - 2 + 0 + 10);

  ASSERT_EQ(d.added.size(), 1u);
  EXPECT_EQ(d.added[0].name, "new");
  ASSERT_EQ(d.removed.size(), 1u);
  EXPECT_EQ(d.removed[0].name, "gone");
  ASSERT_EQ(d.not_comparable.size(), 3u);
  for (const auto& n : d.not_comparable) {
    if (n.name == "dtype_change") {
      EXPECT_EQ(n.reason, "dtype differs (F32 vs I32)");
      EXPECT_FALSE(n.bytes_identical);
    } else if (n.name == "shape_change") {
      EXPECT_EQ(n.reason, "shape differs ([4] vs [2, 2])");
      EXPECT_TRUE(n.bytes_identical);
    } else {
      EXPECT_EQ(n.name, "same_bytes_other_dtype");
      EXPECT_TRUE(n.bytes_identical);
    }
  }

  const std::string text = ModelDiffText(d);
  EXPECT_THAT(text, HasSubstr("5 compared, 1 added, 1 removed, 3 not comparable"));
  EXPECT_THAT(text, HasSubstr("model.layers.10"));
  EXPECT_THAT(text, HasSubstr("shape_change: shape differs ([4] vs [2, 2]) (bytes identical)"));
  EXPECT_THAT(text, HasSubstr("LAYER"));
  // A tensor whose base is all zeros has no angle: its cosine is n/a, not 0 (issue 24 item 4).
  const size_t zero_row = text.find("model.layers.0.zero ");
  ASSERT_NE(zero_row, std::string::npos) << text;
  EXPECT_THAT(text.substr(zero_row, text.find('\n', zero_row) - zero_row), HasSubstr("n/a"));

  const auto j = ModelDiffJson(d);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_THAT(keys, ElementsAre("schema", "tensors", "layers", "model", "added", "removed",
                                "not_comparable", "inputs"));
  EXPECT_EQ(j["inputs"]["b"]["format"], "safetensors");
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["layers"].size(), 4u);
  EXPECT_EQ(j["added"][0]["name"], "new");
  bool saw_zero = false;
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "model.layers.0.zero") {
      saw_zero = true;
      EXPECT_TRUE(t["rel_l2"].is_null());
      EXPECT_EQ(t["l2_diff"].get<double>(), 5.0);
      EXPECT_EQ(t["cosine"].get<double>(), 0.0);
    }
    if (t["name"] == "lm_head.weight") {
      EXPECT_EQ(t["b"]["nan"], 1);
    }
  }
  EXPECT_TRUE(saw_zero);
  EXPECT_EQ(j["model"]["tensors"], 5);
}

TEST(DiffModels, LargeTensorsAreIndependentOfThreadCount) {
  const size_t n = size_t(kDiffSegmentElements) * 2 + 4000;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = nd(rng);
    b[i] = i % 3 == 0 ? a[i] : a[i] + 0.01f * nd(rng);
  }
  TempDir dir;
  WriteModel(dir / "a.safetensors", {F32("blk.0.w", a), F32("blk.1.w", {1, 2})});
  WriteModel(dir / "b.safetensors", {F32("blk.0.w", b), F32("blk.1.w", {1, 3})});
  auto one = DiffModels(dir / "a.safetensors", dir / "b.safetensors", {1});
  auto three = DiffModels(dir / "a.safetensors", dir / "b.safetensors", {3});
  ASSERT_TRUE(one.ok() && three.ok());
  EXPECT_EQ(ModelDiffJson(*one).dump(), ModelDiffJson(*three).dump());
  const TensorDiff* t = FindTensor(*one, "blk.0.w");
  EXPECT_EQ(t->sums.elements, n);
  // Values equal at every third index (up to ties where the perturbation rounds away).
  EXPECT_NEAR(t->sums.FractionChanged(), 2.0 / 3.0, 0.01);
  EXPECT_GT(t->sums.Cosine(), 0.9);
  EXPECT_LT(t->sums.Cosine(), 1.0);
  // Reference: a single pass in the same double arithmetic.
  double aa = 0, dd = 0;
  for (size_t i = 0; i < n; ++i) {
    aa += double(a[i]) * double(a[i]);
    dd += (double(b[i]) - double(a[i])) * (double(b[i]) - double(a[i]));
  }
  EXPECT_NEAR(t->sums.RelativeL2(), std::sqrt(dd / aa), 1e-9);
  EXPECT_EQ(one->layers.size(), 2u);
}

TEST(DiffModels, GgufPairAndMixedInputs) {
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String("llama")});
  h.tensors.push_back({"blk.0.q", {32}, GgmlType::kQ8_0, 0, 0});
  h.tensors.push_back({"blk.0.k", {256}, GgmlType::kQ4_K, 0, 0});
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  std::vector<float> x(32);
  for (size_t i = 0; i < 32; ++i) x[i] = float(i) - 10.0f;
  std::vector<uint8_t> q(34);
  ASSERT_TRUE(QuantizeQ8_0(x, q).ok());
  std::string k(144, '\x05');
  std::vector<ByteSpan> data = {q, AsBytes(k)};
  TempDir dir;
  ASSERT_TRUE(WriteGgufFile(dir / "a.gguf", h, data, {}).ok());
  q[2 + 4] ^= 0x01;
  ASSERT_TRUE(WriteGgufFile(dir / "b.gguf", h, data, {}).ok());
  auto r = DiffModels(dir / "a.gguf", dir / "b.gguf");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), 1u);
  EXPECT_EQ(r->tensors[0].dtype, "Q8_0");
  EXPECT_EQ(r->tensors[0].sums.changed, 1u);
  EXPECT_GT(r->tensors[0].sums.max_abs, 0.0);
  ASSERT_EQ(r->not_comparable.size(), 1u);
  EXPECT_EQ(r->not_comparable[0].reason, "unsupported type Q4_K");
  EXPECT_TRUE(r->not_comparable[0].bytes_identical);
  EXPECT_EQ(r->layers.size(), 1u);
  EXPECT_EQ(r->layers[0].name, "blk.0");

  // A directory against its .blz archive: identical values.
  TempDir src;
  WriteModel(src / "model.safetensors", {F32("model.layers.0.w", {1, 2, 3})});
  ASSERT_TRUE(Pack(src.path(), dir / "m.blz", nullptr).ok());
  r = DiffModels(src.path(), dir / "m.blz");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->a_format, "hf-dir");
  EXPECT_EQ(r->b_format, "blz");
  EXPECT_EQ(r->model.changed, 0u);
  EXPECT_EQ(r->model.elements, 3u);
}

TEST(DiffModels, DuplicateNamesAreRejected) {
  TempDir src;
  WriteModel(src / "model-1.safetensors", {F32("w", {1})});
  WriteModel(src / "model-2.safetensors", {F32("w", {2})});
  auto r = DiffModels(src.path(), src.path());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("tensor name 'w' appears twice"));
  EXPECT_EQ(DiffModels(src / "nope", src.path()).status().code(), Code::kNotFound);
}

// --- Corpus ---------------------------------------------------------------------------------

TEST(DiffModelsCorpus, TinyGpt2BaseVsFineTune) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto r = DiffModels(corpus + "/tiny-gpt2/base", corpus + "/tiny-gpt2/ft-v1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelDiff& d = *r;
  EXPECT_EQ(d.tensors.size(), 28u);
  EXPECT_TRUE(d.added.empty());
  EXPECT_TRUE(d.removed.empty());
  EXPECT_TRUE(d.not_comparable.empty());
  EXPECT_EQ(d.model.elements, 102'714u);
  EXPECT_GT(d.model.FractionChanged(), 0.0);
  EXPECT_LT(d.model.Cosine(), 1.0);
  EXPECT_GT(d.model.Cosine(), 0.9);
  EXPECT_GT(d.model.RelativeL2(), 0.0);
  EXPECT_EQ(d.model.a_nan + d.model.b_nan, 0u);
  std::vector<std::string> names;
  for (const auto& l : d.layers) names.push_back(l.name);
  EXPECT_THAT(names, ElementsAre("transformer.h.0", "transformer.h.1", "other"));
  EXPECT_EQ(FindLayer(d, "transformer.h.0")->tensors, 12u);
  EXPECT_EQ(FindLayer(d, "other")->tensors, 4u);
}

TEST(DiffModelsCorpus, TinyGpt2CastToBF16) {
  // Half-precision pair made with the project's own RNE cast (see corpus PROVENANCE.md).
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir dir;
  std::vector<std::string> keep;  // owns the converted bytes
  for (const char* side : {"base", "ft-v1"}) {
    auto sf = SafetensorsFile::Open(corpus + "/tiny-gpt2/" + side + "/model.safetensors");
    ASSERT_TRUE(sf.ok());
    std::vector<TensorSpec> specs;
    for (size_t i = 0; i < sf->tensors().size(); ++i) {
      const auto& t = sf->tensors()[i];
      auto f = DecodeToFloat(ValueType::kF32, sf->TensorData(i), t.NumElements());
      ASSERT_TRUE(f.ok());
      std::vector<uint16_t> h(f->size());
      ASSERT_TRUE(ConvertF32ToBF16(*f, h).ok());
      specs.push_back({t.name, DType::kBF16, t.shape, Bytes(h)});
    }
    WriteModel(dir / (std::string(side) + ".safetensors"), specs);
  }
  auto r = DiffModels(dir / "base.safetensors", dir / "ft-v1.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors.size(), 28u);
  EXPECT_EQ(r->tensors[0].dtype, "BF16");
  EXPECT_GT(r->model.FractionChanged(), 0.0);
  EXPECT_GT(r->model.Cosine(), 0.9);
  EXPECT_LT(r->model.Cosine(), 1.0);
}

}  // namespace
}  // namespace blz::formats
