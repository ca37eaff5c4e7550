// End-to-end tests of formats/export/export.h: files blz exports, read back by blz's strict
// readers (and by the independent @huggingface/gguf reader when node and web/node_modules are
// present), with values compared to the source.
#include "formats/export/export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/export/tensor_job.h"
#include "formats/gguf.h"
#include "formats/model_dir.h"
#include "formats/safetensors.h"
#include "formats/tensor_stats.h"
#include "tests/test_util.h"

namespace blz::exporter {
namespace {

namespace fs = std::filesystem;
using formats::ModelTensors;
using formats::ValueTensor;
using testing::TempDir;
using testing::WriteFileBytes;

std::vector<float> Decode(const ValueTensor& t) {
  auto v = formats::DecodeToFloat(*t.type, t.data, t.elements);
  EXPECT_TRUE(v.ok()) << t.name;
  return v.ok() ? *v : std::vector<float>();
}

const ValueTensor* Find(const ModelTensors& m, const std::string& name) {
  for (const ValueTensor& t : m.tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// A GPT-2 directory from the corpus: tiny-gpt2/base plus the real gpt2 tokenizer files.
std::string MakeGpt2Dir(const std::string& corpus, const TempDir& tmp) {
  std::string dir = tmp / "gpt2";
  fs::create_directories(dir);
  for (const char* d : {"tiny-gpt2/base", "tokenizers/gpt2"}) {
    for (const auto& e : fs::directory_iterator(corpus + "/" + d)) {
      fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
    }
  }
  return dir;
}

// Floats k * 0.01 - offset, deterministic.
std::string FloatBytes(size_t n, float offset) {
  std::string s(n * 4, '\0');
  for (size_t k = 0; k < n; ++k) {
    float f = static_cast<float>(int(k % 97)) * 0.01f - offset + static_cast<float>(k) * 1e-5f;
    std::memcpy(&s[k * 4], &f, 4);
  }
  return s;
}

// A tiny byte-level BPE tokenizer.json: 94 printable ASCII tokens (ids 0-93), the merge
// "a b" -> "ab" (94), and two special tokens (95, 96): 97 tokens.
std::string TinyTokenizerJson() {
  nlohmann::json vocab = nlohmann::json::object();
  // GPT-2's byte-to-unicode table for printable ASCII is the identity: use "a".."z" etc.
  int id = 0;
  for (char c = '!'; c <= '~'; ++c) vocab[std::string(1, c)] = id++;
  vocab["ab"] = id++;
  nlohmann::json tok = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", id}, {"content", "<|endoftext|>"}, {"special", true}},
        {{"id", id + 1}, {"content", "<pad>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}},
  };
  return tok.dump();
}

struct LlamaDims {
  int hidden = 64, heads = 4, kv_heads = 2, ff = 96, layers = 1, vocab = 97;
};

// A synthetic LlamaForCausalLM directory (F32, untied) with the tokenizer above.
std::string MakeLlamaDir(const TempDir& tmp, const LlamaDims& d, const std::string& arch,
                         bool tied = false) {
  std::string dir = tmp / ("llama-" + arch + (tied ? "-tied" : ""));
  fs::create_directories(dir);
  nlohmann::json config = {
      {"architectures", {arch}}, {"model_type", "llama"}, {"hidden_size", d.hidden},
      {"num_attention_heads", d.heads}, {"num_key_value_heads", d.kv_heads},
      {"intermediate_size", d.ff}, {"num_hidden_layers", d.layers},
      {"vocab_size", d.vocab}, {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0}, {"tie_word_embeddings", tied}, {"bos_token_id", 95},
      {"eos_token_id", 95}};
  WriteFileBytes(dir + "/config.json", config.dump(2));
  WriteFileBytes(dir + "/tokenizer.json", TinyTokenizerJson());
  std::vector<std::pair<std::string, std::vector<uint64_t>>> shapes = {
      {"model.embed_tokens.weight", {uint64_t(d.vocab), uint64_t(d.hidden)}},
      {"model.norm.weight", {uint64_t(d.hidden)}},
  };
  if (!tied) shapes.push_back({"lm_head.weight", {uint64_t(d.vocab), uint64_t(d.hidden)}});
  const uint64_t h = d.hidden, kv = uint64_t(d.hidden / d.heads * d.kv_heads);
  for (int l = 0; l < d.layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    shapes.push_back({p + "self_attn.q_proj.weight", {h, h}});
    shapes.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    shapes.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    shapes.push_back({p + "self_attn.o_proj.weight", {h, h}});
    shapes.push_back({p + "mlp.gate_proj.weight", {uint64_t(d.ff), h}});
    shapes.push_back({p + "mlp.up_proj.weight", {uint64_t(d.ff), h}});
    shapes.push_back({p + "mlp.down_proj.weight", {h, uint64_t(d.ff)}});
    shapes.push_back({p + "input_layernorm.weight", {h}});
    shapes.push_back({p + "post_attention_layernorm.weight", {h}});
  }
  std::vector<std::string> bytes;
  bytes.reserve(shapes.size());
  std::vector<formats::SafetensorsTensorView> views;
  float offset = 0.3f;
  for (const auto& [name, shape] : shapes) {
    uint64_t n = 1;
    for (uint64_t x : shape) n *= x;
    bytes.push_back(FloatBytes(n, offset));
    offset += 0.01f;
    views.push_back({name, formats::DType::kF32, shape, AsBytes(bytes.back())});
  }
  EXPECT_TRUE(formats::WriteSafetensors(dir + "/model.safetensors", views).ok());
  return dir;
}

Result<ExportReport> Export(const std::string& src, const std::string& out, ExportFormat f,
                            std::optional<CastType> cast = std::nullopt, unsigned threads = 2) {
  ExportOptions o;
  o.format = f;
  o.cast = cast;
  o.threads = threads;
  return ExportModel(src, out, o);
}

// --- GGUF from a Hugging Face directory -----------------------------------------------------

TEST(ExportGgufTest, Gpt2FromTheCorpusReadsBackWithEveryValue) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  std::string dir = MakeGpt2Dir(corpus, tmp);
  std::string out = tmp / "gpt2.gguf";
  auto report = Export(dir, out, ExportFormat::kGguf);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->arch, "gpt2");
  auto reader = formats::GgufReader::Open(out, formats::GgufMode::kFull);  // strict
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const formats::GgufHeader& h = reader->header();
  auto str = [&](const char* k) {
    const formats::GgufValue* v = formats::FindGgufValue(h, k);
    return v != nullptr && v->AsString() != nullptr ? *v->AsString() : std::string();
  };
  EXPECT_EQ(str("general.architecture"), "gpt2");
  EXPECT_EQ(str("tokenizer.ggml.model"), "gpt2");
  const formats::GgufValue* tokens = formats::FindGgufValue(h, "tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->count, 50257u);
  // Every value: the GGUF tensor (F32, no cast) equals its HF source, transposed for Conv1D.
  auto src = ModelTensors::Open(dir);
  auto got = ModelTensors::Open(out);
  ASSERT_TRUE(src.ok() && got.ok());
  ASSERT_EQ(report->tensors.size(), got->tensors().size());
  for (const ExportTensorReport& r : report->tensors) {
    const ValueTensor* s = Find(*src, r.source_name);
    const ValueTensor* g = Find(*got, r.name);
    ASSERT_TRUE(s != nullptr && g != nullptr) << r.name;
    std::vector<float> sv = Decode(*s), gv = Decode(*g);
    ASSERT_EQ(sv.size(), gv.size()) << r.name;
    // The converter transposes GPT-2's Conv1D weights (c_attn, c_proj, c_fc, mlp.c_proj).
    bool transposed = r.name.find("attn_qkv.weight") != std::string::npos ||
                      r.name.find("attn_output.weight") != std::string::npos ||
                      r.name.find("ffn_up.weight") != std::string::npos ||
                      r.name.find("ffn_down.weight") != std::string::npos;
    if (transposed) {
      ASSERT_EQ(g->shape, (std::vector<uint64_t>{s->shape[1], s->shape[0]})) << r.name;
    } else {
      ASSERT_EQ(g->shape, s->shape) << r.name;
    }
    for (uint64_t k = 0; k < sv.size(); ++k) {
      uint64_t from = k;
      if (transposed) {  // g[i][j] = s[j][i]
        uint64_t i = k / g->shape[1], j = k % g->shape[1];
        from = j * s->shape[1] + i;
      }
      ASSERT_EQ(gv[k], sv[from]) << r.name << " element " << k;
    }
  }
  EXPECT_EQ(Find(*got, "output.weight"), nullptr);  // GPT-2 ties its output to wte
}

TEST(ExportGgufTest, IndependentReaderAgrees) {
  BLZ_REQUIRE_CORPUS(corpus);
  std::string tool = std::string(BLZ_SOURCE_DIR) + "/web/tools/read_gguf.mjs";
  if (!fs::is_directory(std::string(BLZ_SOURCE_DIR) + "/web/node_modules/@huggingface/gguf") ||
      std::system("node --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "node or web/node_modules/@huggingface/gguf missing (run npm ci in web/)";
  }
  TempDir tmp;
  std::string dir = MakeGpt2Dir(corpus, tmp);
  std::string out = tmp / "gpt2.gguf";
  ASSERT_TRUE(Export(dir, out, ExportFormat::kGguf, CastType::kF16).ok());
  std::string json_path = tmp / "read.json";
  std::string cmd = "node '" + tool + "' '" + out + "' > '" + json_path + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  nlohmann::json j = nlohmann::json::parse(testing::ReadFileBytes(json_path));
  auto reader = formats::GgufReader::Open(out, formats::GgufMode::kFull);
  ASSERT_TRUE(reader.ok());
  const formats::GgufHeader& h = reader->header();
  ASSERT_EQ(j["tensors"].size(), h.tensors.size());
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& t = j["tensors"][i];
    EXPECT_EQ(t["name"], h.tensors[i].name);
    EXPECT_EQ(t["dtype"].get<uint32_t>(), static_cast<uint32_t>(h.tensors[i].type));
    EXPECT_EQ(t["offset"].get<uint64_t>(), h.tensors[i].offset);
    EXPECT_EQ(t["shape"].get<std::vector<uint64_t>>(), h.tensors[i].dims);
  }
  EXPECT_EQ(j["metadata"]["general.architecture"], "gpt2");
  EXPECT_EQ(j["metadata"]["general.file_type"], 1);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["array_length"], 50257);
}

TEST(ExportGgufTest, LlamaQKPermutationMatchesTheConverterAndRoundTrips) {
  TempDir tmp;
  LlamaDims d;
  std::string dir = MakeLlamaDir(tmp, d, "LlamaForCausalLM");
  std::string out = tmp / "llama.gguf";
  auto report = Export(dir, out, ExportFormat::kGguf);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->arch, "llama");
  auto src = ModelTensors::Open(dir);
  auto got = ModelTensors::Open(out);
  ASSERT_TRUE(src.ok() && got.ok());
  // numpy: w.reshape(n, 2, rows/n/2, cols).swapaxes(1, 2).reshape(rows, cols), n = heads for
  // q and kv_heads for k (worked here by index arithmetic, independent of SourceRow).
  for (auto [hf, gg, n] : {std::tuple{"model.layers.0.self_attn.q_proj.weight",
                                      "blk.0.attn_q.weight", d.heads},
                           std::tuple{"model.layers.0.self_attn.k_proj.weight",
                                      "blk.0.attn_k.weight", d.kv_heads}}) {
    const ValueTensor* s = Find(*src, hf);
    const ValueTensor* g = Find(*got, gg);
    ASSERT_TRUE(s != nullptr && g != nullptr) << gg;
    std::vector<float> sv = Decode(*s), gv = Decode(*g);
    const uint64_t rows = s->shape[0], cols = s->shape[1], half = rows / n / 2;
    for (uint64_t h = 0; h < uint64_t(n); ++h) {
      for (uint64_t i = 0; i < half; ++i) {
        for (uint64_t j = 0; j < 2; ++j) {
          uint64_t out_row = h * (2 * half) + i * 2 + j;   // swapped (h, i, j)
          uint64_t src_row = h * (2 * half) + j * half + i;  // original (h, j, i)
          for (uint64_t c = 0; c < cols; ++c) {
            ASSERT_EQ(gv[out_row * cols + c], sv[src_row * cols + c]) << gg << " row " << out_row;
          }
        }
      }
    }
  }
  // Back to a Hugging Face directory: every tensor byte-identical to the source.
  std::string back = tmp / "llama-back";
  auto r2 = Export(out, back, ExportFormat::kSafetensors);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  auto again = ModelTensors::Open(back);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->tensors().size(), src->tensors().size());
  for (const ValueTensor& s : src->tensors()) {
    const ValueTensor* a = Find(*again, s.name);
    ASSERT_NE(a, nullptr) << s.name;
    EXPECT_EQ(a->shape, s.shape) << s.name;
    EXPECT_TRUE(std::equal(a->data.begin(), a->data.end(), s.data.begin(), s.data.end()))
        << s.name;
  }
  EXPECT_TRUE(fs::exists(back + "/config.json"));
}

// The corpus's real LlamaForCausalLM checkpoint (trl's tiny-random-LlamaForCausalLM: 4 heads,
// untied; it ships no tokenizer, so the tiny one above is added): HF -> GGUF -> HF gives every
// tensor back byte for byte, and q/k are permuted on the way.
TEST(ExportGgufTest, CorpusLlamaRoundTripsThroughGguf) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  std::string dir = tmp / "llama-tiny-random";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(corpus + "/llama-tiny-random")) {
    fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  WriteFileBytes(dir + "/tokenizer.json", TinyTokenizerJson());
  std::string gguf = tmp / "llama.gguf", back = tmp / "back";
  auto r = Export(dir, gguf, ExportFormat::kGguf);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->arch, "llama");
  auto r2 = Export(gguf, back, ExportFormat::kSafetensors);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  auto src = ModelTensors::Open(dir);
  auto g = ModelTensors::Open(gguf);
  auto again = ModelTensors::Open(back);
  ASSERT_TRUE(src.ok() && g.ok() && again.ok());
  ASSERT_EQ(again->tensors().size(), src->tensors().size());
  for (const ValueTensor& s : src->tensors()) {
    const ValueTensor* a = Find(*again, s.name);
    ASSERT_NE(a, nullptr) << s.name;
    EXPECT_TRUE(std::equal(a->data.begin(), a->data.end(), s.data.begin(), s.data.end()))
        << s.name;
  }
  const ValueTensor* q = Find(*src, "model.layers.0.self_attn.q_proj.weight");
  const ValueTensor* gq = Find(*g, "blk.0.attn_q.weight");
  ASSERT_TRUE(q != nullptr && gq != nullptr);
  EXPECT_FALSE(std::equal(q->data.begin(), q->data.end(), gq->data.begin(), gq->data.end()))
      << "q_proj must be permuted";
}

