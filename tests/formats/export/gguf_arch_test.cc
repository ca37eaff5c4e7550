// HF <-> GGUF planning of formats/export/gguf_arch.h: the corpus GPT-2, synthetic Llama /
// Mistral / Qwen2 checkpoints (GQA, tied and untied), the q/k row permutation (by hand and
// against numpy when available), one bad input per rejection path, and the round trip
// PlanGgufToHf(PlanHfToGguf(x)).
#include "formats/export/gguf_arch.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "tests/test_util.h"

namespace blz::exporter {
namespace {

using formats::FindGgufValue;
using formats::GgufHeader;
using formats::GgufKv;
using formats::GgufValue;

const GgufValue* Find(const GgufModelPlan& plan, const std::string& key) {
  for (const GgufKv& kv : plan.metadata) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensorPlan* FindTensor(const GgufModelPlan& plan, const std::string& gguf_name) {
  for (const GgufTensorPlan& t : plan.tensors) {
    if (t.gguf_name == gguf_name) return &t;
  }
  return nullptr;
}

std::vector<std::string> Keys(const GgufModelPlan& plan) {
  std::vector<std::string> keys;
  for (const GgufKv& kv : plan.metadata) keys.push_back(kv.key);
  return keys;
}

// A tiny byte-level BPE tokenizer.json with `n` tokens "t0".."t{n-1}".
std::string ByteLevelTokenizer(int n) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < n; ++i) vocab["t" + std::to_string(i)] = i;
  nlohmann::json tok = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"t t0", "t0 t1"}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", nlohmann::json::array()},
  };
  return tok.dump();
}

struct DecoderCfg {
  std::string arch = "LlamaForCausalLM";
  int hidden = 16, heads = 4, kv_heads = 2, layers = 2, ff = 32, vocab = 8;
  const char* tie = nullptr;  // "true" / "false" / nullptr (absent)
  bool bias = false;          // q/k/v biases (qwen2)
  bool embed = true, lm_head = true;
};

HfModelInfo Decoder(const DecoderCfg& c) {
  HfModelInfo m;
  m.name = "tiny";
  nlohmann::json cfg = {{"architectures", {c.arch}},
                        {"hidden_size", c.hidden},
                        {"intermediate_size", c.ff},
                        {"num_attention_heads", c.heads},
                        {"num_key_value_heads", c.kv_heads},
                        {"num_hidden_layers", c.layers},
                        {"max_position_embeddings", 128},
                        {"rms_norm_eps", 1e-6},
                        {"rope_theta", 10000.0},
                        {"rope_scaling", nullptr},
                        {"vocab_size", c.vocab},
                        {"bos_token_id", 1},
                        {"eos_token_id", 2}};
  if (c.tie != nullptr) cfg["tie_word_embeddings"] = std::string(c.tie) == "true";
  m.config_json = cfg.dump();
  m.files["tokenizer.json"] = ByteLevelTokenizer(c.vocab);
  const uint64_t hd = static_cast<uint64_t>(c.hidden / c.heads);
  const uint64_t h = static_cast<uint64_t>(c.hidden), kv = hd * static_cast<uint64_t>(c.kv_heads);
  if (c.embed) m.tensors.push_back({"model.embed_tokens.weight", {uint64_t(c.vocab), h}});
  for (int b = 0; b < c.layers; ++b) {
    std::string p = "model.layers." + std::to_string(b) + ".";
    m.tensors.push_back({p + "input_layernorm.weight", {h}});
    m.tensors.push_back({p + "self_attn.q_proj.weight", {h, h}});
    m.tensors.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    m.tensors.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    if (c.bias) {
      m.tensors.push_back({p + "self_attn.q_proj.bias", {h}});
      m.tensors.push_back({p + "self_attn.k_proj.bias", {kv}});
      m.tensors.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    m.tensors.push_back({p + "self_attn.o_proj.weight", {h, h}});
    m.tensors.push_back({p + "post_attention_layernorm.weight", {h}});
    m.tensors.push_back({p + "mlp.gate_proj.weight", {uint64_t(c.ff), h}});
    m.tensors.push_back({p + "mlp.up_proj.weight", {uint64_t(c.ff), h}});
    m.tensors.push_back({p + "mlp.down_proj.weight", {h, uint64_t(c.ff)}});
  }
  m.tensors.push_back({"model.norm.weight", {h}});
  if (c.lm_head) m.tensors.push_back({"lm_head.weight", {uint64_t(c.vocab), h}});
  return m;
}

// A GGUF header as the lead's pipeline would write it from `plan` (F32 tensors).
GgufHeader HeaderOf(const GgufModelPlan& plan) {
  GgufHeader h;
  h.metadata = plan.metadata;
  for (const GgufTensorPlan& t : plan.tensors) {
    formats::GgufTensorInfo info;
    info.name = t.gguf_name;
    info.dims.assign(t.shape.rbegin(), t.shape.rend());
    info.type = formats::GgmlType::kF32;
    h.tensors.push_back(info);
  }
  return h;
}

// ---- GPT-2 from the corpus ----------------------------------------------------------------

HfModelInfo CorpusGpt2(const std::string& corpus, bool with_tokenizer_json) {
  HfModelInfo m;
  m.name = "base";
  m.config_json = testing::ReadFileBytes(corpus + "/tiny-gpt2/base/config.json");
  auto st = formats::SafetensorsFile::Open(corpus + "/tiny-gpt2/base/model.safetensors");
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (st.ok()) {
    for (const auto& t : st->tensors()) m.tensors.push_back({t.name, t.shape});
  }
  const std::string tok = corpus + "/tokenizers/gpt2/";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                        "special_tokens_map.json", "generation_config.json"}) {
    if (!with_tokenizer_json && std::string(f) == "tokenizer.json") continue;
    m.files[f] = testing::ReadFileBytes(tok + f);
  }
  return m;
}

