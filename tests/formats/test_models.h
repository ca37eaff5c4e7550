// Synthetic Hugging Face model directories for tests (formats, patcher, store, end-to-end).
//
// Contract of WriteTestModel(dir, options):
//   - Creates `dir` (and parents) if needed and writes into it:
//       config.json                        (fixed text; mentions layers and hidden size)
//       model.safetensors                  when shards == 1, or
//       model-0000i-of-0000n.safetensors   for i in 1..n when shards = n > 1, plus
//       model.safetensors.index.json       (transformers-style weight_map)
//       extra/notes.txt                    when with_subdir (a file in a sub-directory)
//     Existing files of those names are an error (the safetensors writer refuses to overwrite).
//   - Tensors (hidden size H = options.hidden, L = options.layers, vocab V = options.vocab):
//       model.embed_tokens.weight        F32  [V, H]
//       model.layers.<l>.attn.qkv.weight  BF16 [3H, H]
//       model.layers.<l>.attn.qkv.bias    F16  [3H]
//       model.layers.<l>.mlp.up.weight    F32  [4H, H]
//       model.layers.<l>.mlp.down.weight  BF16 [H, 4H]
//       model.norm.weight                F32  [H]
//     plus, when with_edge_tensors: model.step I64 [] (0-rank, value 1000) and
//     model.empty F32 [0, H] (no elements). Tensors are spread over the shards round-robin in
//     the order listed above.
//   - Values are deterministic: element k of a tensor is a pseudo-random number in
//     [-0.5, 0.5) from a splitmix64 stream seeded by (options.seed, tensor name). The same
//     options always give byte-identical files.
//   - A "fine-tune": with perturb_scale > 0 every float element x (of a tensor whose name does
//     not start with frozen_prefix, if that is non-empty) becomes
//     x + perturb_scale * r, r in [-0.5, 0.5) from a stream seeded by (perturb_seed, name),
//     before rounding to the tensor's dtype (round to nearest even for BF16 and F16). So
//     WriteTestModel(a, {}) and WriteTestModel(b, {.perturb_scale = 0.01}) are a base and a
//     fine-tune with the same names, dtypes and shapes; tensors under frozen_prefix stay
//     byte-identical. Integer tensors are never perturbed.
//   - Returns what it wrote. Aborts the test (gtest ADD_FAILURE + empty result) on error.
#ifndef BLZ_TESTS_FORMATS_TEST_MODELS_H_
#define BLZ_TESTS_FORMATS_TEST_MODELS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/blz_archive.h"
#include "formats/dtype.h"
#include "formats/safetensors.h"
#include "tests/test_util.h"