TEST(ExportGgufTest, TiedCheckpointWithOnlyLmHeadGivesTokenEmbd) {
  TempDir tmp;
  LlamaDims d;
  std::string dir = MakeLlamaDir(tmp, d, "Qwen2ForCausalLM", /*tied=*/true);
  // Rename the embedding to lm_head.weight: some tied checkpoints store only that one.
  auto m = ModelTensors::Open(dir);
  ASSERT_TRUE(m.ok());
  std::vector<formats::SafetensorsTensorView> views;
  for (const ValueTensor& t : m->tensors()) {
    auto dt = formats::ParseDType(t.dtype);
    ASSERT_TRUE(dt.ok());
    std::string name = t.name == "model.embed_tokens.weight" ? "lm_head.weight" : t.name;
    views.push_back({name, *dt, t.shape, t.data});
  }
  std::string dir2 = tmp / "qwen2-lm-head-only";
  fs::create_directories(dir2);
  fs::copy_file(dir + "/config.json", dir2 + "/config.json");
  fs::copy_file(dir + "/tokenizer.json", dir2 + "/tokenizer.json");
  ASSERT_TRUE(formats::WriteSafetensors(dir2 + "/model.safetensors", views).ok());
  for (const std::string& src : {dir, dir2}) {
    std::string out = src + ".gguf";
    auto report = Export(src, out, ExportFormat::kGguf);
    ASSERT_TRUE(report.ok()) << src << ": " << report.status().ToString();
    auto got = ModelTensors::Open(out);
    ASSERT_TRUE(got.ok());
    EXPECT_NE(Find(*got, "token_embd.weight"), nullptr) << src;
    EXPECT_EQ(Find(*got, "output.weight"), nullptr) << src;
  }
}

