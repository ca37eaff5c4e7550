// Tokenizer conversion of formats/export/gguf_tokenizer.h: SentencePiece-style tokenizer.json
// ("llama" model), byte-level BPE (holes, added tokens, both merges forms, vocab.json +
// merges.txt), special ids, the encoded metadata and the GGUF -> vocab.json/merges.txt rebuild.
#include "formats/export/gguf_tokenizer.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/json_strict.h"

namespace blz::exporter {
namespace {

using json = nlohmann::json;

constexpr int32_t kNormal = 1, kControl = 3, kUser = 4, kUnused = 5, kByte = 6;

// A tiny SentencePiece-style (byte_fallback) tokenizer.json, as transformers writes for Llama 2.
std::map<std::string, std::string> SpmFiles() {
  json vocab = {{"<unk>", 0}, {"<s>", 1},  {"</s>", 2},    {"<0x00>", 3},
                {"<0xFF>", 4}, {"\xe2\x96\x81" "a", 5}, {"b", 6}};
  json tok = {
      {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"vocab", vocab},
                 {"merges", {"\xe2\x96\x81 a", "a b"}}}},
      {"decoder", {{"type", "Sequence"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}},
        {{"id", 7}, {"content", "<extra>"}, {"special", false}}}},
  };
  json cfg = {{"bos_token", "<s>"},       {"eos_token", "</s>"}, {"unk_token", "<unk>"},
              {"add_bos_token", true},     {"add_eos_token", false},
              {"chat_template", "{{ x }}"}};
  return {{"tokenizer.json", tok.dump()}, {"tokenizer_config.json", cfg.dump()}};
}

TokenizerDefaults LlamaDefaults() {
  TokenizerDefaults d;
  d.bpe_pre = "llama-bpe";
  d.try_llama_hf = true;
  return d;
}

TEST(GgufTokenizer, SentencePieceStyleGivesLlamaModel) {
  json config = {{"vocab_size", 8}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  auto v = ConvertHfTokenizer(SpmFiles(), config, LlamaDefaults(), "spm");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->model, "llama");
  EXPECT_EQ(v->pre, "default");
  ASSERT_EQ(v->tokens.size(), 8u);
  EXPECT_EQ(v->tokens[5], "\xe2\x96\x81" "a");
  EXPECT_EQ(v->tokens[7], "<extra>");
  EXPECT_EQ(v->token_types,
            (std::vector<int32_t>{kControl, kControl, kControl, kByte, kByte, kNormal, kNormal,
                                  kUser}));
  ASSERT_EQ(v->scores.size(), 8u);
  for (float s : v->scores) EXPECT_EQ(s, -1000.0f);  // what LlamaHfVocab writes
  EXPECT_TRUE(v->merges.empty());  // _set_vocab_llama_hf does not load merges
  EXPECT_EQ(v->special_ids, (std::vector<std::pair<std::string, uint32_t>>{
                                {"bos", 1}, {"eos", 2}, {"unk", 0}}));
  EXPECT_EQ(v->add_special,
            (std::vector<std::pair<std::string, bool>>{{"bos", true}, {"eos", false}}));
  ASSERT_TRUE(v->chat_template.has_value());
  EXPECT_EQ(*v->chat_template, "{{ x }}");

  std::vector<formats::GgufKv> kvs = GgufVocabKvs(*v);
  std::vector<std::string> keys;
  for (const auto& kv : kvs) keys.push_back(kv.key);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                      "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                      "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                      "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token",
                      "tokenizer.ggml.add_eos_token", "tokenizer.chat_template"}));
  EXPECT_EQ(kvs[3].value.element_type, formats::GgufType::kFloat32);
  EXPECT_EQ(kvs[3].value.Item(4).AsFloat(), -1000.0);
  EXPECT_EQ(kvs[4].value.element_type, formats::GgufType::kInt32);
  EXPECT_EQ(kvs[4].value.Item(3).AsInt(), kByte);
  EXPECT_EQ(kvs[2].value.Item(7).str, "<extra>");
  // The arrays are well-formed: the header encodes.
  formats::GgufHeader h;
  h.metadata = kvs;
  EXPECT_TRUE(formats::EncodeGgufHeader(h).ok());
}

