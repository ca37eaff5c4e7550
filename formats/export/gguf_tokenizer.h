// Tokenizer conversion of a GGUF export: the Hugging Face tokenizer files of a model
// (tokenizer.json, or vocab.json + merges.txt, with tokenizer_config.json and config.json) into
// the `tokenizer.ggml.*` metadata that llama.cpp's convert_hf_to_gguf.py writes, and back
// (GGUF arrays -> vocab.json + merges.txt). Pure planning on text: no tokenizer is run.
//
// The rules (each one documented in docs/gguf-export.md, section "Tokenizer"):
//   - "llama" model (SentencePiece-style BPE in tokenizer.json: model.type BPE, byte_fallback
//     true, decoder Sequence), only when the architecture allows it (the converter's
//     LlamaHfVocab): tokens by id, then the added tokens past the base vocabulary; types BYTE
//     for <0xNN>, CONTROL for the named special tokens, NORMAL otherwise (USER_DEFINED for added
//     non-special tokens); every score -1000.0 (what LlamaHfVocab writes); pre "default"; no
//     merges.
//   - "gpt2" model (byte-level BPE: tokenizer.json or vocab.json + merges.txt; the converter's
//     get_vocab_base + _set_vocab_gpt2): ids 0 .. vocab_size-1 with vocab_size from config.json
//     (else the tokenizer's size); holes are "[PAD{id}]" of type UNUSED; added tokens are
//     CONTROL when special or when they look special (<|...|>, <pad>, ...), else USER_DEFINED;
//     the rest NORMAL; pre from the architecture table (the converter hashes a tokenization
//     instead; we cannot run a tokenizer); merges from tokenizer.json (strings or pairs) or
//     merges.txt.
//   - Special token ids and add_*_token flags as the converter's SpecialVocab: tokenizer_config
//     {bos,eos,unk,sep,pad,cls,mask}_token matched against tokenizer.json's added tokens, then
//     config.json {typ}_token_id; the first found wins; add_{typ}_token from tokenizer_config
//     (and from a simple TemplateProcessing post-processor); chat_template when a string.
#ifndef BLZ_FORMATS_EXPORT_GGUF_TOKENIZER_H_
#define BLZ_FORMATS_EXPORT_GGUF_TOKENIZER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/gguf.h"

namespace blz::exporter {

// Caps on what a tokenizer may declare (checked before anything is allocated).
inline constexpr uint64_t kMaxVocabTokens = 1ull << 24;   // 16.7 M tokens
inline constexpr uint64_t kMaxVocabMerges = 1ull << 24;

// llama.cpp's token types (gguf TokenType); the values are the GGUF int32 values.
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A converted vocabulary, before it is encoded as metadata.
struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "gpt2" | "llama"
  std::string pre;                   // tokenizer.ggml.pre
  std::vector<std::string> tokens;   // by id
  std::vector<int32_t> token_types;  // GgufTokenType values, one per token
  std::vector<float> scores;         // "llama" only (one per token), empty otherwise
  std::vector<std::string> merges;   // "a b"; empty for "llama"
  // ("bos", id), ("eos", id), ... in the order SpecialVocab finds them.
  std::vector<std::pair<std::string, uint32_t>> special_ids;
  // ("bos", true), ... in the order SpecialVocab sets them.
  std::vector<std::pair<std::string, bool>> add_special;
  std::optional<std::string> chat_template;
};

// What the architecture table says about tokenizers.
struct TokenizerDefaults {
  std::string bpe_pre = "default";  // tokenizer.ggml.pre for byte-level BPE ("gpt-2", ...)
  bool try_llama_hf = false;        // accept SentencePiece-style tokenizer.json ("llama" model)
};

// Converts the tokenizer files in `files` (by base name: tokenizer.json, tokenizer_config.json,
// vocab.json, merges.txt, added_tokens.json, special_tokens_map.json) of a model whose parsed
// config.json is `config`. `source` names the model in errors.
// Errors: kInvalidArgument (no tokenizer.json and no vocab.json + merges.txt: "no tokenizer.json
// or vocab.json + merges.txt in SOURCE"; an id out of range, a hole in a "llama" vocabulary, a
// negative special id), kUnsupported (a tokenizer model other than BPE, a tokenizer.model-only
// SentencePiece model), kCorruption (a file that is not valid JSON or of the wrong shape, naming
// the file and field), kTooLarge (more than kMaxVocabTokens tokens or kMaxVocabMerges merges).
Result<GgufVocab> ConvertHfTokenizer(const std::map<std::string, std::string>& files,
                                     const nlohmann::json& config,
                                     const TokenizerDefaults& defaults, std::string_view source);

// The tokenizer.ggml.* metadata of `vocab` in the converter's order: model, pre, tokens,
// scores (llama), token_type, merges, {typ}_token_id (u32), add_{typ}_token (bool),
// tokenizer.chat_template. Array values are built directly in their encoded form.
std::vector<formats::GgufKv> GgufVocabKvs(const GgufVocab& vocab);

// GGUF -> HF: for a "gpt2" tokenizer in `header`, vocab.json (every token that is not an UNUSED
// "[PAD{id}]" hole, by id; a repeated token text only with its first id) and merges.txt
// ("#version: 0.2" then one merge a line). Returns an empty map for other tokenizer models or a
// GGUF without a tokenizer.
// Errors: kCorruption (tokenizer arrays of the wrong type or malformed).
Result<std::map<std::string, std::string>> RebuildHfTokenizerFiles(
    const formats::GgufHeader& header);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_GGUF_TOKENIZER_H_
