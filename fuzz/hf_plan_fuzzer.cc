// fuzz_hf_plan: the Hugging Face -> GGUF planning of `blz export --format gguf`
// (formats/export/gguf_arch.h PlanHfToGguf, gguf_tokenizer.h ConvertHfTokenizer) on fuzzed
// config.json and tokenizer files, and the way back (PlanGgufToHf, RebuildHfTokenizerFiles).
//
// Input: byte 0 options (bits 0-2 the cast, modulo 5; bit 3 an lm_head.weight tensor; bit 4
// q/k/v biases; bit 5 GPT-2 names without the "transformer." prefix; bit 6 the tokenizer
// defaults of a Llama table row (try_llama_hf, pre "llama-bpe") for the direct
// ConvertHfTokenizer call, else GPT-2's; bit 7 a model.rotary_emb.inv_freq buffer, which the
// planner skips), bytes 1-2 the config.json length n (u16 LE, cut to what is left), n bytes of
// config.json, then the tokenizer files separated by NUL bytes (no JSON text holds a raw NUL):
// tokenizer.json, tokenizer_config.json, vocab.json, merges.txt, special_tokens_map.json,
// added_tokens.json; an empty part is an absent file.
// The tensor list is built from the config (architectures[0] containing "GPT2" gives GPT-2
// names, anything else Llama names; dims from the usual keys, clamped to 1..4096, layers to
// 1..4), so the planner gets past its shape checks.
// Inputs whose config.json declares a vocab_size above 8192 are skipped: the planner then fills
// every missing id with "[PAD{id}]" (by design, up to kMaxVocabTokens), which only slows the run.
//
// Properties: when PlanHfToGguf succeeds, AssignGgufOffsets and EncodeGgufHeader accept the
// header built from its metadata and tensors (the lead's pipeline writes exactly that);
// PlanGgufToHf on that header names only tensors of the header and, when it succeeds, its
// config.json is valid JSON, and (for a rebuilt "gpt2" tokenizer) the HF directory it describes
// plans back to GGUF with the same tensors and token count; RebuildHfTokenizerFiles accepts the
// header. When ConvertHfTokenizer succeeds: one type per token, scores empty or one per token,
// "llama" special ids inside the vocabulary ("gpt2" keeps out-of-range ids, as the converter
// does), and its GgufVocabKvs encode as a GGUF header that RebuildHfTokenizerFiles accepts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/export/cast.h"
#include "formats/export/gguf_arch.h"
#include "formats/export/gguf_tokenizer.h"
#include "formats/gguf.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace ex = blz::exporter;
using json = nlohmann::json;

constexpr uint64_t kMaxFuzzVocab = 8192;
const char* const kFileNames[] = {"tokenizer.json",          "tokenizer_config.json",
                                  "vocab.json",              "merges.txt",
                                  "special_tokens_map.json", "added_tokens.json"};

// The first of `keys` in `config` that is a non-negative integer, clamped to [lo, hi]; else `def`.
uint64_t Dim(const json& config, std::initializer_list<const char*> keys, uint64_t def,
             uint64_t lo, uint64_t hi) {
  if (!config.is_object()) return def;
  for (const char* k : keys) {
    auto it = config.find(k);
    if (it == config.end() || !it->is_number_integer()) continue;
    if (it->is_number_unsigned()) {
      uint64_t v = it->get<uint64_t>();
      return v < lo ? lo : v > hi ? hi : v;
    }
    return lo;  // negative
  }
  return def;
}