TEST(GgufTokenizer, SentencePieceStyleIsByteLevelWhenArchDoesNotAllowLlama) {
  TokenizerDefaults d;
  d.bpe_pre = "qwen2";
  auto v = ConvertHfTokenizer(SpmFiles(), json{{"vocab_size", 8}}, d, "spm");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "qwen2");
  EXPECT_EQ(v->merges.size(), 2u);
}

TEST(GgufTokenizer, ByteLevelHolesAddedTokensAndPairMerges) {
  json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}};
  json tok = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"a", "b"}), json::array({"a b", "c"})})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens",
       {{{"id", 3}, {"content", "<|im_end|>"}, {"special", false}},  // looks special
        {{"id", 4}, {"content", "my\xe2\x96\x81word"}, {"special", false}},
        {{"id", 5}, {"content", "<eos>"}, {"special", true}}}},
  };
  json tok_config = {{"eos_token", "<eos>"}, {"pad_token", {{"content", "<|im_end|>"}}}};
  std::map<std::string, std::string> files = {{"tokenizer.json", tok.dump()},
                                              {"tokenizer_config.json", tok_config.dump()}};
  TokenizerDefaults d;
  d.bpe_pre = "qwen2";
  json config = {{"vocab_size", 8}, {"bos_token_id", 5}, {"eos_token_id", 0}};
  auto v = ConvertHfTokenizer(files, config, d, "m");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->tokens, (std::vector<std::string>{"a", "b", "ab", "<|im_end|>", "my word", "<eos>",
                                                 "[PAD6]", "[PAD7]"}));
  EXPECT_EQ(v->token_types, (std::vector<int32_t>{kNormal, kNormal, kNormal, kControl, kUser,
                                                  kControl, kUnused, kUnused}));
  EXPECT_TRUE(v->scores.empty());
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b", "a\xc4\xa0" "b c"}));
  // tokenizer_config first (eos, pad), then config.json (bos; its eos loses).
  EXPECT_EQ(v->special_ids, (std::vector<std::pair<std::string, uint32_t>>{
                                {"eos", 5}, {"pad", 3}, {"bos", 5}}));
  std::vector<formats::GgufKv> kvs = GgufVocabKvs(*v);
  bool has_padding = false;
  for (const auto& kv : kvs) has_padding = has_padding || kv.key == "tokenizer.ggml.padding_token_id";
  EXPECT_TRUE(has_padding);
}

TEST(GgufTokenizer, VocabJsonAndMergesTxt) {
  json vocab = {{"a", 0}, {"b", 1}, {"<|endoftext|>", 2}};
  json tok_config = {{"added_tokens_decoder",
                      {{"2", {{"content", "<|endoftext|>"}, {"special", true}}}}},
                     {"bos_token", "<|endoftext|>"}};
  std::map<std::string, std::string> files = {
      {"vocab.json", vocab.dump()},
      {"merges.txt", "#version: 0.2\na b\n\nmalformed line here\n  b  a \n"},
      {"tokenizer_config.json", tok_config.dump()}};
  TokenizerDefaults d;
  d.bpe_pre = "gpt-2";
  auto v = ConvertHfTokenizer(files, json{{"bos_token_id", 2}, {"eos_token_id", 2}}, d, "m");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->tokens, (std::vector<std::string>{"a", "b", "<|endoftext|>"}));
  EXPECT_EQ(v->token_types, (std::vector<int32_t>{kNormal, kNormal, kControl}));
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b", "b a"}));
  // Without tokenizer.json, SpecialVocab finds the ids in config.json only.
  EXPECT_EQ(v->special_ids,
            (std::vector<std::pair<std::string, uint32_t>>{{"bos", 2}, {"eos", 2}}));
}

TEST(GgufTokenizer, RebuildVocabJsonAndMergesTxt) {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.tokens = {"a", "b", "\"q\"", "[PAD3]"};
  v.token_types = {kNormal, kNormal, kNormal, kUnused};
  v.merges = {"a b"};
  formats::GgufHeader h;
  h.metadata = GgufVocabKvs(v);
  auto files = RebuildHfTokenizerFiles(h);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  auto vocab = json::parse((*files)["vocab.json"]);
  EXPECT_EQ(vocab, (json{{"a", 0}, {"b", 1}, {"\"q\"", 2}}));
  EXPECT_EQ((*files)["merges.txt"], "#version: 0.2\na b\n");
  // Converting the rebuilt files gives the same vocabulary back.
  TokenizerDefaults d;
  d.bpe_pre = "gpt-2";
  auto again = ConvertHfTokenizer(*files, json{{"vocab_size", 4}}, d, "m");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->tokens, v.tokens);
  EXPECT_EQ(again->token_types, v.token_types);
  EXPECT_EQ(again->merges, v.merges);
}