TEST(GgufArchGpt2, CorpusModelMapsEveryTensor) {
  BLZ_REQUIRE_CORPUS(corpus);
  HfModelInfo m = CorpusGpt2(corpus, true);
  ASSERT_EQ(m.tensors.size(), 28u);
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->arch, "gpt2");
  ASSERT_EQ(plan->tensors.size(), 28u);  // every tensor mapped, tied: no output.weight
  EXPECT_EQ(FindTensor(*plan, "output.weight"), nullptr);
  const char* expected[] = {"token_embd.weight", "position_embd.weight", "output_norm.weight",
                            "output_norm.bias"};
  for (const char* n : expected) EXPECT_NE(FindTensor(*plan, n), nullptr) << n;
  for (int b = 0; b < 2; ++b) {
    std::string p = "blk." + std::to_string(b) + ".";
    for (const char* s : {"attn_norm.weight", "attn_norm.bias", "attn_qkv.weight", "attn_qkv.bias",
                          "attn_output.weight", "attn_output.bias", "ffn_norm.weight",
                          "ffn_norm.bias", "ffn_up.weight", "ffn_up.bias", "ffn_down.weight",
                          "ffn_down.bias"}) {
      EXPECT_NE(FindTensor(*plan, p + s), nullptr) << p + s;
    }
  }
  const GgufTensorPlan* qkv = FindTensor(*plan, "blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->hf_name, "transformer.h.0.attn.c_attn.weight");
  EXPECT_TRUE(qkv->transpose);
  EXPECT_EQ(qkv->shape, (std::vector<uint64_t>{6, 2}));  // HF [2, 6] transposed
  EXPECT_EQ(qkv->type, CastType::kF16);
  EXPECT_FALSE(FindTensor(*plan, "blk.0.attn_qkv.bias")->transpose);
  EXPECT_TRUE(FindTensor(*plan, "blk.0.attn_qkv.bias")->keep_f32);
  EXPECT_TRUE(FindTensor(*plan, "position_embd.weight")->keep_f32);
  EXPECT_TRUE(FindTensor(*plan, "blk.1.ffn_norm.weight")->keep_f32);
  EXPECT_FALSE(FindTensor(*plan, "token_embd.weight")->keep_f32);
  EXPECT_EQ(FindTensor(*plan, "blk.0.ffn_down.weight")->shape, (std::vector<uint64_t>{2, 8}));

  EXPECT_EQ(*Find(*plan, "general.architecture")->AsString(), "gpt2");
  EXPECT_EQ(*Find(*plan, "general.name")->AsString(), "base");
  EXPECT_EQ(Find(*plan, "gpt2.block_count")->AsUInt(), 2u);
  EXPECT_EQ(Find(*plan, "gpt2.context_length")->AsUInt(), 1024u);
  EXPECT_EQ(Find(*plan, "gpt2.embedding_length")->AsUInt(), 2u);
  EXPECT_EQ(Find(*plan, "gpt2.feed_forward_length")->AsUInt(), 8u);
  EXPECT_EQ(Find(*plan, "gpt2.attention.head_count")->AsUInt(), 2u);
  EXPECT_EQ(Find(*plan, "gpt2.attention.layer_norm_epsilon")->type, formats::GgufType::kFloat32);
  EXPECT_FLOAT_EQ(static_cast<float>(*Find(*plan, "gpt2.attention.layer_norm_epsilon")->AsFloat()),
                  1e-5f);
  EXPECT_EQ(Find(*plan, "general.file_type")->AsUInt(), 1u);
  EXPECT_EQ(Find(*plan, "general.quantization_version")->AsUInt(), 2u);
  EXPECT_EQ(*Find(*plan, "tokenizer.ggml.model")->AsString(), "gpt2");
  EXPECT_EQ(*Find(*plan, "tokenizer.ggml.pre")->AsString(), "gpt-2");
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.tokens")->count, 50257u);
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.token_type")->count, 50257u);
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.merges")->count, 50000u);
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.bos_token_id")->AsUInt(), 50256u);
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.eos_token_id")->AsUInt(), 50256u);
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.add_bos_token")->AsBool(), false);
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.token_type")->Item(50256).AsInt(), 3);  // CONTROL
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.token_type")->Item(0).AsInt(), 1);
  // The converter's order: general.*, gpt2.* with file_type last, quantization version, tokenizer.
  std::vector<std::string> keys = Keys(*plan);
  ASSERT_GE(keys.size(), 13u);
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 13),
            (std::vector<std::string>{"general.architecture", "general.type", "general.name",
                                      "gpt2.block_count", "gpt2.context_length",
                                      "gpt2.embedding_length", "gpt2.feed_forward_length",
                                      "gpt2.attention.head_count",
                                      "gpt2.attention.layer_norm_epsilon", "general.file_type",
                                      "general.quantization_version", "tokenizer.ggml.model",
                                      "tokenizer.ggml.pre"}));
  // The metadata and tensor infos encode as a valid GGUF header.
  GgufHeader header = HeaderOf(*plan);
  ASSERT_TRUE(formats::AssignGgufOffsets(&header).ok());
  auto encoded = formats::EncodeGgufHeader(header);
  EXPECT_TRUE(encoded.ok()) << encoded.status().ToString();
}