std::vector<ex::HfModelInfo::Tensor> TensorsFor(const json& config, uint8_t opts) {
  std::string arch;
  if (config.is_object()) {
    auto it = config.find("architectures");
    if (it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
      arch = (*it)[0].get<std::string>();
    }
  }
  const uint64_t layers = Dim(config, {"num_hidden_layers", "n_layer"}, 2, 1, 4);
  const uint64_t h = Dim(config, {"hidden_size", "n_embd"}, 16, 1, 4096);
  const uint64_t heads = Dim(config, {"num_attention_heads", "n_head"}, 4, 1, 4096);
  const uint64_t kv_heads = Dim(config, {"num_key_value_heads"}, heads, 1, 4096);
  const uint64_t ff = Dim(config, {"intermediate_size", "n_inner"}, 4 * h, 1, 16384);
  const uint64_t vocab = Dim(config, {"vocab_size"}, 8, 1, kMaxFuzzVocab);
  const uint64_t ctx = Dim(config, {"max_position_embeddings", "n_positions"}, 64, 1, 4096);
  const bool lm_head = (opts & 0x08) != 0, bias = (opts & 0x10) != 0;
  std::vector<ex::HfModelInfo::Tensor> t;
  if (arch.find("GPT2") != std::string::npos) {
    const std::string p = (opts & 0x20) != 0 ? "" : "transformer.";
    t.push_back({p + "wte.weight", {vocab, h}});
    t.push_back({p + "wpe.weight", {ctx, h}});
    for (uint64_t b = 0; b < layers; ++b) {
      const std::string q = p + "h." + std::to_string(b) + ".";
      t.push_back({q + "ln_1.weight", {h}});
      t.push_back({q + "ln_1.bias", {h}});
      t.push_back({q + "attn.c_attn.weight", {h, 3 * h}});
      t.push_back({q + "attn.c_attn.bias", {3 * h}});
      t.push_back({q + "attn.c_proj.weight", {h, h}});
      t.push_back({q + "attn.c_proj.bias", {h}});
      t.push_back({q + "ln_2.weight", {h}});
      t.push_back({q + "ln_2.bias", {h}});
      t.push_back({q + "mlp.c_fc.weight", {h, ff}});
      t.push_back({q + "mlp.c_fc.bias", {ff}});
      t.push_back({q + "mlp.c_proj.weight", {ff, h}});
      t.push_back({q + "mlp.c_proj.bias", {h}});
    }
    t.push_back({p + "ln_f.weight", {h}});
    t.push_back({p + "ln_f.bias", {h}});
  } else {
    const uint64_t kv = heads == 0 ? h : h / heads * kv_heads;
    t.push_back({"model.embed_tokens.weight", {vocab, h}});
    for (uint64_t b = 0; b < layers; ++b) {
      const std::string q = "model.layers." + std::to_string(b) + ".";
      t.push_back({q + "input_layernorm.weight", {h}});
      t.push_back({q + "self_attn.q_proj.weight", {h, h}});
      t.push_back({q + "self_attn.k_proj.weight", {kv, h}});
      t.push_back({q + "self_attn.v_proj.weight", {kv, h}});
      if (bias) {
        t.push_back({q + "self_attn.q_proj.bias", {h}});
        t.push_back({q + "self_attn.k_proj.bias", {kv}});
        t.push_back({q + "self_attn.v_proj.bias", {kv}});
      }
      t.push_back({q + "self_attn.o_proj.weight", {h, h}});
      t.push_back({q + "post_attention_layernorm.weight", {h}});
      t.push_back({q + "mlp.gate_proj.weight", {ff, h}});
      t.push_back({q + "mlp.up_proj.weight", {ff, h}});
      t.push_back({q + "mlp.down_proj.weight", {h, ff}});
    }
    t.push_back({"model.norm.weight", {h}});
  }
  if (lm_head) t.push_back({"lm_head.weight", {vocab, h}});
  if ((opts & 0x80) != 0) t.push_back({"model.rotary_emb.inv_freq", {h / 2 + 1}});
  return t;
}

// The GGUF header the export pipeline writes for `plan` (formats/export/export_gguf.cc).
blz::formats::GgufHeader HeaderOf(const ex::GgufModelPlan& plan) {
  blz::formats::GgufHeader header;
  header.metadata = plan.metadata;
  for (const ex::GgufTensorPlan& t : plan.tensors) {
    blz::formats::GgufTensorInfo info;
    info.name = t.gguf_name;
    info.dims.assign(t.shape.rbegin(), t.shape.rend());
    if (info.dims.empty()) info.dims.push_back(1);
    info.type = ex::ToGgmlType(t.type);
    header.tensors.push_back(std::move(info));
  }
  return header;
}