// Found by fuzz_hf_plan: a GGUF vocabulary with a repeated token text (here "a" at 0 and 2, and
// two invalid UTF-8 tokens that both become U+FFFD) gave a vocab.json with a repeated key, which
// blz's strict JSON reader (and so the way back to GGUF) refuses.
TEST(GgufTokenizer, RebuildVocabJsonWritesRepeatedTokenTextsOnce) {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.tokens = {"a", "b", "a", "\xff", "\xfe", "[PAD5]"};
  v.token_types = {kNormal, kNormal, kControl, kNormal, kNormal, kUnused};
  formats::GgufHeader h;
  h.metadata = GgufVocabKvs(v);
  auto files = RebuildHfTokenizerFiles(h);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  auto strict = formats::ParseJsonStrict((*files)["vocab.json"], "vocab.json", 0);
  ASSERT_TRUE(strict.ok()) << strict.status().ToString();
  EXPECT_EQ(*strict, (json{{"a", 0}, {"b", 1}, {"\xef\xbf\xbd", 3}}));
  TokenizerDefaults d;
  d.bpe_pre = "gpt-2";
  auto again = ConvertHfTokenizer(*files, json{{"vocab_size", 6}}, d, "m");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->tokens, (std::vector<std::string>{"a", "b", "[PAD2]", "\xef\xbf\xbd", "[PAD4]",
                                                     "[PAD5]"}));
}

TEST(GgufTokenizer, Rejections) {
  TokenizerDefaults d;
  // No tokenizer at all.
  auto v = ConvertHfTokenizer({}, json::object(), d, "dir");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "no tokenizer.json or vocab.json + merges.txt in dir");
  // vocab.json without merges.txt is not a tokenizer either.
  v = ConvertHfTokenizer({{"vocab.json", "{}"}}, json::object(), d, "dir");
  EXPECT_EQ(v.status().code(), Code::kInvalidArgument);
  // A Unigram tokenizer.
  json uni = {{"model", {{"type", "Unigram"}, {"vocab", json::array()}}}};
  v = ConvertHfTokenizer({{"tokenizer.json", uni.dump()}}, json::object(), d, "dir");
  EXPECT_EQ(v.status().code(), Code::kUnsupported);
  // Not JSON.
  v = ConvertHfTokenizer({{"tokenizer.json", "{"}}, json::object(), d, "dir");
  EXPECT_EQ(v.status().code(), Code::kCorruption);
  // An id past config.json's vocab_size.
  json tok = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 9}}}}}};
  v = ConvertHfTokenizer({{"tokenizer.json", tok.dump()}}, json{{"vocab_size", 4}}, d, "dir");
  EXPECT_EQ(v.status().code(), Code::kInvalidArgument);
  // A negative id.
  tok = {{"model", {{"type", "BPE"}, {"vocab", {{"a", -1}}}}}};
  v = ConvertHfTokenizer({{"tokenizer.json", tok.dump()}}, json::object(), d, "dir");
  EXPECT_EQ(v.status().code(), Code::kInvalidArgument);
  // A huge id.
  tok = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 1ull << 40}}}}}};
  v = ConvertHfTokenizer({{"tokenizer.json", tok.dump()}}, json::object(), d, "dir");
  EXPECT_EQ(v.status().code(), Code::kTooLarge);
  // A hole in a SentencePiece-style vocabulary.
  auto files = SpmFiles();
  json spm = json::parse(files["tokenizer.json"]);
  spm["model"]["vocab"].erase("b");
  spm["model"]["vocab"]["b"] = 9;
  files["tokenizer.json"] = spm.dump();
  v = ConvertHfTokenizer(files, json::object(), LlamaDefaults(), "dir");
  EXPECT_EQ(v.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace blz::exporter