// The tokens, types and merges equal what llama.cpp's converter wrote for the GPT-2 tokenizer
// (../shared/corpus/gguf/ggml-vocab-gpt-2.gguf, written by convert_hf_to_gguf.py).
TEST(GgufArchGpt2, TokenizerMatchesLlamaCppVocabFile) {
  BLZ_REQUIRE_CORPUS(corpus);
  std::string ref_path = corpus + "/gguf/ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(ref_path)) GTEST_SKIP() << ref_path << " not found";
  auto ref = formats::GgufReader::Open(ref_path, formats::GgufMode::kHeaderOnly);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto plan = PlanHfToGguf(CorpusGpt2(corpus, true), CastType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                          "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                          "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    const GgufValue* want = FindGgufValue(ref->header(), key);
    ASSERT_NE(want, nullptr) << key;
    ASSERT_NE(Find(*plan, key), nullptr) << key;
    EXPECT_TRUE(*Find(*plan, key) == *want) << key;
  }
}

TEST(GgufArchGpt2, VocabJsonAndMergesTxtWithoutTokenizerJson) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto with = PlanHfToGguf(CorpusGpt2(corpus, true), CastType::kF32);
  auto without = PlanHfToGguf(CorpusGpt2(corpus, false), CastType::kF32);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                          "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                          "tokenizer.ggml.eos_token_id"}) {
    ASSERT_NE(Find(*without, key), nullptr) << key;
    EXPECT_TRUE(*Find(*with, key) == *Find(*without, key)) << key;
  }
}

