#include "formats/export/gguf_arch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/export/gguf_tokenizer.h"
#include "formats/json_strict.h"

namespace blz::exporter {

using formats::GgufKv;
using formats::GgufType;
using formats::GgufValue;
using json = nlohmann::json;

namespace {

// ---- The architecture table ---------------------------------------------------------------

enum class Role : uint8_t { kPlain, kTokenEmbd, kOutput };
enum class Heads : uint8_t { kNone, kQ, kKV };  // which head count permutes the rows

struct TensorRule {
  std::string_view hf;    // HF name after prefix stripping; "{bid}" = block number
  std::string_view gguf;  // GGUF name; "{bid}" = block number
  Heads permute = Heads::kNone;
  bool transpose = false;
  Role role = Role::kPlain;
};

enum class HpSource : uint8_t {
  kConfig,      // the first of hf_keys present in config.json
  kFfOr4xEmbd,  // GPT-2: n_inner when an integer, else 4 * n_embd
  kRopeDim,     // head_dim when present, else embedding_length / head_count
  kVocabSize,   // config vocab_size, else the token embedding's rows
  kFileType,    // general.file_type from the cast
};

struct HparamRule {
  std::string_view key;  // "{arch}." is replaced by the GGUF arch
  GgufType type = GgufType::kUint32;  // kUint32 or kFloat32
  std::vector<std::string_view> hf_keys;
  bool required = false;
  HpSource source = HpSource::kConfig;
  std::string_view hf_out;  // the HF key written by PlanGgufToHf ("" = none)
};

struct ArchSpec {
  std::vector<std::string_view> hf_archs;  // config.json architectures[0]; [0] is written back
  std::string_view gguf_arch;
  std::string_view model_type;  // config.json model_type written back
  std::vector<std::string_view> strip_prefixes;  // removed before matching ("transformer.")
  std::vector<std::string_view> skip_suffixes;   // buffers the converter drops
  std::string_view reverse_prefix;               // prepended to HF names (not lm_head) on the way back
  std::vector<std::string_view> reverse_skip;    // GGUF tensors with no HF counterpart
  std::vector<TensorRule> tensors;
  std::vector<HparamRule> hparams;  // in the converter's KV order
  bool default_tie = false;         // tie_word_embeddings when config.json does not say
  std::string_view bpe_pre;         // tokenizer.ggml.pre for byte-level BPE
  bool try_llama_hf_vocab = false;  // SentencePiece-style tokenizer.json -> "llama" model
};

const std::vector<std::string_view> kBlockKeys = {"n_layers", "num_hidden_layers", "n_layer",
                                                  "num_layers"};
const std::vector<std::string_view> kCtxKeys = {"max_position_embeddings", "n_ctx", "n_positions",
                                                "max_length", "max_sequence_length",
                                                "model_max_length"};
const std::vector<std::string_view> kEmbdKeys = {"hidden_size", "n_embd", "dim"};
const std::vector<std::string_view> kFfKeys = {"intermediate_size", "n_inner", "hidden_dim"};
const std::vector<std::string_view> kHeadKeys = {"num_attention_heads", "n_head", "n_heads"};
const std::vector<std::string_view> kKvKeys = {"num_key_value_heads", "n_kv_heads"};

// TextModel.set_gguf_parameters (+ what the arch class adds after it).
std::vector<HparamRule> TextModelHparams(bool llama) {
  std::vector<HparamRule> h = {
      {"{arch}.block_count", GgufType::kUint32, kBlockKeys, true, HpSource::kConfig,
       "num_hidden_layers"},
      {"{arch}.context_length", GgufType::kUint32, kCtxKeys, false, HpSource::kConfig,
       "max_position_embeddings"},
      {"{arch}.embedding_length", GgufType::kUint32, kEmbdKeys, true, HpSource::kConfig,
       "hidden_size"},
      {"{arch}.feed_forward_length", GgufType::kUint32, kFfKeys, true, HpSource::kConfig,
       "intermediate_size"},
      {"{arch}.attention.head_count", GgufType::kUint32, kHeadKeys, true, HpSource::kConfig,
       "num_attention_heads"},
      {"{arch}.attention.head_count_kv", GgufType::kUint32, kKvKeys, false, HpSource::kConfig,
       "num_key_value_heads"},
      {"{arch}.rope.freq_base", GgufType::kFloat32, {"rope_theta"}, false, HpSource::kConfig,
       "rope_theta"},
      {"{arch}.attention.layer_norm_rms_epsilon", GgufType::kFloat32, {"rms_norm_eps", "norm_eps"},
       false, HpSource::kConfig, "rms_norm_eps"},
      {"general.file_type", GgufType::kUint32, {}, true, HpSource::kFileType, ""},
  };
  if (llama) {
    h.push_back({"{arch}.vocab_size", GgufType::kUint32, {"vocab_size"}, true,
                 HpSource::kVocabSize, "vocab_size"});
    h.push_back({"{arch}.rope.dimension_count", GgufType::kUint32, {"head_dim"}, true,
                 HpSource::kRopeDim, "head_dim"});
  }
  return h;
}

// Llama-style decoder names (llama, mistral, qwen2); `perm` permutes q/k, `bias` adds q/k/v
// biases (qwen2 always has them; llama with attention_bias).
std::vector<TensorRule> DecoderRules(bool perm) {
  Heads q = perm ? Heads::kQ : Heads::kNone;
  Heads k = perm ? Heads::kKV : Heads::kNone;
  return {
      {"model.embed_tokens.weight", "token_embd.weight", Heads::kNone, false, Role::kTokenEmbd},
      {"model.layers.{bid}.input_layernorm.weight", "blk.{bid}.attn_norm.weight"},
      {"model.layers.{bid}.self_attn.q_proj.weight", "blk.{bid}.attn_q.weight", q},
      {"model.layers.{bid}.self_attn.q_proj.bias", "blk.{bid}.attn_q.bias", q},
      {"model.layers.{bid}.self_attn.k_proj.weight", "blk.{bid}.attn_k.weight", k},
      {"model.layers.{bid}.self_attn.k_proj.bias", "blk.{bid}.attn_k.bias", k},
      {"model.layers.{bid}.self_attn.v_proj.weight", "blk.{bid}.attn_v.weight"},
      {"model.layers.{bid}.self_attn.v_proj.bias", "blk.{bid}.attn_v.bias"},
      {"model.layers.{bid}.self_attn.o_proj.weight", "blk.{bid}.attn_output.weight"},
      {"model.layers.{bid}.self_attn.o_proj.bias", "blk.{bid}.attn_output.bias"},
      {"model.layers.{bid}.post_attention_layernorm.weight", "blk.{bid}.ffn_norm.weight"},
      {"model.layers.{bid}.mlp.gate_proj.weight", "blk.{bid}.ffn_gate.weight"},
      {"model.layers.{bid}.mlp.up_proj.weight", "blk.{bid}.ffn_up.weight"},
      {"model.layers.{bid}.mlp.down_proj.weight", "blk.{bid}.ffn_down.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight", Heads::kNone, false, Role::kOutput},
  };
}

const std::vector<ArchSpec>& ArchTable() {
  static const std::vector<ArchSpec> kTable = [] {
    std::vector<ArchSpec> t;
    t.push_back({{"LlamaForCausalLM", "MistralForCausalLM"}, "llama", "llama", {},
                 {".rotary_emb.inv_freq"}, "", {"rope_freqs.weight"}, DecoderRules(true),
                 TextModelHparams(true), false, "llama-bpe", true});
    t.push_back({{"Qwen2ForCausalLM"}, "qwen2", "qwen2", {}, {".rotary_emb.inv_freq"}, "", {},
                 DecoderRules(false), TextModelHparams(false), false, "qwen2", false});
    t.push_back({{"GPT2LMHeadModel"}, "gpt2", "gpt2", {"transformer."},
                 {".attn.bias", ".attn.masked_bias"}, "transformer.", {},
                 {
                     {"wte.weight", "token_embd.weight", Heads::kNone, false, Role::kTokenEmbd},
                     {"wpe.weight", "position_embd.weight"},
                     {"h.{bid}.ln_1.weight", "blk.{bid}.attn_norm.weight"},
                     {"h.{bid}.ln_1.bias", "blk.{bid}.attn_norm.bias"},
                     {"h.{bid}.attn.c_attn.weight", "blk.{bid}.attn_qkv.weight", Heads::kNone, true},
                     {"h.{bid}.attn.c_attn.bias", "blk.{bid}.attn_qkv.bias"},
                     {"h.{bid}.attn.c_proj.weight", "blk.{bid}.attn_output.weight", Heads::kNone,
                      true},
                     {"h.{bid}.attn.c_proj.bias", "blk.{bid}.attn_output.bias"},
                     {"h.{bid}.ln_2.weight", "blk.{bid}.ffn_norm.weight"},
                     {"h.{bid}.ln_2.bias", "blk.{bid}.ffn_norm.bias"},
                     {"h.{bid}.mlp.c_fc.weight", "blk.{bid}.ffn_up.weight", Heads::kNone, true},
                     {"h.{bid}.mlp.c_fc.bias", "blk.{bid}.ffn_up.bias"},
                     {"h.{bid}.mlp.c_proj.weight", "blk.{bid}.ffn_down.weight", Heads::kNone,
                      true},
                     {"h.{bid}.mlp.c_proj.bias", "blk.{bid}.ffn_down.bias"},
                     {"ln_f.weight", "output_norm.weight"},
                     {"ln_f.bias", "output_norm.bias"},
                     {"lm_head.weight", "output.weight", Heads::kNone, false, Role::kOutput},
                 },
                 {
                     {"{arch}.block_count", GgufType::kUint32, {"n_layer"}, true,
                      HpSource::kConfig, "n_layer"},
                     {"{arch}.context_length", GgufType::kUint32, {"n_ctx", "n_positions"}, true,
                      HpSource::kConfig, "n_ctx"},
                     {"{arch}.embedding_length", GgufType::kUint32, {"n_embd"}, true,
                      HpSource::kConfig, "n_embd"},
                     {"{arch}.feed_forward_length", GgufType::kUint32, {"n_inner"}, true,
                      HpSource::kFfOr4xEmbd, "n_inner"},
                     {"{arch}.attention.head_count", GgufType::kUint32, {"n_head"}, true,
                      HpSource::kConfig, "n_head"},
                     {"{arch}.attention.layer_norm_epsilon", GgufType::kFloat32,
                      {"layer_norm_epsilon"}, true, HpSource::kConfig, "layer_norm_epsilon"},
                     {"general.file_type", GgufType::kUint32, {}, true, HpSource::kFileType, ""},
                 },
                 true, "gpt-2", false});
    return t;
  }();
  return kTable;
}

std::string KnownArchs() {
  std::vector<std::string> names;
  for (const ArchSpec& a : ArchTable()) {
    for (std::string_view n : a.hf_archs) names.emplace_back(n);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string ArchKey(std::string_view key, std::string_view arch) {
  std::string k(key);
  if (k.rfind("{arch}.", 0) == 0) k = std::string(arch) + k.substr(6);
  return k;
}

// Matches `name` against `pattern` (with at most one "{bid}"); sets *bid.
bool MatchPattern(std::string_view pattern, std::string_view name, std::optional<uint64_t>* bid) {
  size_t p = pattern.find("{bid}");
  if (p == std::string_view::npos) {
    *bid = std::nullopt;
    return pattern == name;
  }
  std::string_view pre = pattern.substr(0, p);
  std::string_view post = pattern.substr(p + 5);
  if (name.size() <= pre.size() + post.size()) return false;
  if (name.substr(0, pre.size()) != pre) return false;
  if (name.substr(name.size() - post.size()) != post) return false;
  std::string_view digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.empty() || digits.size() > 9) return false;
  if (digits.size() > 1 && digits[0] == '0') return false;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *bid = v;
  return true;
}

std::string Expand(std::string_view pattern, std::optional<uint64_t> bid) {
  std::string out(pattern);
  size_t p = out.find("{bid}");
  if (p != std::string::npos) out.replace(p, 5, std::to_string(bid.value_or(0)));
  return out;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ---- HF -> GGUF ---------------------------------------------------------------------------

// A hyperparameter value resolved from config.json.
struct HpValue {
  bool is_float = false;
  uint64_t u = 0;
  double f = 0;
};

const json* ConfigMember(const json& config, std::string_view key) {
  auto it = config.find(std::string(key));
  if (it == config.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::optional<HpValue>> ReadConfigValue(const json& config, const HparamRule& rule) {
  for (std::string_view key : rule.hf_keys) {
    const json* v = ConfigMember(config, key);
    if (v == nullptr) continue;
    HpValue out;
    if (rule.type == GgufType::kFloat32) {
      if (!v->is_number()) {
        return InvalidArgument("config.json: field '" + std::string(key) + "' must be a number");
      }
      out.is_float = true;
      out.f = v->get<double>();
      // GGUF stores it as a float32: a value past its range would become infinity (and then
      // a config.json that cannot be written back, as JSON has no infinity).
      if (!std::isfinite(static_cast<float>(out.f))) {
        return InvalidArgument("config.json: field '" + std::string(key) + "' = " + v->dump() +
                               " does not fit a GGUF float32 (largest magnitude 3.4e38)");
      }
      return std::optional<HpValue>(out);
    }
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0) ||
        v->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgument("config.json: field '" + std::string(key) +
                             "' must be a non-negative integer below 2^32");
    }
    out.u = v->get<uint64_t>();
    return std::optional<HpValue>(out);
  }
  return std::optional<HpValue>();
}

std::string MissingField(const HparamRule& rule) {
  std::string names;
  for (std::string_view k : rule.hf_keys) names += (names.empty() ? "'" : ", '") + std::string(k) + "'";
  return "config.json: field " + names + " is missing (needed for " + std::string(rule.key) + ")";
}

// One checkpoint tensor matched against the table.
struct Match {
  const TensorRule* rule = nullptr;  // nullptr: skipped buffer
  std::optional<uint64_t> bid;
};

}  // namespace

uint32_t LlamaFileType(CastType cast) {
  switch (cast) {
    case CastType::kF32: return 0;
    case CastType::kF16: return 1;
    case CastType::kQ4_0: return 2;
    case CastType::kQ8_0: return 7;
    case CastType::kBF16: return 32;
  }
  return 0;
}

uint64_t PermutedSourceRow(RowPermute p, uint32_t heads, uint64_t rows, uint64_t r,
                           bool inverse) {
  if (p == RowPermute::kNone || heads == 0 || rows % (2ull * heads) != 0 || r >= rows) return r;
  const uint64_t per_head = rows / heads;
  const uint64_t half = per_head / 2;
  const uint64_t h = r / per_head;
  const uint64_t m = r % per_head;
  if (!inverse) {
    // Output (h, i, j) of shape (heads, half, 2) is input (h, j, i) of shape (heads, 2, half).
    return h * per_head + (m % 2) * half + m / 2;
  }
  // Input (h, j, i) came from output (h, i, j).
  return h * per_head + (m % half) * 2 + m / half;
}

Result<GgufModelPlan> PlanHfToGguf(const HfModelInfo& model, CastType cast) {
  json config;
  {
    BLZ_ASSIGN_OR_RETURN(config, formats::ParseJsonStrict(model.config_json, "config.json", 0));
  }
  if (!config.is_object()) return Corruption("config.json: not a JSON object");
  const json* archs = ConfigMember(config, "architectures");
  if (archs == nullptr || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return InvalidArgument("config.json: field 'architectures' is missing or not a list of "
                           "strings");
  }
  const std::string hf_arch = (*archs)[0].get<std::string>();
  const ArchSpec* spec = nullptr;
  for (const ArchSpec& a : ArchTable()) {
    if (std::find(a.hf_archs.begin(), a.hf_archs.end(), hf_arch) != a.hf_archs.end()) spec = &a;
  }
  if (spec == nullptr) {
    return Unsupported("architecture '" + hf_arch + "' is not supported for GGUF export (known: " +
                       KnownArchs() + ")");
  }
  const std::string arch(spec->gguf_arch);
  if (const json* rs = ConfigMember(config, "rope_scaling"); rs != nullptr) {
    return Unsupported("config.json: rope_scaling " + rs->dump() +
                       " is not supported for GGUF export");
  }
  bool tie = spec->default_tie;
  if (const json* t = ConfigMember(config, "tie_word_embeddings"); t != nullptr) {
    if (!t->is_boolean()) {
      return InvalidArgument("config.json: field 'tie_word_embeddings' must be true or false");
    }
    tie = t->get<bool>();
  }

  // 1. Match every checkpoint tensor.
  std::vector<Match> matches(model.tensors.size());
  bool has_embd = false, has_output = false;
  const HfModelInfo::Tensor* embd_tensor = nullptr;
  for (size_t i = 0; i < model.tensors.size(); ++i) {
    const std::string& name = model.tensors[i].name;
    bool skip = false;
    for (std::string_view s : spec->skip_suffixes) skip = skip || EndsWith(name, s);
    if (skip) continue;
    std::string_view stripped = name;
    for (std::string_view p : spec->strip_prefixes) {
      if (stripped.substr(0, std::min(stripped.size(), p.size())) == p) {
        stripped.remove_prefix(p.size());
        break;
      }
    }
    for (const TensorRule& r : spec->tensors) {
      std::optional<uint64_t> bid;
      if (MatchPattern(r.hf, stripped, &bid) || MatchPattern(r.hf, name, &bid)) {
        matches[i] = {&r, bid};
        break;
      }
    }
    if (matches[i].rule == nullptr) {
      return Unsupported("tensor '" + name + "' has no GGUF name for architecture '" + arch +
                         "' (" + hf_arch + ")");
    }
    if (matches[i].rule->role == Role::kTokenEmbd) {
      has_embd = true;
      embd_tensor = &model.tensors[i];
    }
    if (matches[i].rule->role == Role::kOutput) {
      has_output = true;
      if (embd_tensor == nullptr) embd_tensor = &model.tensors[i];
    }
  }
  if (!has_embd && !(tie && has_output)) {
    return InvalidArgument("no token embedding tensor in the checkpoint (" + hf_arch + ")");
  }
  if (!tie && !has_output) {
    return InvalidArgument("config.json: tie_word_embeddings is false but the checkpoint has no "
                           "lm_head.weight");
  }

  // 2. Hyperparameters.
  GgufModelPlan plan;
  plan.arch = arch;
  plan.metadata.push_back({"general.architecture", GgufValue::String(arch)});
  plan.metadata.push_back({"general.type", GgufValue::String("model")});
  plan.metadata.push_back(
      {"general.name", GgufValue::String(model.name.empty() ? std::string("model") : model.name)});
  std::map<std::string, HpValue> values;  // by GGUF key
  for (const HparamRule& rule : spec->hparams) {
    const std::string key = ArchKey(rule.key, arch);
    std::optional<HpValue> v;
    switch (rule.source) {
      case HpSource::kConfig: {
        BLZ_ASSIGN_OR_RETURN(v, ReadConfigValue(config, rule));
        break;
      }
      case HpSource::kFileType:
        v = HpValue{false, LlamaFileType(cast), 0};
        break;
      case HpSource::kFfOr4xEmbd: {
        BLZ_ASSIGN_OR_RETURN(v, ReadConfigValue(config, rule));
        if (!v) {
          auto e = values.find(arch + ".embedding_length");
          if (e == values.end()) return InvalidArgument(MissingField(rule));
          if (e->second.u > std::numeric_limits<uint32_t>::max() / 4) {
            return InvalidArgument("config.json: 4 x n_embd does not fit in 32 bits");
          }
          v = HpValue{false, 4 * e->second.u, 0};
        }
        break;
      }
      case HpSource::kRopeDim: {
        BLZ_ASSIGN_OR_RETURN(v, ReadConfigValue(config, rule));
        if (!v) {
          auto e = values.find(arch + ".embedding_length");
          auto h = values.find(arch + ".attention.head_count");
          if (e == values.end() || h == values.end() || h->second.u == 0) {
            return InvalidArgument(MissingField(rule));
          }
          v = HpValue{false, e->second.u / h->second.u, 0};
        }
        break;
      }
      case HpSource::kVocabSize: {
        BLZ_ASSIGN_OR_RETURN(v, ReadConfigValue(config, rule));
        if (!v && embd_tensor != nullptr && !embd_tensor->shape.empty()) {
          v = HpValue{false, embd_tensor->shape[0], 0};
        }
        break;
      }
    }
    if (!v) {
      if (rule.required) return InvalidArgument(MissingField(rule));
      continue;
    }
    values[key] = *v;
    plan.metadata.push_back(
        {key, rule.type == GgufType::kFloat32 ? GgufValue::F32(static_cast<float>(v->f))
                                              : GgufValue::U32(static_cast<uint32_t>(v->u))});
  }
  plan.metadata.push_back({"general.quantization_version", GgufValue::U32(2)});

  auto value_of = [&](const std::string& suffix) -> uint64_t {
    auto it = values.find(arch + "." + suffix);
    return it == values.end() ? 0 : it->second.u;
  };
  const uint64_t n_layer = value_of("block_count");
  const uint64_t n_head = value_of("attention.head_count");
  const uint64_t n_kv = values.count(arch + ".attention.head_count_kv") != 0
                            ? value_of("attention.head_count_kv")
                            : n_head;

  // 3. Tensor plans.
  std::set<std::string> seen;
  for (size_t i = 0; i < model.tensors.size(); ++i) {
    const Match& m = matches[i];
    if (m.rule == nullptr) continue;
    const HfModelInfo::Tensor& t = model.tensors[i];
    if (m.bid && *m.bid >= n_layer) {
      return InvalidArgument("tensor '" + t.name + "': block " + std::to_string(*m.bid) +
                             " is not below block_count " + std::to_string(n_layer));
    }
    GgufTensorPlan p;
    p.hf_name = t.name;
    p.gguf_name = Expand(m.rule->gguf, m.bid);
    if (m.rule->role == Role::kOutput && tie) {
      if (has_embd) continue;  // tied: the embedding is the output
      p.gguf_name = "token_embd.weight";  // a tied checkpoint that kept only lm_head.weight
    }
    if (!seen.insert(p.gguf_name).second) {
      return InvalidArgument("tensor '" + t.name + "': GGUF name '" + p.gguf_name +
                             "' is already used by another tensor");
    }
    p.shape = t.shape;
    if (m.rule->transpose) {
      if (t.shape.size() != 2) {
        return InvalidArgument("tensor '" + t.name + "': expected 2 dimensions to transpose, got " +
                               std::to_string(t.shape.size()));
      }
      p.transpose = true;
      std::swap(p.shape[0], p.shape[1]);
    }
    if (m.rule->permute != Heads::kNone) {
      const uint64_t heads = m.rule->permute == Heads::kQ ? n_head : n_kv;
      const uint64_t rows = t.shape.empty() ? 1 : t.shape[0];
      if (heads == 0 || rows % (2 * heads) != 0) {
        return InvalidArgument("tensor '" + t.name + "': " + std::to_string(rows) +
                               " rows are not divisible by 2 x " + std::to_string(heads) +
                               (m.rule->permute == Heads::kQ ? " heads (num_attention_heads)"
                                                             : " heads (num_key_value_heads)"));
      }
      p.permute = RowPermute::kLlamaQK;
      p.permute_heads = static_cast<uint32_t>(heads);
    }
    p.keep_f32 = p.shape.size() <= 1 || EndsWith(p.gguf_name, "_norm.weight") ||
                 p.gguf_name == "position_embd.weight" || !EndsWith(p.gguf_name, ".weight");
    if (p.keep_f32) {
      p.type = CastType::kF32;
    } else if (IsBlockQuantized(cast) && (p.shape.back() % 32) != 0) {
      p.type = CastType::kF16;
    } else {
      p.type = cast;
    }
    plan.tensors.push_back(std::move(p));
  }

  // 4. Tokenizer.
  TokenizerDefaults defaults;
  defaults.bpe_pre = std::string(spec->bpe_pre);
  defaults.try_llama_hf = spec->try_llama_hf_vocab;
  BLZ_ASSIGN_OR_RETURN(GgufVocab vocab, ConvertHfTokenizer(model.files, config, defaults,
                                                           model.name.empty() ? "the model"
                                                                              : model.name));
  // Without config.json's vocab_size, {arch}.vocab_size came from the embedding's rows and the
  // token list from the tokenizer's count: a GGUF where they differ is one llama.cpp cannot load
  // (and its config.json would not convert back), so refuse it here.
  if (auto vs = values.find(arch + ".vocab_size");
      vs != values.end() && vocab.tokens.size() != vs->second.u) {
    return InvalidArgument("the tokenizer has " + std::to_string(vocab.tokens.size()) +
                           " tokens but " + arch + ".vocab_size is " +
                           std::to_string(vs->second.u) +
                           " (token_embd's rows; config.json has no vocab_size)");
  }
  for (GgufKv& kv : GgufVocabKvs(vocab)) plan.metadata.push_back(std::move(kv));
  return plan;
}

// ---- GGUF -> HF ---------------------------------------------------------------------------

Result<HfDirPlan> PlanGgufToHf(const formats::GgufHeader& header) {
  const GgufValue* arch_v = formats::FindGgufValue(header, "general.architecture");
  if (arch_v == nullptr || arch_v->AsString() == nullptr) {
    return InvalidArgument("GGUF: no string general.architecture");
  }
  const std::string arch = *arch_v->AsString();
  const ArchSpec* spec = nullptr;
  for (const ArchSpec& a : ArchTable()) {
    if (a.gguf_arch == arch) {
      spec = &a;
      break;
    }
  }
  if (spec == nullptr) {
    std::string known;
    for (const ArchSpec& a : ArchTable()) known += (known.empty() ? "" : ", ") + std::string(a.gguf_arch);
    return Unsupported("GGUF architecture '" + arch + "' is not supported (known: " + known + ")");
  }

  // Hyperparameters.
  nlohmann::ordered_json config;
  config["architectures"] = {std::string(spec->hf_archs[0])};
  config["model_type"] = std::string(spec->model_type);
  std::map<std::string, HpValue> values;
  for (const HparamRule& rule : spec->hparams) {
    if (rule.source == HpSource::kFileType) continue;
    const std::string key = ArchKey(rule.key, arch);
    const GgufValue* v = formats::FindGgufValue(header, key);
    if (v == nullptr) {
      if (rule.source == HpSource::kConfig && rule.required) {
        return InvalidArgument("GGUF: metadata key '" + key + "' is missing");
      }
      continue;
    }
    HpValue hv;
    if (rule.type == GgufType::kFloat32) {
      auto f = v->AsFloat();
      if (!f) return InvalidArgument("GGUF: metadata key '" + key + "' is not a float");
      hv.is_float = true;
      hv.f = *f;
    } else {
      auto u = v->AsInt();
      if (!u || *u < 0) return InvalidArgument("GGUF: metadata key '" + key + "' is not a count");
      hv.u = static_cast<uint64_t>(*u);
    }
    values[key] = hv;
  }
  auto value_of = [&](const std::string& suffix) -> std::optional<HpValue> {
    auto it = values.find(arch + "." + suffix);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
  const uint64_t n_embd = value_of("embedding_length") ? value_of("embedding_length")->u : 0;
  const uint64_t n_head = value_of("attention.head_count") ? value_of("attention.head_count")->u : 0;
  const uint64_t n_kv =
      value_of("attention.head_count_kv") ? value_of("attention.head_count_kv")->u : n_head;
  for (const HparamRule& rule : spec->hparams) {
    if (rule.hf_out.empty()) continue;
    auto v = value_of(std::string(ArchKey(rule.key, arch)).substr(arch.size() + 1));
    switch (rule.source) {
      case HpSource::kFfOr4xEmbd:
        if (v && v->u != 4 * n_embd) {
          config[std::string(rule.hf_out)] = v->u;
        } else {
          config[std::string(rule.hf_out)] = nullptr;
        }
        continue;
      case HpSource::kRopeDim:
        if (v && n_head != 0 && v->u != n_embd / n_head) config[std::string(rule.hf_out)] = v->u;
        continue;
      case HpSource::kVocabSize:
      case HpSource::kFileType:
        continue;  // vocab_size is written below
      case HpSource::kConfig:
        break;
    }
    if (!v) continue;
    if (v->is_float) {
      // The F32 value as the shortest decimal that reads back to it.
      config[std::string(rule.hf_out)] = static_cast<double>(static_cast<float>(v->f));
    } else {
      config[std::string(rule.hf_out)] = v->u;
    }
    if (spec->gguf_arch == "gpt2" && rule.hf_out == "n_ctx") config["n_positions"] = v->u;
  }

  // Tensors.
  HfDirPlan plan;
  bool has_output = false, has_attn_bias = false;
  const formats::GgufTensorInfo* embd = nullptr;
  for (const formats::GgufTensorInfo& t : header.tensors) {
    if (std::find(spec->reverse_skip.begin(), spec->reverse_skip.end(), t.name) !=
        spec->reverse_skip.end()) {
      continue;
    }
    const TensorRule* rule = nullptr;
    std::optional<uint64_t> bid;
    for (const TensorRule& r : spec->tensors) {
      if (MatchPattern(r.gguf, t.name, &bid)) {
        rule = &r;
        break;
      }
    }
    if (rule == nullptr) {
      return Unsupported("GGUF tensor '" + t.name + "' has no Hugging Face name for architecture '" +
                         arch + "'");
    }
    HfTensorPlan p;
    p.gguf_name = t.name;
    p.hf_name = (rule->role == Role::kOutput ? std::string() : std::string(spec->reverse_prefix)) +
                Expand(rule->hf, bid);
    p.transpose = rule->transpose;
    if (rule->role == Role::kOutput) has_output = true;
    if (rule->role == Role::kTokenEmbd) embd = &t;
    if (EndsWith(t.name, "attn_q.bias")) has_attn_bias = true;
    if (rule->permute != Heads::kNone) {
      const uint64_t heads = rule->permute == Heads::kQ ? n_head : n_kv;
      const uint64_t rows = t.dims.empty() ? 1 : t.dims.back();
      if (heads == 0 || rows % (2 * heads) != 0) {
        return InvalidArgument("GGUF tensor '" + t.name + "': " + std::to_string(rows) +
                               " rows are not divisible by 2 x " + std::to_string(heads) + " heads");
      }
      p.permute = RowPermute::kLlamaQK;
      p.permute_heads = static_cast<uint32_t>(heads);
    }
    plan.tensors.push_back(std::move(p));
  }
  if (has_attn_bias && spec->gguf_arch == "llama") config["attention_bias"] = true;

  uint64_t vocab_size = 0;
  if (auto vs = value_of("vocab_size")) {
    vocab_size = vs->u;
  } else if (const GgufValue* toks = formats::FindGgufValue(header, "tokenizer.ggml.tokens");
             toks != nullptr && toks->type == GgufType::kArray) {
    vocab_size = toks->count;
  } else if (embd != nullptr && embd->dims.size() == 2) {
    vocab_size = embd->dims[1];
  }
  if (vocab_size != 0) config["vocab_size"] = vocab_size;
  for (const char* typ : {"bos", "eos"}) {
    const GgufValue* id =
        formats::FindGgufValue(header, std::string("tokenizer.ggml.") + typ + "_token_id");
    if (id != nullptr && id->AsInt()) config[std::string(typ) + "_token_id"] = *id->AsInt();
  }
  config["tie_word_embeddings"] = !has_output;
  std::string dtype = "float32";
  if (embd != nullptr) {
    if (embd->type == formats::GgmlType::kF16) dtype = "float16";
    if (embd->type == formats::GgmlType::kBF16) dtype = "bfloat16";
  }
  config["torch_dtype"] = dtype;
  if (spec->gguf_arch == "gpt2") config["activation_function"] = "gelu_new";
  plan.config_json = config.dump(2) + "\n";
  BLZ_ASSIGN_OR_RETURN(plan.extra_files, RebuildHfTokenizerFiles(header));
  return plan;
}

}  // namespace blz::exporter