// When PlanGgufToHf rebuilt the tokenizer files (a "gpt2" tokenizer): the HF directory it plans
// (its config.json, tokenizer files and tensors, shapes from the header) plans back to GGUF with
// the same tensor names and token count.
void CheckReplan(const blz::formats::GgufHeader& header, const ex::HfDirPlan& back,
                 ex::CastType cast, const ex::GgufModelPlan& plan) {
  if (back.extra_files.count("vocab.json") == 0) return;
  ex::HfModelInfo again;
  again.name = "fuzz";
  again.config_json = back.config_json;
  again.files = back.extra_files;
  for (const ex::HfTensorPlan& t : back.tensors) {
    for (const auto& info : header.tensors) {
      if (info.name != t.gguf_name) continue;
      std::vector<uint64_t> shape(info.dims.rbegin(), info.dims.rend());
      if (t.transpose) std::reverse(shape.begin(), shape.end());
      again.tensors.push_back({t.hf_name, shape});
    }
  }
  auto replan = ex::PlanHfToGguf(again, cast);
  if (!replan.ok()) std::fprintf(stderr, "%s\n", replan.status().ToString().c_str());
  blz::fuzz::Check(replan.ok(), "the planned HF directory plans back to GGUF");
  blz::fuzz::Check(replan->tensors.size() == plan.tensors.size(), "same tensor count");
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    blz::fuzz::Check(replan->tensors[i].gguf_name == plan.tensors[i].gguf_name &&
                         replan->tensors[i].shape == plan.tensors[i].shape,
                     "same GGUF tensors");
  }
  const blz::formats::GgufValue* a = nullptr;
  const blz::formats::GgufValue* b = nullptr;
  for (const auto& kv : plan.metadata) {
    if (kv.key == "tokenizer.ggml.tokens") a = &kv.value;
  }
  for (const auto& kv : replan->metadata) {
    if (kv.key == "tokenizer.ggml.tokens") b = &kv.value;
  }
  blz::fuzz::Check(a != nullptr && b != nullptr && a->count == b->count, "same token count");
}

void CheckRoundTrip(const ex::GgufModelPlan& plan, ex::CastType cast) {
  blz::formats::GgufHeader header = HeaderOf(plan);
  blz::Status s = blz::formats::AssignGgufOffsets(&header);
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
  blz::fuzz::Check(s.ok(), "AssignGgufOffsets accepts a planned header");
  auto enc = blz::formats::EncodeGgufHeader(header);
  if (!enc.ok()) std::fprintf(stderr, "%s\n", enc.status().ToString().c_str());
  blz::fuzz::Check(enc.ok(), "EncodeGgufHeader accepts a planned header");
  auto back = ex::PlanGgufToHf(header);
  if (back.ok()) {
    for (const ex::HfTensorPlan& t : back->tensors) {
      bool found = false;
      for (const auto& info : header.tensors) found = found || info.name == t.gguf_name;
      blz::fuzz::Check(found && !t.hf_name.empty(), "PlanGgufToHf names header tensors");
    }
    blz::fuzz::Check(!json::parse(back->config_json, nullptr, false).is_discarded(),
                     "PlanGgufToHf writes valid config.json");
    CheckReplan(header, *back, cast, plan);
  }
  auto files = ex::RebuildHfTokenizerFiles(header);
  if (!files.ok()) std::fprintf(stderr, "%s\n", files.status().ToString().c_str());
  blz::fuzz::Check(files.ok(), "RebuildHfTokenizerFiles accepts a planned header");
}

void CheckVocab(const ex::GgufVocab& v) {
  blz::fuzz::Check(v.tokens.size() == v.token_types.size(), "one type per token");
  blz::fuzz::Check(v.scores.empty() || v.scores.size() == v.tokens.size(),
                   "scores empty or one per token");
  blz::fuzz::Check(v.tokens.size() <= ex::kMaxVocabTokens, "vocabulary within the cap");
  // "llama" ids past the token count are skipped; "gpt2" keeps them, as the converter's
  // SpecialVocab without n_vocab does (docs/gguf-export.md, "Special tokens").
  for (const auto& [what, id] : v.special_ids) {
    blz::fuzz::Check(v.model != "llama" || id < v.tokens.size(),
                     "llama special token ids inside the vocabulary");
  }
  blz::formats::GgufHeader header;
  header.metadata = ex::GgufVocabKvs(v);
  auto enc = blz::formats::EncodeGgufHeader(header);
  if (!enc.ok()) std::fprintf(stderr, "%s\n", enc.status().ToString().c_str());
  blz::fuzz::Check(enc.ok(), "EncodeGgufHeader accepts GgufVocabKvs");
  auto files = ex::RebuildHfTokenizerFiles(header);
  if (!files.ok()) std::fprintf(stderr, "%s\n", files.status().ToString().c_str());
  blz::fuzz::Check(files.ok(), "RebuildHfTokenizerFiles accepts GgufVocabKvs");
  if (auto it = files->find("vocab.json"); it != files->end()) {
    blz::fuzz::Check(!json::parse(it->second, nullptr, false).is_discarded(),
                     "rebuilt vocab.json is valid JSON");
  }
}