TEST(ExportGgufTest, QuantizedCastsWriteGgmlBlocksAndOneThreadEqualsTwo) {
  TempDir tmp;
  LlamaDims d;
  std::string dir = MakeLlamaDir(tmp, d, "MistralForCausalLM");
  for (CastType c : {CastType::kQ8_0, CastType::kQ4_0, CastType::kBF16}) {
    std::string a = tmp / ("one-" + std::string(CastTypeName(c)) + ".gguf");
    std::string b = tmp / ("two-" + std::string(CastTypeName(c)) + ".gguf");
    auto ra = Export(dir, a, ExportFormat::kGguf, c, 1);
    auto rb = Export(dir, b, ExportFormat::kGguf, c, 2);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status().ToString() << rb.status().ToString();
    EXPECT_EQ(testing::ReadFileBytes(a), testing::ReadFileBytes(b));
    auto reader = formats::GgufReader::Open(a, formats::GgufMode::kFull);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    for (const formats::GgufTensorInfo& t : reader->header().tensors) {
      if (t.dims.size() == 1) {
        EXPECT_EQ(t.type, formats::GgmlType::kF32) << t.name;  // norms stay F32
      } else {
        EXPECT_EQ(t.type, ToGgmlType(c)) << t.name;
      }
    }
    for (const ExportTensorReport& t : ra->tensors) {
      if (t.lossy) {
        EXPECT_LT(t.error.RelativeL2(), c == CastType::kQ4_0 ? 0.2 : 0.02) << t.name;
      }
    }
  }
}

