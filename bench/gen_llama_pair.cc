// gen_llama_pair: writes a synthetic Llama-shaped BF16 base -> fine-tune model pair as two
// Hugging Face directories, for the patch benchmark (bench/patch_bench.sh, issue 3).
//
//   gen_llama_pair BASE_DIR TARGET_DIR [--layers N] [--hidden H] [--intermediate I]
//                  [--vocab V] [--shard-gib G] [--rel R] [--seed S] [--threads T]
//
// Each directory gets config.json, model-0000k-of-0000n.safetensors shards (tensors assigned
// in HF order, a new shard once the current one holds >= G GiB) and
// model.safetensors.index.json. Tensors are the Llama-2 set: embed_tokens [V,H], per layer
// q/k/v/o_proj [H,H], gate/up_proj [I,H], down_proj [H,I], input/post_attention_layernorm [H],
// then norm [H] and lm_head [V,H]. Defaults (H 4096, I 11008, V 32000, 19 layers) give
// 4.11e9 parameters = 8.22 GB per model; 32 layers gives the 6.7B model (13.5 GB).
//
// Values: base matrices ~ N(0, 0.02), norms ~ 1 + N(0, 0.05), rounded to BF16 (round to
// nearest even). Target = BF16(base * (1 + r)), r ~ N(0, R) per element (default R 4e-3, about
// one BF16 ulp: roughly half the elements change, almost all by one or two ulps, and most
// exponents stay). The normals are Irwin-Hall approximations (sum of four 16-bit uniforms,
// tails cut at 3.46 sigma), which is fast and close enough for a byte-level benchmark.
// Every value depends only on (seed, tensor name, element index), so the output is the same
// for any thread count. Written streaming: memory is a few chunks per thread.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/status.h"
#include "formats/float_convert.h"