// --- Seeds ------------------------------------------------------------------------------------

std::string Seed(uint8_t opts, const std::string& config, const std::vector<std::string>& files) {
  std::string out(1, char(opts));
  out += char(config.size() & 0xFF);
  out += char(config.size() >> 8);
  out += config;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) out += '\0';
    out += files[i];
  }
  return out;
}

// A byte-level BPE tokenizer.json like GPT-2's, cut down: the 256 byte tokens (GPT-2's
// byte-to-unicode map), `extra` merged tokens with their merges, and <|endoftext|>.
json ByteLevelTokenizer(int extra, bool merges_as_pairs) {
  std::vector<std::string> bytes;
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int cp = printable ? b : 256 + shifted++;
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    bytes.push_back(s);
  }
  json vocab = json::object();
  for (int i = 0; i < 256; ++i) vocab[bytes[size_t(i)]] = i;
  json merges = json::array();
  const char* words[] = {"t", "h", "e", "a", "n", "d", "i", "s", "o", "r"};
  int id = 256;
  for (int i = 0; i < extra; ++i) {
    std::string a = std::string("\xc4\xa0") + words[i % 10];  // "Ġx"
    std::string b = words[(i / 10) % 10];
    std::string merged = a + b + (i >= 100 ? std::to_string(i) : "");
    if (vocab.contains(merged)) continue;
    vocab[merged] = id++;
    if (merges_as_pairs) {
      merges.push_back({a, b});
    } else {
      merges.push_back(a + " " + b);
    }
  }
  vocab["<|endoftext|>"] = id;
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", id}, {"content", "<|endoftext|>"}, {"special", true}, {"single_word", false}}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
}

// A SentencePiece-style (byte_fallback) tokenizer.json as transformers writes for Llama.
json SpmTokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  int id = 3;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = id++;
  }
  const char* const kSp = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  for (std::string w : {std::string(kSp) + "the", std::string(kSp) + "a", std::string("in"),
                        std::string("er"), std::string(kSp) + "t", std::string("on")}) {
    vocab[w] = id++;
  }
  return {{"model",
           {{"type", "BPE"},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", {"\xe2\x96\x81 t", "i n", "e r", "o n"}}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", json::array()}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
          {"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}},
            {{"id", id}, {"content", "<extra_0>"}, {"special", false}}}}};
}