TEST(GgufArchGpt2, NamesWithoutPrefixAndAttentionBuffers) {
  BLZ_REQUIRE_CORPUS(corpus);
  HfModelInfo m = CorpusGpt2(corpus, true);
  for (auto& t : m.tensors) t.name = t.name.substr(std::string("transformer.").size());
  m.tensors.push_back({"h.0.attn.bias", {1, 1, 1024, 1024}});
  m.tensors.push_back({"transformer.h.1.attn.masked_bias", {}});
  auto plan = PlanHfToGguf(m, CastType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->tensors.size(), 28u);  // the two buffers are skipped
  EXPECT_EQ(FindTensor(*plan, "blk.1.ffn_down.weight")->hf_name, "h.1.mlp.c_proj.weight");
  EXPECT_EQ(FindTensor(*plan, "token_embd.weight")->hf_name, "wte.weight");
}

TEST(GgufArchGpt2, RoundTripGivesBackHfNames) {
  BLZ_REQUIRE_CORPUS(corpus);
  HfModelInfo m = CorpusGpt2(corpus, true);
  auto plan = PlanHfToGguf(m, CastType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto back = PlanGgufToHf(HeaderOf(*plan));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->tensors.size(), plan->tensors.size());
  for (size_t i = 0; i < plan->tensors.size(); ++i) {
    EXPECT_EQ(back->tensors[i].hf_name, plan->tensors[i].hf_name);
    EXPECT_EQ(back->tensors[i].transpose, plan->tensors[i].transpose);
  }
  auto cfg = nlohmann::json::parse(back->config_json);
  EXPECT_EQ(cfg["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["n_embd"], 2);
  EXPECT_EQ(cfg["n_layer"], 2);
  EXPECT_EQ(cfg["n_head"], 2);
  EXPECT_EQ(cfg["n_ctx"], 1024);
  EXPECT_TRUE(cfg["n_inner"].is_null());
  EXPECT_EQ(cfg["vocab_size"], 50257);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  EXPECT_EQ(cfg["bos_token_id"], 50256);
  ASSERT_EQ(back->extra_files.count("vocab.json"), 1u);
  auto vocab = nlohmann::json::parse(back->extra_files["vocab.json"]);
  EXPECT_EQ(vocab.size(), 50257u);
  EXPECT_EQ(vocab["<|endoftext|>"], 50256);
  EXPECT_EQ(back->extra_files["merges.txt"],
            testing::ReadFileBytes(corpus + "/tokenizers/gpt2/merges.txt"));
}

// ---- Llama / Mistral / Qwen2 -----------------------------------------------------------------

TEST(GgufArchLlama, GqaUntiedPlan) {
  DecoderCfg c;  // 4 heads, 2 kv heads, head_dim 4
  auto plan = PlanHfToGguf(Decoder(c), CastType::kQ8_0);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->arch, "llama");
  EXPECT_EQ(plan->tensors.size(), Decoder(c).tensors.size());
  const GgufTensorPlan* q = FindTensor(*plan, "blk.1.attn_q.weight");
  const GgufTensorPlan* k = FindTensor(*plan, "blk.1.attn_k.weight");
  const GgufTensorPlan* v = FindTensor(*plan, "blk.1.attn_v.weight");
  ASSERT_TRUE(q && k && v);
  EXPECT_EQ(q->hf_name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q->permute, RowPermute::kLlamaQK);
  EXPECT_EQ(q->permute_heads, 4u);
  EXPECT_EQ(k->permute, RowPermute::kLlamaQK);
  EXPECT_EQ(k->permute_heads, 2u);
  EXPECT_EQ(v->permute, RowPermute::kNone);
  EXPECT_EQ(FindTensor(*plan, "output.weight")->hf_name, "lm_head.weight");
  EXPECT_EQ(FindTensor(*plan, "token_embd.weight")->hf_name, "model.embed_tokens.weight");
  EXPECT_EQ(FindTensor(*plan, "output_norm.weight")->hf_name, "model.norm.weight");
  EXPECT_EQ(FindTensor(*plan, "blk.0.ffn_gate.weight")->hf_name,
            "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(FindTensor(*plan, "blk.0.ffn_norm.weight")->hf_name,
            "model.layers.0.post_attention_layernorm.weight");
  // Rows of 16 are not a multiple of 32: the converter falls back to F16 for Q8_0.
  EXPECT_EQ(q->type, CastType::kF16);
  EXPECT_EQ(FindTensor(*plan, "blk.0.ffn_down.weight")->type, CastType::kQ8_0);  // rows of 32
  EXPECT_EQ(FindTensor(*plan, "blk.0.attn_norm.weight")->type, CastType::kF32);
  EXPECT_EQ(Find(*plan, "llama.attention.head_count")->AsUInt(), 4u);
  EXPECT_EQ(Find(*plan, "llama.attention.head_count_kv")->AsUInt(), 2u);
  EXPECT_EQ(Find(*plan, "llama.rope.dimension_count")->AsUInt(), 4u);
  EXPECT_EQ(Find(*plan, "llama.vocab_size")->AsUInt(), 8u);
  EXPECT_EQ(Find(*plan, "llama.context_length")->AsUInt(), 128u);
  EXPECT_EQ(Find(*plan, "llama.rope.freq_base")->type, formats::GgufType::kFloat32);
  EXPECT_EQ(Find(*plan, "general.file_type")->AsUInt(), 7u);
  EXPECT_EQ(*Find(*plan, "tokenizer.ggml.pre")->AsString(), "llama-bpe");
  EXPECT_EQ(Find(*plan, "tokenizer.ggml.bos_token_id")->AsUInt(), 1u);
  std::vector<std::string> keys = Keys(*plan);
  std::vector<std::string> want = {"general.architecture", "general.type", "general.name",
                                   "llama.block_count", "llama.context_length",
                                   "llama.embedding_length", "llama.feed_forward_length",
                                   "llama.attention.head_count", "llama.attention.head_count_kv",
                                   "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon",
                                   "general.file_type", "llama.vocab_size",
                                   "llama.rope.dimension_count", "general.quantization_version"};
  ASSERT_GE(keys.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + want.size()), want);
}