TEST(ExportSafetensorsTest, GgufQuantizedTensorsAreDequantizedAndUnpermuted) {
  TempDir tmp;
  LlamaDims d;
  std::string dir = MakeLlamaDir(tmp, d, "LlamaForCausalLM");
  std::string gguf = tmp / "q8.gguf", back = tmp / "back";
  ASSERT_TRUE(Export(dir, gguf, ExportFormat::kGguf, CastType::kQ8_0).ok());
  auto r = Export(gguf, back, ExportFormat::kSafetensors);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto q = ModelTensors::Open(gguf);
  auto got = ModelTensors::Open(back);
  ASSERT_TRUE(q.ok() && got.ok());
  const ValueTensor* gq = Find(*q, "blk.0.attn_q.weight");
  const ValueTensor* hq = Find(*got, "model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(gq != nullptr && hq != nullptr);
  EXPECT_EQ(gq->dtype, "Q8_0");
  EXPECT_EQ(hq->dtype, "F32");  // no cast: Q8_0 cannot be held by safetensors, so F32
  std::vector<float> qv = Decode(*gq), hv = Decode(*hq);
  const uint64_t rows = hq->shape[0], cols = hq->shape[1];
  for (uint64_t row = 0; row < rows; ++row) {
    uint64_t from = SourceRow(RowTransform::kLlamaUnpermute, uint32_t(d.heads), rows, row);
    for (uint64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(hv[row * cols + c], qv[from * cols + c]) << "row " << row;
    }
  }
  // Permute then unpermute is the identity on row indices.
  for (uint64_t row = 0; row < rows; ++row) {
    EXPECT_EQ(SourceRow(RowTransform::kLlamaPermute, uint32_t(d.heads), rows,
                        SourceRow(RowTransform::kLlamaUnpermute, uint32_t(d.heads), rows, row)),
              row);
  }
}

// --- PyTorch ----------------------------------------------------------------------------------

// The checkpoint holds the same bytes as the safetensors export of the same cast; torch.load
// (weights_only) reads it when python3-torch is installed (else the stdlib-only checks run).
TEST(ExportPytorchTest, CheckpointMatchesTheSafetensorsExportAndReportsTheCastError) {
  TempDir tmp;
  std::string dir = MakeLlamaDir(tmp, LlamaDims{}, "LlamaForCausalLM");
  std::string bin = tmp / "pytorch_model.bin", st = tmp / "same.safetensors";
  auto r = Export(dir, bin, ExportFormat::kPytorch, CastType::kBF16);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(Export(dir, st, ExportFormat::kSafetensors, CastType::kBF16).ok());
  double worst = 0;
  for (const ExportTensorReport& t : r->tensors) {
    EXPECT_TRUE(t.lossy) << t.name;
    worst = std::max(worst, t.error.RelativeL2());
  }
  EXPECT_GT(worst, 0.0);  // BF16 rounds these values: the error is measured, not left at 0
  EXPECT_LT(worst, 0.01);
  auto same = ModelTensors::Open(st);
  ASSERT_TRUE(same.ok());
  nlohmann::json expect = {{"archive", "pytorch_model"}, {"tensors", nlohmann::json::array()}};
  for (const ExportTensorReport& t : r->tensors) {
    const ValueTensor* v = Find(*same, t.name);
    ASSERT_NE(v, nullptr);
    expect["tensors"].push_back({{"name", t.name}, {"dtype", "bfloat16"}, {"shape", v->shape},
                                 {"sha256", Sha256Hex(v->data)}, {"sum", nullptr}});
  }
  WriteFileBytes(tmp / "expect.json", expect.dump());
  const bool torch = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  std::string cmd = "/usr/bin/python3 '" + std::string(BLZ_SOURCE_DIR) +
                    "/tests/formats/export/torch_load_check.py' '" + bin + "' '" +
                    (tmp / "expect.json") + "' " + (torch ? "torch" : "stub");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  if (!torch) GTEST_SKIP() << "python3-torch not installed: checked without torch.load only";
}

// --- Errors -----------------------------------------------------------------------------------

TEST(ExportErrorsTest, UnknownArchitectureNamesTheKnownOnes) {
  TempDir tmp;
  std::string dir = MakeLlamaDir(tmp, LlamaDims{}, "FalconForCausalLM");
  auto r = Export(dir, tmp / "x.gguf", ExportFormat::kGguf);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("FalconForCausalLM"), std::string::npos);
  EXPECT_NE(r.status().message().find("LlamaForCausalLM"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp / "x.gguf"));
}

