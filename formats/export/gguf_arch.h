// Hugging Face <-> GGUF model mapping for `blz export --format gguf` (and GGUF -> HF): what
// llama.cpp's convert_hf_to_gguf.py does for the metadata, the tensor names, the q/k row
// permutation, the GPT-2 Conv1D transposes and the tokenizer, as a pure PLAN. No tensor data is
// read or written here: the export pipeline applies the plan (formats/export/).
//
// Architectures are rows of one table (gguf_arch.cc, kArchTable): the HF architecture names,
// the GGUF arch, HF name patterns -> GGUF names (with "{bid}" for the block number), which
// tensors are permuted or transposed, the hyperparameter keys and their GGUF types, the default
// of tie_word_embeddings and the tokenizer defaults. Adding an architecture is a table entry.
// Supported: LlamaForCausalLM, MistralForCausalLM ("llama"), Qwen2ForCausalLM ("qwen2"),
// GPT2LMHeadModel ("gpt2"). Every rule and every deliberate difference from the converter is
// in docs/gguf-export.md.
#ifndef BLZ_FORMATS_EXPORT_GGUF_ARCH_H_
#define BLZ_FORMATS_EXPORT_GGUF_ARCH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/export/cast.h"
#include "formats/gguf.h"

namespace blz::exporter {

// What the caller knows of a model (from a model directory or a .blz archive).
struct HfModelInfo {
  std::string name;         // general.name (the directory's base name)
  std::string config_json;  // config.json text (required)
  // Small text files by base name, when present: tokenizer.json, tokenizer_config.json,
  // vocab.json, merges.txt, special_tokens_map.json, generation_config.json, added_tokens.json.
  std::map<std::string, std::string> files;
  struct Tensor {
    std::string name;
    std::vector<uint64_t> shape;  // C order, outermost first
  };
  std::vector<Tensor> tensors;  // every tensor of the checkpoint (all shards), checkpoint order
};

// llama's q_proj / k_proj row permutation (convert_hf_to_gguf.py LlamaModel.permute).
enum class RowPermute : uint8_t { kNone, kLlamaQK };

struct GgufTensorPlan {
  std::string hf_name, gguf_name;
  RowPermute permute = RowPermute::kNone;
  uint32_t permute_heads = 0;  // n_head for q, n_head_kv for k (as the converter does)
  // GPT-2 Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out]; the converter writes
  // them transposed ([out, in]). Applied to the HF tensor before anything else.
  bool transpose = false;
  // The converter's policy: 1-D tensors, *_norm.weight, position_embd, and every tensor whose
  // name does not end in ".weight" (biases) stay F32 whatever the cast.
  bool keep_f32 = false;
  // The element type to write: F32 when keep_f32; F16 when the cast is Q8_0 / Q4_0 and the row
  // length (last dim of `shape`) is not a multiple of 32 (the converter's fallback); else the
  // cast.
  CastType type = CastType::kF32;
  std::vector<uint64_t> shape;  // output shape, C order (transposed when `transpose`); GGUF
                                // dims are this reversed
};

struct GgufModelPlan {
  std::string arch;  // "llama" | "qwen2" | "gpt2"
  // Every KV in the converter's order: general.architecture, general.type, general.name,
  // {arch}.* (hyperparameters, with general.file_type where the converter puts it),
  // general.quantization_version, tokenizer.ggml.* and tokenizer.chat_template.
  std::vector<formats::GgufKv> metadata;
  std::vector<GgufTensorPlan> tensors;  // output order (the checkpoint's); tied: no output.weight
};

// llama.cpp's general.file_type (llama_ftype) of a cast: F32 0, F16 1, Q4_0 2, Q8_0 7, BF16 32.
uint32_t LlamaFileType(CastType cast);

// Plans the GGUF export of `model` with tensors cast to `cast`.
// Errors:
//   kUnsupported     config.json's architectures[0] is not in the table ("architecture 'X' is
//                    not supported for GGUF export (known: GPT2LMHeadModel, LlamaForCausalLM,
//                    MistralForCausalLM, Qwen2ForCausalLM)"); a tensor the table cannot map
//                    (named); rope_scaling (not handled); a tokenizer kind not handled.
//   kInvalidArgument a config field missing or of the wrong type (named); no tokenizer ("no
//                    tokenizer.json or vocab.json + merges.txt in NAME"); inconsistent shapes
//                    (q_proj rows not divisible by 2 x heads, a transposed tensor not 2-D, a
//                    block number >= block_count); two tensors with one GGUF name; no token
//                    embedding; tie_word_embeddings false without lm_head.weight.
//   kCorruption      config.json or a tokenizer file that is not valid JSON.
//   kTooLarge        a tokenizer above the caps of gguf_tokenizer.h.
Result<GgufModelPlan> PlanHfToGguf(const HfModelInfo& model, CastType cast);

// Source row of output row `r` of a [rows, cols] matrix under permutation `p` with `heads`
// heads: the GGUF row r is HF row PermutedSourceRow(p, heads, rows, r, false), and the HF row r
// is GGUF row PermutedSourceRow(p, heads, rows, r, true). Equals numpy's
// w.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols) (forward).
// REQUIRES for kLlamaQK: heads > 0, rows % (2 * heads) == 0, r < rows (PlanHfToGguf checks the
// first two); otherwise `r` is returned unchanged. kNone returns `r`.
uint64_t PermutedSourceRow(RowPermute p, uint32_t heads, uint64_t rows, uint64_t r,
                           bool inverse);

// GGUF -> HF.
struct HfTensorPlan {
  std::string gguf_name, hf_name;
  RowPermute permute = RowPermute::kNone;  // apply with inverse = true
  uint32_t permute_heads = 0;
  bool transpose = false;  // GPT-2 Conv1D weights: transposed back to [in, out]
};

struct HfDirPlan {
  // config.json text: architectures, model_type, the hyperparameters under their HF names,
  // vocab_size, tie_word_embeddings (true when the GGUF has no output.weight), torch_dtype
  // (of token_embd: float32 / float16 / bfloat16; float32 for quantized types), bos/eos ids.
  std::string config_json;
  std::vector<HfTensorPlan> tensors;  // GGUF order
  // Tokenizer files that can be rebuilt: vocab.json + merges.txt for a "gpt2" tokenizer.
  std::map<std::string, std::string> extra_files;
};

// Plans the HF directory of a GGUF file of a known arch (the GGUF arch "llama" gives
// LlamaForCausalLM). Errors: kUnsupported (an arch not in the table, a GGUF tensor the table
// cannot map, named), kInvalidArgument (a missing or mistyped hyperparameter key, named;
// q/k rows not divisible by 2 x heads), kCorruption (malformed tokenizer arrays).
Result<HfDirPlan> PlanGgufToHf(const formats::GgufHeader& header);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_GGUF_ARCH_H_