TEST(GgufArchLlama, MistralIsLlama) {
  DecoderCfg c;
  c.arch = "MistralForCausalLM";
  auto plan = PlanHfToGguf(Decoder(c), CastType::kF16);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->arch, "llama");
  EXPECT_EQ(*Find(*plan, "general.architecture")->AsString(), "llama");
  EXPECT_EQ(FindTensor(*plan, "blk.0.attn_k.weight")->permute_heads, 2u);
}

TEST(GgufArchQwen2, BiasesNoPermutationAndTiedVariants) {
  DecoderCfg c;
  c.arch = "Qwen2ForCausalLM";
  c.bias = true;
  c.tie = "true";
  // Both present: the lm_head copy is dropped.
  auto both = PlanHfToGguf(Decoder(c), CastType::kBF16);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(both->arch, "qwen2");
  EXPECT_EQ(FindTensor(*both, "output.weight"), nullptr);
  EXPECT_EQ(FindTensor(*both, "token_embd.weight")->hf_name, "model.embed_tokens.weight");
  EXPECT_EQ(FindTensor(*both, "blk.0.attn_q.weight")->permute, RowPermute::kNone);
  EXPECT_EQ(FindTensor(*both, "blk.0.attn_k.bias")->hf_name, "model.layers.0.self_attn.k_proj.bias");
  EXPECT_TRUE(FindTensor(*both, "blk.0.attn_v.bias")->keep_f32);
  EXPECT_EQ(Find(*both, "general.file_type")->AsUInt(), 32u);
  EXPECT_EQ(Find(*both, "qwen2.vocab_size"), nullptr);  // the converter writes none for qwen2
  EXPECT_EQ(*Find(*both, "tokenizer.ggml.pre")->AsString(), "qwen2");
  // Embedding only.
  c.lm_head = false;
  auto embed_only = PlanHfToGguf(Decoder(c), CastType::kF32);
  ASSERT_TRUE(embed_only.ok()) << embed_only.status().ToString();
  EXPECT_EQ(FindTensor(*embed_only, "output.weight"), nullptr);
  EXPECT_EQ(FindTensor(*embed_only, "token_embd.weight")->hf_name, "model.embed_tokens.weight");
  // lm_head only: it becomes the token embedding.
  c.lm_head = true;
  c.embed = false;
  auto head_only = PlanHfToGguf(Decoder(c), CastType::kF32);
  ASSERT_TRUE(head_only.ok()) << head_only.status().ToString();
  EXPECT_EQ(FindTensor(*head_only, "output.weight"), nullptr);
  ASSERT_NE(FindTensor(*head_only, "token_embd.weight"), nullptr);
  EXPECT_EQ(FindTensor(*head_only, "token_embd.weight")->hf_name, "lm_head.weight");
  EXPECT_EQ(head_only->tensors.size(), Decoder(c).tensors.size());
  // Untied (the Qwen2Config default when config.json does not say): output.weight is written.
  c.tie = nullptr;
  c.embed = true;
  auto untied = PlanHfToGguf(Decoder(c), CastType::kF32);
  ASSERT_TRUE(untied.ok()) << untied.status().ToString();
  EXPECT_NE(FindTensor(*untied, "output.weight"), nullptr);
}