TEST(ExportErrorsTest, MissingTokenizerAndConfigAreNamed) {
  TempDir tmp;
  std::string dir = MakeLlamaDir(tmp, LlamaDims{}, "LlamaForCausalLM");
  fs::remove(dir + "/tokenizer.json");
  auto r = Export(dir, tmp / "x.gguf", ExportFormat::kGguf);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer"), std::string::npos) << r.status().message();
  fs::remove(dir + "/config.json");
  r = Export(dir, tmp / "x.gguf", ExportFormat::kGguf);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(tmp / "x.gguf"));
}

TEST(ExportErrorsTest, QuantizedCastToSafetensorsIsRefused) {
  TempDir tmp;
  std::string dir = MakeLlamaDir(tmp, LlamaDims{}, "LlamaForCausalLM");
  for (ExportFormat f : {ExportFormat::kSafetensors, ExportFormat::kPytorch}) {
    auto r = Export(dir, tmp / "out", f, CastType::kQ8_0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("GGUF"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

TEST(ExportErrorsTest, NaNInAQuantizedCastNamesTheTensorAndLeavesNothing) {
  TempDir tmp;
  std::string dir = tmp / "nan";
  fs::create_directories(dir);
  std::string bytes = FloatBytes(64, 0.2f);
  float nan = NAN;
  std::memcpy(&bytes[40 * 4], &nan, 4);
  ASSERT_TRUE(formats::WriteSafetensors(dir + "/model.safetensors",
                                        {{"bad.weight", formats::DType::kF32, {2, 32},
                                          AsBytes(bytes)}})
                  .ok());
  // GGUF -> GGUF needs a GGUF source: a safetensors one goes through the plain path.
  std::string gguf = tmp / "nan.gguf";
  formats::GgufHeader h;
  h.metadata.push_back({"general.architecture", formats::GgufValue::String("llama")});
  h.tensors.push_back({"bad.weight", {32, 2}, formats::GgmlType::kF32});
  ASSERT_TRUE(formats::AssignGgufOffsets(&h).ok());
  ByteSpan data = AsBytes(bytes);
  ASSERT_TRUE(formats::WriteGgufFile(gguf, h, std::span<const ByteSpan>(&data, 1), {}).ok());
  std::string out = tmp / "out.gguf";
  auto r = Export(gguf, out, ExportFormat::kGguf, CastType::kQ8_0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad.weight"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(out));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp.path())) left.push_back(e.path().filename());
  EXPECT_EQ(left.size(), 2u);  // nan/ and nan.gguf: no temporary file left behind
}

TEST(ExportErrorsTest, ExistingOutputIsRefusedAndKept) {
  TempDir tmp;
  std::string dir = MakeLlamaDir(tmp, LlamaDims{}, "LlamaForCausalLM");
  WriteFileBytes(tmp / "taken.gguf", "mine");
  auto r = Export(dir, tmp / "taken.gguf", ExportFormat::kGguf);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAlreadyExists);
  EXPECT_EQ(testing::ReadFileBytes(tmp / "taken.gguf"), "mine");
}

// --- safetensors ------------------------------------------------------------------------------

TEST(ExportSafetensorsTest, ShardsWithAnIndexAboveTheLimit) {
  TempDir tmp;
  std::string dir = MakeLlamaDir(tmp, LlamaDims{}, "LlamaForCausalLM");
  ExportOptions o;
  o.format = ExportFormat::kSafetensors;
  o.cast = CastType::kBF16;
  o.max_shard_bytes = 20000;
  std::string out = tmp / "sharded";
  auto r = ExportModel(dir, out, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out + "/tokenizer.json"));  // other files carried over
  auto index = formats::ParseShardIndex(testing::ReadFileBytes(out + "/model.safetensors.index.json"),
                                        "index");
  ASSERT_TRUE(index.ok());
  auto src = ModelTensors::Open(dir);
  auto got = ModelTensors::Open(out);  // checks every shard against the index
  ASSERT_TRUE(src.ok() && got.ok()) << got.status().ToString();
  EXPECT_EQ(index->weight_map.size(), src->tensors().size());
  size_t shards = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() == ".safetensors") ++shards;
  }
  EXPECT_GT(shards, 2u);
  for (const ValueTensor& s : src->tensors()) {
    const ValueTensor* g = Find(*got, s.name);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->dtype, "BF16");
    std::vector<float> sv = Decode(s), gv = Decode(*g);
    for (size_t k = 0; k < sv.size(); ++k) {
      ASSERT_EQ(formats::F32ToBF16(sv[k]), formats::F32ToBF16(gv[k])) << s.name;
    }
  }
}