namespace {

constexpr uint64_t kChunkElems = uint64_t{1} << 22;  // 4 Mi elements (8 MiB BF16) per chunk

struct Options {
  std::string base_dir, target_dir;
  uint64_t layers = 19, hidden = 4096, intermediate = 11008, vocab = 32000;
  double shard_gib = 2.0, rel = 4e-3;
  uint64_t seed = 20261121;
  unsigned threads = 0;
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  bool is_norm = false;
  uint64_t elems() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
  }
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t HashName(const std::string& s) {  // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Approximately N(0,1) from 64 random bits (Irwin-Hall, n = 4).
float Normal(uint64_t bits) {
  uint32_t s = static_cast<uint32_t>(bits & 0xFFFF) + static_cast<uint32_t>((bits >> 16) & 0xFFFF) +
               static_cast<uint32_t>((bits >> 32) & 0xFFFF) + static_cast<uint32_t>(bits >> 48);
  // Mean 4 * 32767.5, std sqrt(4 / 12) * 65536.
  return (static_cast<float>(s) - 131070.0f) * (1.0f / 37837.23f);
}

void FillChunk(const TensorSpec& t, uint64_t tensor_key, uint64_t first, uint64_t count,
               double rel, uint16_t* base, uint16_t* target) {
  const float mean = t.is_norm ? 1.0f : 0.0f;
  const float stddev = t.is_norm ? 0.05f : 0.02f;
  const float r = static_cast<float>(rel);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t idx = (first + i) * 2;
    uint16_t b = blz::formats::F32ToBF16(mean + stddev * Normal(SplitMix64(tensor_key ^ idx)));
    float bf = blz::formats::BF16ToF32(b);
    base[i] = b;
    target[i] = blz::formats::F32ToBF16(bf * (1.0f + r * Normal(SplitMix64(tensor_key ^ (idx + 1)))));
  }
}

std::vector<TensorSpec> LlamaTensors(const Options& o) {
  std::vector<TensorSpec> t;
  const uint64_t h = o.hidden, im = o.intermediate;
  t.push_back({"model.embed_tokens.weight", {o.vocab, h}, false});
  for (uint64_t l = 0; l < o.layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"})
      t.push_back({p + "self_attn." + n + ".weight", {h, h}, false});
    t.push_back({p + "mlp.gate_proj.weight", {im, h}, false});
    t.push_back({p + "mlp.up_proj.weight", {im, h}, false});
    t.push_back({p + "mlp.down_proj.weight", {h, im}, false});
    t.push_back({p + "input_layernorm.weight", {h}, true});
    t.push_back({p + "post_attention_layernorm.weight", {h}, true});
  }
  t.push_back({"model.norm.weight", {h}, true});
  t.push_back({"lm_head.weight", {o.vocab, h}, false});
  return t;
}

// The safetensors header bytes for `tensors` (in data order): 8-byte LE length + JSON padded
// with spaces to a multiple of 8.
std::string SafetensorsHeader(const std::vector<const TensorSpec*>& tensors) {
  nlohmann::ordered_json j;
  j["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const TensorSpec* t : tensors) {
    uint64_t end = off + t->elems() * 2;
    j[t->name] = {{"dtype", "BF16"}, {"shape", t->shape}, {"data_offsets", {off, end}}};
    off = end;
  }
  std::string json = j.dump();
  while (json.size() % 8 != 0) json.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json;
}

blz::Status WriteShard(const Options& o, const std::string& file,
                       const std::vector<const TensorSpec*>& tensors) {
  std::string header = SafetensorsHeader(tensors);
  BLZ_ASSIGN_OR_RETURN(blz::AtomicFile base_out, blz::AtomicFile::Create(o.base_dir + "/" + file));
  BLZ_ASSIGN_OR_RETURN(blz::AtomicFile target_out,
                       blz::AtomicFile::Create(o.target_dir + "/" + file));
  BLZ_RETURN_IF_ERROR(base_out.Append(header));
  BLZ_RETURN_IF_ERROR(target_out.Append(header));
  const unsigned nt = o.threads;
  std::vector<std::vector<uint16_t>> base_buf(nt, std::vector<uint16_t>(kChunkElems));
  std::vector<std::vector<uint16_t>> target_buf(nt, std::vector<uint16_t>(kChunkElems));
  for (const TensorSpec* t : tensors) {
    const uint64_t key = SplitMix64(o.seed ^ HashName(t->name));
    const uint64_t n = t->elems();
    for (uint64_t first = 0; first < n; first += kChunkElems * nt) {
      std::vector<std::thread> workers;
      std::vector<uint64_t> counts(nt, 0);
      for (unsigned w = 0; w < nt; ++w) {
        uint64_t start = first + w * kChunkElems;
        if (start >= n) break;
        counts[w] = std::min(kChunkElems, n - start);
        workers.emplace_back(FillChunk, std::cref(*t), key, start, counts[w], o.rel,
                             base_buf[w].data(), target_buf[w].data());
      }
      for (std::thread& th : workers) th.join();
      for (unsigned w = 0; w < nt && counts[w] > 0; ++w) {
        auto bytes = [&](const std::vector<uint16_t>& v) {
          return blz::ByteSpan(reinterpret_cast<const uint8_t*>(v.data()), counts[w] * 2);
        };
        BLZ_RETURN_IF_ERROR(base_out.Append(bytes(base_buf[w])));
        BLZ_RETURN_IF_ERROR(target_out.Append(bytes(target_buf[w])));
      }
    }
  }
  BLZ_RETURN_IF_ERROR(base_out.Commit(/*no_replace=*/true));
  return target_out.Commit(/*no_replace=*/true);
}

blz::Status Run(Options o) {
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  std::error_code ec;
  for (const std::string& d : {o.base_dir, o.target_dir}) {
    std::filesystem::create_directories(d, ec);
    if (ec) return blz::InvalidArgument("cannot create " + d + ": " + ec.message());
  }
  std::vector<TensorSpec> tensors = LlamaTensors(o);
  const uint64_t shard_cap = static_cast<uint64_t>(o.shard_gib * (1ull << 30));
  std::vector<std::vector<const TensorSpec*>> shards(1);
  uint64_t cur = 0, total = 0;
  for (const TensorSpec& t : tensors) {
    if (cur >= shard_cap) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(&t);
    cur += t.elems() * 2;
    total += t.elems() * 2;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  char name[64];
  for (size_t s = 0; s < shards.size(); ++s) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::fprintf(stderr, "writing %s (%zu tensors)\n", name, shards[s].size());
    BLZ_RETURN_IF_ERROR(WriteShard(o, name, shards[s]));
    for (const TensorSpec* t : shards[s]) weight_map[t->name] = name;
  }
  index["weight_map"] = weight_map;
  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", o.hidden},
      {"intermediate_size", o.intermediate},
      {"num_hidden_layers", o.layers},
      {"num_attention_heads", o.hidden / 128},
      {"num_key_value_heads", o.hidden / 128},
      {"vocab_size", o.vocab},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-5},
      {"torch_dtype", "bfloat16"},
      {"tie_word_embeddings", false}};
  for (const std::string& d : {o.base_dir, o.target_dir}) {
    BLZ_RETURN_IF_ERROR(blz::WriteFileAtomic(d + "/config.json", config.dump(2) + "\n"));
    BLZ_RETURN_IF_ERROR(
        blz::WriteFileAtomic(d + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  std::printf("%" PRIu64 " tensors, %" PRIu64 " parameters, %" PRIu64
              " tensor bytes per model, %zu shards\n",
              static_cast<uint64_t>(tensors.size()), total / 2, total, shards.size());
  return blz::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gen_llama_pair: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--layers") o.layers = std::strtoull(next(), nullptr, 10);
    else if (a == "--hidden") o.hidden = std::strtoull(next(), nullptr, 10);
    else if (a == "--intermediate") o.intermediate = std::strtoull(next(), nullptr, 10);
    else if (a == "--vocab") o.vocab = std::strtoull(next(), nullptr, 10);
    else if (a == "--shard-gib") o.shard_gib = std::strtod(next(), nullptr);
    else if (a == "--rel") o.rel = std::strtod(next(), nullptr);
    else if (a == "--seed") o.seed = std::strtoull(next(), nullptr, 10);
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "gen_llama_pair: unknown option %s\n", a.c_str());
      return 2;
    } else pos.push_back(a);
  }
  if (pos.size() != 2 || o.hidden == 0 || o.intermediate == 0 || o.vocab == 0 ||
      o.shard_gib <= 0) {
    std::fprintf(stderr,
                 "usage: gen_llama_pair BASE_DIR TARGET_DIR [--layers N] [--hidden H] "
                 "[--intermediate I] [--vocab V] [--shard-gib G] [--rel R] [--seed S] "
                 "[--threads T]\n");
    return 2;
  }
  o.base_dir = pos[0];
  o.target_dir = pos[1];
  blz::Status st = Run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "gen_llama_pair: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