TEST(GgufArchLlama, RoundTripGivesBackNamesAndInversePermutation) {
  for (const char* arch : {"LlamaForCausalLM", "Qwen2ForCausalLM"}) {
    for (const char* tie : {"true", "false"}) {
      DecoderCfg c;
      c.arch = arch;
      c.tie = tie;
      c.bias = std::string(arch) == "Qwen2ForCausalLM";
      c.lm_head = std::string(tie) == "false";
      HfModelInfo m = Decoder(c);
      auto plan = PlanHfToGguf(m, CastType::kF16);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      auto back = PlanGgufToHf(HeaderOf(*plan));
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      ASSERT_EQ(back->tensors.size(), m.tensors.size()) << arch << " " << tie;
      for (size_t i = 0; i < m.tensors.size(); ++i) {
        EXPECT_EQ(back->tensors[i].hf_name, m.tensors[i].name);
        EXPECT_EQ(back->tensors[i].permute, plan->tensors[i].permute);
        EXPECT_EQ(back->tensors[i].permute_heads, plan->tensors[i].permute_heads);
        // Applying the inverse after the forward permutation gives every row back.
        const uint64_t rows = m.tensors[i].shape[0];
        for (uint64_t r = 0; r < rows; ++r) {
          uint64_t gguf_row = PermutedSourceRow(plan->tensors[i].permute,
                                                plan->tensors[i].permute_heads, rows, r, true);
          EXPECT_EQ(PermutedSourceRow(back->tensors[i].permute, back->tensors[i].permute_heads,
                                      rows, gguf_row, false),
                    r);
        }
      }
      auto cfg = nlohmann::json::parse(back->config_json);
      EXPECT_EQ(cfg["architectures"][0], arch);
      EXPECT_EQ(cfg["hidden_size"], 16);
      EXPECT_EQ(cfg["intermediate_size"], 32);
      EXPECT_EQ(cfg["num_attention_heads"], 4);
      EXPECT_EQ(cfg["num_key_value_heads"], 2);
      EXPECT_EQ(cfg["num_hidden_layers"], 2);
      EXPECT_EQ(cfg["max_position_embeddings"], 128);
      EXPECT_EQ(cfg["vocab_size"], 8);
      EXPECT_EQ(cfg["tie_word_embeddings"], std::string(tie) == "true");
      EXPECT_EQ(cfg["torch_dtype"], "float32");
      EXPECT_FLOAT_EQ(cfg["rms_norm_eps"].get<float>(), 1e-6f);
      EXPECT_FALSE(cfg.contains("head_dim"));  // 16 / 4 = 4 = rope.dimension_count
    }
  }
}

TEST(GgufArchLlama, CorpusLlamaTinyRandomNeedsTokenizer) {
  BLZ_REQUIRE_CORPUS(corpus);
  HfModelInfo m;
  m.name = "llama-tiny-random";
  m.config_json = testing::ReadFileBytes(corpus + "/llama-tiny-random/config.json");
  auto st = formats::SafetensorsFile::Open(corpus + "/llama-tiny-random/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  for (const auto& t : st->tensors()) m.tensors.push_back({t.name, t.shape});
  auto plan = PlanHfToGguf(m, CastType::kF16);  // the corpus holds no tokenizer for it
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("no tokenizer.json or vocab.json + merges.txt in "
                                         "llama-tiny-random"),
            std::string::npos)
      << plan.status().message();
  m.files["tokenizer.json"] = ByteLevelTokenizer(32000);
  plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->tensors.size(), 21u);
  EXPECT_EQ(FindTensor(*plan, "blk.1.attn_q.weight")->permute_heads, 4u);
  EXPECT_EQ(Find(*plan, "llama.rope.dimension_count")->AsUInt(), 4u);
}

// ---- Row permutation ----------------------------------------------------------------------