TEST(ExportSafetensorsTest, GgufToSafetensorsToGgufKeepsF16TensorBytes) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  std::string dir = MakeGpt2Dir(corpus, tmp);
  std::string g1 = tmp / "a.gguf", st = tmp / "hf", g2 = tmp / "b.gguf";
  ASSERT_TRUE(Export(dir, g1, ExportFormat::kGguf, CastType::kF16).ok());
  auto r = Export(g1, st, ExportFormat::kSafetensors);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto r2 = Export(st, g2, ExportFormat::kGguf);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  auto a = formats::GgufReader::Open(g1, formats::GgufMode::kFull);
  auto b = formats::GgufReader::Open(g2, formats::GgufMode::kFull);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->header().tensors.size(), b->header().tensors.size());
  for (size_t i = 0; i < a->header().tensors.size(); ++i) {
    const auto& ta = a->header().tensors[i];
    size_t j = 0;
    while (j < b->header().tensors.size() && b->header().tensors[j].name != ta.name) ++j;
    ASSERT_LT(j, b->header().tensors.size()) << ta.name;
    EXPECT_EQ(ta.type, b->header().tensors[j].type) << ta.name;
    EXPECT_EQ(ta.dims, b->header().tensors[j].dims) << ta.name;
    ByteSpan da = a->TensorData(i), db = b->TensorData(j);
    EXPECT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end())) << ta.name;
  }
}

}  // namespace
}  // namespace blz::exporter