namespace blz::testing {

struct TestModelOptions {
  int shards = 1;
  int layers = 2;
  int hidden = 16;
  int vocab = 64;
  uint64_t seed = 1;
  double perturb_scale = 0.0;   // 0: the base model
  uint64_t perturb_seed = 2;
  std::string frozen_prefix;    // tensors starting with it are not perturbed ("" = none)
  bool with_subdir = false;     // also write extra/notes.txt
  bool with_edge_tensors = false;  // also a 0-rank I64 and an empty F32 tensor
};

struct TestTensorInfo {
  std::string name;
  formats::DType dtype;
  std::vector<uint64_t> shape;
  std::string file;  // relative path of the shard holding it
};

struct TestModelInfo {
  std::vector<std::string> files;  // relative paths written, sorted
  std::vector<TestTensorInfo> tensors;
};

namespace test_models_internal {

inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t SeedFor(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Uniform in [-0.5, 0.5).
inline double Uniform(uint64_t* state) {
  return double(SplitMix64(state) >> 11) * (1.0 / 9007199254740992.0) - 0.5;
}

inline uint16_t FloatToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return uint16_t(u >> 16);
}

inline uint16_t FloatToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int32_t exp = int32_t((u >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = u & 0x7FFFFF;
  if (((u >> 23) & 0xFF) == 0xFF) return uint16_t(sign | 0x7C00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7C00);
  if (exp <= 0) {  // subnormal or zero
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into the exponent
  return uint16_t(half);
}

inline std::string TensorBytes(const TestModelOptions& o, const TestTensorInfo& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  std::string out;
  out.reserve(size_t(n) * formats::DTypeSize(t.dtype));
  if (t.dtype == formats::DType::kI64) {
    for (uint64_t k = 0; k < n; ++k) {
      uint64_t v = 1000 + k;
      for (int b = 0; b < 8; ++b) out.push_back(char(v >> (8 * b)));
    }
    return out;
  }
  uint64_t base = SeedFor(o.seed, t.name);
  uint64_t pert = SeedFor(o.perturb_seed, t.name);
  const bool perturb = o.perturb_scale > 0 &&
                       (o.frozen_prefix.empty() || t.name.rfind(o.frozen_prefix, 0) != 0);
  for (uint64_t k = 0; k < n; ++k) {
    double x = Uniform(&base);
    if (perturb) x += o.perturb_scale * Uniform(&pert);
    const float f = float(x);
    if (t.dtype == formats::DType::kF32) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      for (int b = 0; b < 4; ++b) out.push_back(char(u >> (8 * b)));
    } else {
      const uint16_t h = t.dtype == formats::DType::kBF16 ? FloatToBF16(f) : FloatToF16(f);
      out.push_back(char(h & 0xFF));
      out.push_back(char(h >> 8));
    }
  }
  return out;
}

inline std::string ShardName(int i, int n) {
  if (n == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

}  // namespace test_models_internal

// See the contract at the top of this file.
inline TestModelInfo WriteTestModel(const std::string& dir, const TestModelOptions& o = {}) {
  namespace tmi = test_models_internal;
  using formats::DType;
  TestModelInfo info;
  std::filesystem::create_directories(dir);
  const uint64_t H = uint64_t(o.hidden), V = uint64_t(o.vocab);
  std::vector<TestTensorInfo> tensors;
  tensors.push_back({"model.embed_tokens.weight", DType::kF32, {V, H}, ""});
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    tensors.push_back({p + "attn.qkv.weight", DType::kBF16, {3 * H, H}, ""});
    tensors.push_back({p + "attn.qkv.bias", DType::kF16, {3 * H}, ""});
    tensors.push_back({p + "mlp.up.weight", DType::kF32, {4 * H, H}, ""});
    tensors.push_back({p + "mlp.down.weight", DType::kBF16, {H, 4 * H}, ""});
  }
  tensors.push_back({"model.norm.weight", DType::kF32, {H}, ""});
  if (o.with_edge_tensors) {
    tensors.push_back({"model.step", DType::kI64, {}, ""});
    tensors.push_back({"model.empty", DType::kF32, {0, H}, ""});
  }
  const int n = o.shards < 1 ? 1 : o.shards;
  std::vector<std::vector<size_t>> by_shard(static_cast<size_t>(n));
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].file = tmi::ShardName(int(i % size_t(n)), n);
    by_shard[i % size_t(n)].push_back(i);
  }
  std::vector<std::string> data(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) data[i] = tmi::TensorBytes(o, tensors[i]);

  for (int s = 0; s < n; ++s) {
    std::vector<formats::SafetensorsTensorView> views;
    for (size_t i : by_shard[size_t(s)]) {
      views.push_back({tensors[i].name, tensors[i].dtype, tensors[i].shape, AsBytes(data[i])});
    }
    const std::string name = tmi::ShardName(s, n);
    Status st = formats::WriteSafetensors(dir + "/" + name, views, {{"format", "pt"}});
    if (!st.ok()) {
      ADD_FAILURE() << "WriteTestModel: " << st.ToString();
      return {};
    }
    info.files.push_back(name);
  }
  if (n > 1) {
    std::string idx = "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {\n";
    for (size_t i = 0; i < tensors.size(); ++i) {
      idx += "    \"" + tensors[i].name + "\": \"" + tensors[i].file + "\"";
      idx += i + 1 < tensors.size() ? ",\n" : "\n";
    }
    idx += "  }\n}\n";
    WriteFileBytes(dir + "/model.safetensors.index.json", idx);
    info.files.push_back("model.safetensors.index.json");
  }
  WriteFileBytes(dir + "/config.json",
                 "{\n  \"model_type\": \"blz-test\",\n  \"hidden_size\": " + std::to_string(H) +
                     ",\n  \"num_hidden_layers\": " + std::to_string(o.layers) +
                     ",\n  \"vocab_size\": " + std::to_string(V) + "\n}\n");
  info.files.push_back("config.json");
  if (o.with_subdir) {
    WriteFileBytes(dir + "/extra/notes.txt", "synthetic test model\n");
    info.files.push_back("extra/notes.txt");
  }
  std::sort(info.files.begin(), info.files.end());
  info.tensors = std::move(tensors);
  return info;
}

// The .blz archive (bytes) of a synthetic model large enough for its planes to compress
// (hidden 64, vocab 128: about 140 KB); `perturb` > 0 makes a fine-tune of seed's model.
inline std::string PackedTestModel(uint64_t seed, double perturb = 0) {
  TempDir tmp;
  TestModelOptions o;
  o.hidden = 64;
  o.vocab = 128;
  o.seed = seed;
  o.perturb_scale = perturb;
  WriteTestModel(tmp / "model", o);
  formats::PackStats stats;
  Status s = formats::Pack(tmp / "model", tmp / "model.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ReadFileBytes(tmp / "model.blz");
}

}  // namespace blz::testing

#endif  // BLZ_TESTS_FORMATS_TEST_MODELS_H_