TEST(GgufArchPermute, HandWorkedExample) {
  // rows 12, 2 heads: per head 6 rows = (2, 3) -> (3, 2): 0 3 1 4 2 5 | 6 9 7 10 8 11.
  const uint64_t want[12] = {0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11};
  for (uint64_t r = 0; r < 12; ++r) {
    EXPECT_EQ(PermutedSourceRow(RowPermute::kLlamaQK, 2, 12, r, false), want[r]) << r;
    EXPECT_EQ(PermutedSourceRow(RowPermute::kLlamaQK, 2, 12, want[r], true), r) << r;
    EXPECT_EQ(PermutedSourceRow(RowPermute::kNone, 2, 12, r, false), r);
  }
  // rows 8, 2 heads: 0 2 1 3 4 6 5 7.
  const uint64_t want8[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (uint64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(PermutedSourceRow(RowPermute::kLlamaQK, 2, 8, r, false), want8[r]);
  }
}

TEST(GgufArchPermute, InverseOfForwardIsIdentity) {
  for (uint32_t heads : {1u, 2u, 3u, 4u, 8u}) {
    for (uint64_t per_head : {2u, 4u, 6u, 64u}) {
      const uint64_t rows = heads * per_head;
      std::vector<bool> hit(rows, false);
      for (uint64_t r = 0; r < rows; ++r) {
        uint64_t s = PermutedSourceRow(RowPermute::kLlamaQK, heads, rows, r, false);
        ASSERT_LT(s, rows);
        EXPECT_FALSE(hit[s]);  // a permutation: every source row once
        hit[s] = true;
        EXPECT_EQ(PermutedSourceRow(RowPermute::kLlamaQK, heads, rows, s, true), r);
      }
    }
  }
}

TEST(GgufArchPermute, MatchesNumpy) {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "numpy is not available to /usr/bin/python3; the hand-worked example and "
                    "the inverse test cover the permutation";
  }
  struct Case {
    uint32_t heads;
    uint64_t rows;
  };
  for (Case c : {Case{2, 12}, Case{4, 32}, Case{3, 18}, Case{8, 128}}) {
    std::string cmd = "/usr/bin/python3 -c 'import numpy as np; h=" + std::to_string(c.heads) +
                      "; r=" + std::to_string(c.rows) +
                      "; w=np.arange(r*3).reshape(r,3); "
                      "o=w.reshape(h,2,r//h//2,3).swapaxes(1,2).reshape(r,3); "
                      "print(\" \".join(str(x) for x in o[:,0]//3))'";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << cmd;
    std::istringstream in(out);
    for (uint64_t r = 0; r < c.rows; ++r) {
      uint64_t src = 0;
      ASSERT_TRUE(in >> src);
      EXPECT_EQ(PermutedSourceRow(RowPermute::kLlamaQK, c.heads, c.rows, r, false), src);
    }
  }
}

// ---- Rejections ---------------------------------------------------------------------------

TEST(GgufArchErrors, UnknownArchitecture) {
  DecoderCfg c;
  c.arch = "BertForMaskedLM";
  auto plan = PlanHfToGguf(Decoder(c), CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kUnsupported);
  EXPECT_EQ(plan.status().message(),
            "architecture 'BertForMaskedLM' is not supported for GGUF export (known: "
            "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)");
}

TEST(GgufArchErrors, MissingTokenizer) {
  HfModelInfo m = Decoder(DecoderCfg());
  m.files.clear();
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "no tokenizer.json or vocab.json + merges.txt in tiny");
}

TEST(GgufArchErrors, MissingOrMistypedConfigField) {
  HfModelInfo m = Decoder(DecoderCfg());
  auto cfg = nlohmann::json::parse(m.config_json);
  cfg.erase("hidden_size");
  m.config_json = cfg.dump();
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("'hidden_size'"), std::string::npos)
      << plan.status().message();
  cfg["hidden_size"] = "16";
  m.config_json = cfg.dump();
  plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("field 'hidden_size' must be"), std::string::npos)
      << plan.status().message();
  m.config_json = "{not json";
  plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kCorruption);
}