void WriteSeeds() {
  // GPT-2: the corpus config with a vocabulary the size of the cut-down tokenizer.
  json bpe = ByteLevelTokenizer(200, false);
  const uint64_t bpe_size = bpe["model"]["vocab"].size();
  json gpt2 = {{"activation_function", "gelu_new"},
               {"architectures", {"GPT2LMHeadModel"}},
               {"bos_token_id", bpe_size - 1},
               {"eos_token_id", bpe_size - 1},
               {"layer_norm_epsilon", 1e-05},
               {"model_type", "gpt2"},
               {"n_ctx", 1024},
               {"n_embd", 2},
               {"n_head", 2},
               {"n_inner", nullptr},
               {"n_layer", 2},
               {"n_positions", 1024},
               {"torch_dtype", "float32"},
               {"vocab_size", bpe_size}};
  json gpt2_tok_config = {{"model_max_length", 1024},
                          {"bos_token", "<|endoftext|>"},
                          {"eos_token", "<|endoftext|>"},
                          {"unk_token", "<|endoftext|>"},
                          {"add_bos_token", false}};
  // vocab.json + merges.txt (the slow tokenizer's files) of the same vocabulary.
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& m : bpe["model"]["merges"]) merges_txt += m.get<std::string>() + "\n";
  json vocab_json = bpe["model"]["vocab"];
  json llama = {{"architectures", {"LlamaForCausalLM"}},
                {"model_type", "llama"},
                {"hidden_size", 64},
                {"intermediate_size", 128},
                {"num_attention_heads", 4},
                {"num_key_value_heads", 2},
                {"num_hidden_layers", 2},
                {"max_position_embeddings", 256},
                {"rms_norm_eps", 1e-6},
                {"rope_theta", 10000.0},
                {"rope_scaling", nullptr},
                {"tie_word_embeddings", false},
                {"vocab_size", 266},
                {"bos_token_id", 1},
                {"eos_token_id", 2}};
  json llama_tok_config = {{"bos_token", "<s>"},       {"eos_token", "</s>"},
                           {"unk_token", "<unk>"},     {"add_bos_token", true},
                           {"add_eos_token", false},   {"chat_template", "{{ messages }}"}};
  json qwen = llama;
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["model_type"] = "qwen2";
  qwen["tie_word_embeddings"] = true;
  qwen["vocab_size"] = bpe_size;
  qwen["bos_token_id"] = bpe_size - 1;
  qwen["eos_token_id"] = bpe_size - 1;
  json mistral = llama;
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["vocab_size"] = bpe_size;
  const std::string spm = SpmTokenizer().dump();
  struct Named {
    const char* name;
    std::string bytes;
  };
  const Named seeds[] = {
      {"gpt2_tokenizer_json", Seed(0x01, gpt2.dump(), {bpe.dump(), gpt2_tok_config.dump()})},
      {"gpt2_merge_pairs_q8",
       Seed(0x03, gpt2.dump(1), {ByteLevelTokenizer(120, true).dump(), gpt2_tok_config.dump()})},
      {"gpt2_vocab_merges_txt",
       Seed(0x24, gpt2.dump(), {"", gpt2_tok_config.dump(), vocab_json.dump(), merges_txt})},
      {"llama_spm_untied", Seed(0x48, llama.dump(), {spm, llama_tok_config.dump()})},
      {"llama_spm_q4", Seed(0x4C, llama.dump(), {spm, llama_tok_config.dump(), "", "",
                                                 R"({"bos_token":"<s>","eos_token":"</s>"})"})},
      {"mistral_bpe_lm_head", Seed(0x0A, mistral.dump(), {bpe.dump()})},
      {"qwen2_bias_tied", Seed(0x12, qwen.dump(), {bpe.dump(), gpt2_tok_config.dump()})},
      {"llama_inv_freq_buffer", Seed(0xC8, llama.dump(), {spm})},
  };
  for (const Named& s : seeds) blz::fuzz::WriteSeed(std::string("crafted_") + s.name, s.bytes);
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t opts = data[0];
  size_t n = size_t(data[1]) | size_t(data[2]) << 8;
  std::string_view rest(reinterpret_cast<const char*>(data) + 3, size - 3);
  if (n > rest.size()) n = rest.size();
  ex::HfModelInfo model;
  model.name = "fuzz";
  model.config_json = std::string(rest.substr(0, n));
  rest.remove_prefix(n);
  for (const char* name : kFileNames) {
    size_t end = rest.find('\0');
    std::string_view part = rest.substr(0, end);
    if (!part.empty()) model.files[name] = std::string(part);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  json config = json::parse(model.config_json, nullptr, false);
  if (config.is_discarded()) config = json::object();
  if (config.is_object()) {
    auto vs = config.find("vocab_size");
    if (vs != config.end() && vs->is_number() && !(vs->get<double>() <= double(kMaxFuzzVocab))) {
      return 0;  // see the file comment
    }
  }
  model.tensors = TensorsFor(config, opts);
  constexpr ex::CastType kCasts[] = {ex::CastType::kF32, ex::CastType::kF16, ex::CastType::kBF16,
                                     ex::CastType::kQ8_0, ex::CastType::kQ4_0};
  const ex::CastType cast = kCasts[(opts & 7) % 5];
  auto plan = ex::PlanHfToGguf(model, cast);
  if (plan.ok()) CheckRoundTrip(*plan, cast);

  ex::TokenizerDefaults defaults;
  if ((opts & 0x40) != 0) {
    defaults.bpe_pre = "llama-bpe";
    defaults.try_llama_hf = true;
  } else {
    defaults.bpe_pre = "gpt-2";
  }
  auto vocab = ex::ConvertHfTokenizer(model.files, config, defaults, "fuzz");
  if (vocab.ok()) CheckVocab(*vocab);
  return 0;
}