// Found by fuzz_hf_plan (docs/fuzzing.md): without config.json's vocab_size, llama.vocab_size
// came from the embedding's rows (8) while the token list came from the tokenizer (10 tokens),
// a GGUF that does not load and whose config.json did not plan back to GGUF.
TEST(GgufArchErrors, TokenCountDiffersFromEmbeddingRowsWithoutVocabSize) {
  HfModelInfo m = Decoder(DecoderCfg());
  m.files["tokenizer.json"] = ByteLevelTokenizer(10);
  auto cfg = nlohmann::json::parse(m.config_json);
  cfg.erase("vocab_size");
  m.config_json = cfg.dump();
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("the tokenizer has 10 tokens but llama.vocab_size is 8"),
            std::string::npos)
      << plan.status().message();
  // With as many tokens as rows, the same config plans, and its GGUF plans back.
  m.files["tokenizer.json"] = ByteLevelTokenizer(8);
  plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(Find(*plan, "llama.vocab_size")->AsUInt(), 8u);
}

// Found by fuzz_hf_plan (2026-11-27): a float hyperparameter past float32's range became
// infinity in the GGUF, and the config.json planned back from that GGUF had no value for it
// (JSON has no infinity), so it no longer planned. Such a config is refused, naming the field.
TEST(GgufArchErrors, FloatHyperparameterPastFloat32IsRefused) {
  HfModelInfo m = Decoder(DecoderCfg());
  auto cfg = nlohmann::json::parse(m.config_json);
  for (double bad : {1e205, -1e39}) {
    cfg["rms_norm_eps"] = bad;
    m.config_json = cfg.dump();
    auto plan = PlanHfToGguf(m, CastType::kF16);
    ASSERT_FALSE(plan.ok()) << bad;
    EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
    EXPECT_NE(plan.status().message().find("field 'rms_norm_eps' = " + cfg["rms_norm_eps"].dump() +
                                           " does not fit a GGUF float32"),
              std::string::npos)
        << plan.status().message();
  }
  cfg["rms_norm_eps"] = 3e38;  // inside the range: planned
  m.config_json = cfg.dump();
  EXPECT_TRUE(PlanHfToGguf(m, CastType::kF16).ok());
}

TEST(GgufArchErrors, HeadsDoNotDivideRows) {
  DecoderCfg c;
  HfModelInfo m = Decoder(c);
  for (auto& t : m.tensors) {
    if (t.name == "model.layers.0.self_attn.q_proj.weight") t.shape = {12, 16};  // 12 % 8 != 0
  }
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "tensor 'model.layers.0.self_attn.q_proj.weight': 12 rows are not divisible by 2 x "
            "4 heads (num_attention_heads)");
}

TEST(GgufArchErrors, UnmappableTensor) {
  HfModelInfo m = Decoder(DecoderCfg());
  m.tensors.push_back({"model.layers.0.self_attn.rotary.weight", {4}});
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kUnsupported);
  EXPECT_EQ(plan.status().message(),
            "tensor 'model.layers.0.self_attn.rotary.weight' has no GGUF name for architecture "
            "'llama' (LlamaForCausalLM)");
}

TEST(GgufArchErrors, BlockBeyondBlockCount) {
  HfModelInfo m = Decoder(DecoderCfg());
  m.tensors.push_back({"model.layers.7.input_layernorm.weight", {16}});
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("block 7 is not below block_count 2"), std::string::npos)
      << plan.status().message();
}

TEST(GgufArchErrors, UntiedWithoutLmHead) {
  DecoderCfg c;
  c.tie = "false";
  c.lm_head = false;
  auto plan = PlanHfToGguf(Decoder(c), CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("no lm_head.weight"), std::string::npos);
}

TEST(GgufArchErrors, RopeScalingIsRefused) {
  HfModelInfo m = Decoder(DecoderCfg());
  auto cfg = nlohmann::json::parse(m.config_json);
  cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  m.config_json = cfg.dump();
  auto plan = PlanHfToGguf(m, CastType::kF16);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kUnsupported);
}

TEST(GgufArchErrors, ReverseUnknownArchAndTensor) {
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String("bert")});
  auto plan = PlanGgufToHf(h);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kUnsupported);
  auto fwd = PlanHfToGguf(Decoder(DecoderCfg()), CastType::kF32);
  ASSERT_TRUE(fwd.ok());
  h = HeaderOf(*fwd);
  h.tensors.push_back({"blk.0.attn_sinks.weight", {4}, formats::GgmlType::kF32, 0, 0});
  plan = PlanGgufToHf(h);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("'blk.0.attn_sinks.weight'"), std::string::npos);
}

}  // namespace
}  // namespace blz::exporter
