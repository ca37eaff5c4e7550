#include "formats/export/gguf_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "formats/json_strict.h"

namespace blz::exporter {

using formats::GgufKv;
using formats::GgufType;
using formats::GgufValue;
using json = nlohmann::json;

namespace {

constexpr std::string_view kSpecialTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};

const json* Member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}

// A file parsed as JSON, or nullopt when absent.
Result<std::optional<json>> ParseFile(const std::map<std::string, std::string>& files,
                                      const std::string& name) {
  auto it = files.find(name);
  if (it == files.end()) return std::optional<json>();
  BLZ_ASSIGN_OR_RETURN(json j, formats::ParseJsonStrict(it->second, name, 0));
  return std::optional<json>(std::move(j));
}

// A token id from JSON: a non-negative integer below kMaxVocabTokens.
Result<uint64_t> TokenId(const json& v, const std::string& where) {
  if (!v.is_number_integer()) return Corruption(where + ": token id is not an integer");
  if (v.is_number_unsigned() || v.get<int64_t>() >= 0) {
    uint64_t id = v.get<uint64_t>();
    if (id >= kMaxVocabTokens) {
      return TooLarge(where + ": token id " + std::to_string(id) + " is not below the cap " +
                      std::to_string(kMaxVocabTokens));
    }
    return id;
  }
  return InvalidArgument(where + ": negative token id " + std::to_string(v.get<int64_t>()));
}

struct AddedToken {
  uint64_t id = 0;
  std::string content;
  bool special = false;
};

// The content of a {typ}_token entry: a string or {"content": string}.
std::optional<std::string> TokenContent(const json* entry) {
  if (entry == nullptr) return std::nullopt;
  if (entry->is_string()) return entry->get<std::string>();
  if (const json* c = Member(*entry, "content"); c != nullptr && c->is_string()) {
    return c->get<std::string>();
  }
  return std::nullopt;
}

// convert_hf_to_gguf.py's does_token_look_special.
bool LooksSpecial(std::string_view t) {
  auto starts = [&](std::string_view p) { return t.size() >= p.size() && t.substr(0, p.size()) == p; };
  auto ends = [&](std::string_view s) {
    return t.size() >= s.size() && t.substr(t.size() - s.size()) == s;
  };
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts("<|") && ends("|>")) return true;
  if (starts("<\xef\xbd\x9c") && ends("\xef\xbd\x9c>")) return true;  // <｜ ... ｜>
  if (starts("<unused") && ends(">")) return true;
  return false;
}

bool IsByteToken(std::string_view t) {
  auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  };
  return t.size() == 6 && t.substr(0, 3) == "<0x" && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

// A vocabulary object {token: id} into `by_id` (id -> token). Returns the number of entries.
Result<uint64_t> ReadVocabObject(const json& vocab, const std::string& where,
                                 std::map<uint64_t, std::string>* by_id) {
  if (!vocab.is_object()) return Corruption(where + " is not an object");
  if (vocab.size() > kMaxVocabTokens) {
    return TooLarge(where + ": " + std::to_string(vocab.size()) + " tokens exceed the cap " +
                    std::to_string(kMaxVocabTokens));
  }
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    BLZ_ASSIGN_OR_RETURN(uint64_t id, TokenId(it.value(), where + "['" + it.key() + "']"));
    (*by_id)[id] = it.key();
  }
  return static_cast<uint64_t>(vocab.size());
}

// tokenizer.json's added_tokens list.
Result<std::vector<AddedToken>> ReadAddedTokensList(const json& tok) {
  std::vector<AddedToken> out;
  const json* added = Member(tok, "added_tokens");
  if (added == nullptr || added->is_null()) return out;
  if (!added->is_array()) return Corruption("tokenizer.json: added_tokens is not a list");
  if (added->size() > kMaxVocabTokens) return TooLarge("tokenizer.json: too many added_tokens");
  for (size_t i = 0; i < added->size(); ++i) {
    const json& a = (*added)[i];
    std::string where = "tokenizer.json: added_tokens[" + std::to_string(i) + "]";
    const json* id = Member(a, "id");
    const json* content = Member(a, "content");
    if (id == nullptr || content == nullptr || !content->is_string()) {
      return Corruption(where + ": needs an integer 'id' and a string 'content'");
    }
    AddedToken t;
    BLZ_ASSIGN_OR_RETURN(t.id, TokenId(*id, where));
    t.content = content->get<std::string>();
    const json* special = Member(a, "special");
    t.special = special != nullptr && special->is_boolean() && special->get<bool>();
    out.push_back(std::move(t));
  }
  return out;
}

// The slow tokenizer's added tokens: tokenizer_config added_tokens_decoder, added_tokens.json.
Result<std::vector<AddedToken>> ReadSlowAddedTokens(const std::optional<json>& tok_config,
                                                    const std::optional<json>& added_json) {
  std::vector<AddedToken> out;
  std::set<uint64_t> seen;
  if (tok_config) {
    if (const json* dec = Member(*tok_config, "added_tokens_decoder"); dec && dec->is_object()) {
      for (auto it = dec->begin(); it != dec->end(); ++it) {
        std::string where = "tokenizer_config.json: added_tokens_decoder['" + it.key() + "']";
        const std::string& key = it.key();
        if (key.empty() || key.size() > 9 ||
            !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          return Corruption(where + ": key is not a token id");
        }
        AddedToken t;
        t.id = std::stoull(key);
        if (t.id >= kMaxVocabTokens) return TooLarge(where + ": token id above the cap");
        std::optional<std::string> content = TokenContent(&it.value());
        if (!content) return Corruption(where + ": no string 'content'");
        t.content = *content;
        const json* special = Member(it.value(), "special");
        t.special = special != nullptr && special->is_boolean() && special->get<bool>();
        if (seen.insert(t.id).second) out.push_back(std::move(t));
      }
    }
  }
  if (added_json) {
    if (!added_json->is_object()) return Corruption("added_tokens.json is not an object");
    for (auto it = added_json->begin(); it != added_json->end(); ++it) {
      AddedToken t;
      BLZ_ASSIGN_OR_RETURN(t.id, TokenId(it.value(), "added_tokens.json['" + it.key() + "']"));
      t.content = it.key();
      if (seen.insert(t.id).second) out.push_back(std::move(t));
    }
  }
  return out;
}

// merges.txt as SpecialVocab._try_load_merges_txt reads it.
Result<std::vector<std::string>> ParseMergesTxt(std::string_view text) {
  std::vector<std::string> merges;
  auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
  };
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.size() - pos
                                                                           : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    while (!line.empty() && is_space(line.front())) line.remove_prefix(1);
    while (!line.empty() && is_space(line.back())) line.remove_suffix(1);
    if (first) {
      first = false;
      if (!line.empty() && line.front() == '#') continue;
    }
    if (line.empty()) continue;
    std::vector<std::string_view> parts;
    size_t i = 0;
    while (i < line.size() && parts.size() < 3) {
      while (i < line.size() && is_space(line[i])) ++i;
      size_t b = i;
      while (i < line.size() && !is_space(line[i])) ++i;
      if (i > b) parts.push_back(line.substr(b, i - b));
    }
    if (parts.size() != 2) continue;  // malformed: the converter warns and skips
    if (merges.size() >= kMaxVocabMerges) return TooLarge("merges.txt: too many merges");
    merges.push_back(std::string(parts[0]) + " " + std::string(parts[1]));
  }
  return merges;
}

// tokenizer.json model.merges: ["a b", ...] or [["a", "b"], ...] (spaces inside a pair encoded
// as U+0120, as the converter does).
Result<std::vector<std::string>> ReadJsonMerges(const json& merges) {
  std::vector<std::string> out;
  if (!merges.is_array() || merges.empty()) return out;
  if (merges.size() > kMaxVocabMerges) return TooLarge("tokenizer.json: too many merges");
  out.reserve(merges.size());
  const bool strings = merges[0].is_string();
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string where = "tokenizer.json: model.merges[" + std::to_string(i) + "]";
    if (strings) {
      if (!m.is_string()) return Corruption(where + " is not a string");
      out.push_back(m.get<std::string>());
      continue;
    }
    if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string()) {
      return Corruption(where + " is not a string or a pair of strings");
    }
    std::string joined;
    for (int k = 0; k < 2; ++k) {
      if (k == 1) joined += ' ';
      for (char c : m[k].get<std::string>()) {
        if (c == ' ') {
          joined += "\xc4\xa0";  // chr(ord(' ') + 256) = U+0120
        } else {
          joined += c;
        }
      }
    }
    out.push_back(std::move(joined));
  }
  return out;
}

void SetAdd(std::vector<std::pair<std::string, bool>>* add, const std::string& typ, bool v) {
  for (auto& [k, val] : *add) {
    if (k == typ) {
      val = v;
      return;
    }
  }
  add->emplace_back(typ, v);
}

// SpecialVocab: special ids, add_*_token flags and the chat template.
Status LoadSpecialVocab(const std::optional<json>& tok, const std::optional<json>& tok_config_in,
                        const json& config, std::optional<uint64_t> n_vocab, GgufVocab* v) {
  std::optional<json> tok_config = tok_config_in;
  std::vector<AddedToken> added;
  if (tok) {
    BLZ_ASSIGN_OR_RETURN(added, ReadAddedTokensList(*tok));
  }
  auto set_special = [&](const std::string& typ, const json* id) -> Status {
    if (id == nullptr || !id->is_number_integer()) return Status::Ok();
    if (!id->is_number_unsigned() && id->get<int64_t>() < 0) {
      return InvalidArgument("invalid value for special token type " + typ + ": " +
                             std::to_string(id->get<int64_t>()));
    }
    uint64_t tid = id->get<uint64_t>();
    if (n_vocab && tid >= *n_vocab) return Status::Ok();  // out of range: skipped
    if (tid > UINT32_MAX) return Status::Ok();
    for (const auto& [k, unused] : v->special_ids) {
      if (k == typ) return Status::Ok();  // the first one found wins
    }
    v->special_ids.emplace_back(typ, static_cast<uint32_t>(tid));
    return Status::Ok();
  };
  if (tok && tok_config && tok_config->is_object()) {
    // cls stands in for a missing bos, sep for a missing eos.
    std::optional<std::string> bos = TokenContent(Member(*tok_config, "bos_token"));
    std::optional<std::string> eos = TokenContent(Member(*tok_config, "eos_token"));
    if (!bos) {
      if (const json* cls = Member(*tok_config, "cls_token"); cls && !cls->is_null()) {
        (*tok_config)["bos_token"] = *cls;
        bos = TokenContent(cls);
      }
    }
    if (!eos) {
      if (const json* sep = Member(*tok_config, "sep_token"); sep && !sep->is_null()) {
        (*tok_config)["eos_token"] = *sep;
        eos = TokenContent(sep);
      }
    }
    // A TemplateProcessing post-processor: a leading bos / trailing eos means add_*_token.
    if (const json* pp = Member(*tok, "post_processor"); pp && pp->is_object()) {
      const json* type = Member(*pp, "type");
      const json* single = Member(*pp, "single");
      if (type && type->is_string() && type->get<std::string>() == "TemplateProcessing" &&
          single && single->is_array() && single->size() > 1) {
        auto special_id = [](const json& item) -> std::optional<std::string> {
          const json* st = Member(item, "SpecialToken");
          const json* id = st ? Member(*st, "id") : nullptr;
          if (id && id->is_string()) return id->get<std::string>();
          return std::nullopt;
        };
        if (auto first = special_id(single->front())) SetAdd(&v->add_special, "bos", first == bos);
        if (auto last = special_id(single->back())) SetAdd(&v->add_special, "eos", last == eos);
      }
    }
  }
  if (tok_config && tok_config->is_object()) {
    if (const json* ct = Member(*tok_config, "chat_template"); ct && ct->is_string()) {
      v->chat_template = ct->get<std::string>();
    }
    for (std::string_view typ_view : kSpecialTypes) {
      std::string typ(typ_view);
      if (const json* a = Member(*tok_config, "add_" + typ + "_token"); a && a->is_boolean()) {
        SetAdd(&v->add_special, typ, a->get<bool>());
      }
      std::optional<std::string> content = TokenContent(Member(*tok_config, typ + "_token"));
      if (!content) continue;
      for (const AddedToken& t : added) {
        if (t.content == *content) {
          json id = t.id;
          BLZ_RETURN_IF_ERROR(set_special(typ, &id));
          break;
        }
      }
    }
  }
  for (std::string_view typ_view : kSpecialTypes) {
    std::string typ(typ_view);
    BLZ_RETURN_IF_ERROR(set_special(typ, Member(config, typ + "_token_id")));
  }
  return Status::Ok();
}

// The named special tokens (tokenizer_config.json, special_tokens_map.json), as transformers'
// all_special_tokens: bos .. mask and additional_special_tokens.
std::set<std::string> NamedSpecialTokens(const std::optional<json>& tok_config,
                                         const std::optional<json>& special_map) {
  std::set<std::string> out;
  for (const std::optional<json>* src : {&tok_config, &special_map}) {
    if (!*src || !(*src)->is_object()) continue;
    for (std::string_view typ : kSpecialTypes) {
      if (auto c = TokenContent(Member(**src, std::string(typ) + "_token"))) out.insert(*c);
    }
    if (const json* extra = Member(**src, "additional_special_tokens"); extra && extra->is_array()) {
      for (const json& e : *extra) {
        if (auto c = TokenContent(&e)) out.insert(*c);
      }
    }
  }
  return out;
}

bool IsLlamaHfTokenizer(const json& tok) {
  const json* model = Member(tok, "model");
  const json* type = model ? Member(*model, "type") : nullptr;
  const json* fallback = model ? Member(*model, "byte_fallback") : nullptr;
  const json* decoder = Member(tok, "decoder");
  const json* dtype = decoder ? Member(*decoder, "type") : nullptr;
  return type && type->is_string() && type->get<std::string>() == "BPE" && fallback &&
         fallback->is_boolean() && fallback->get<bool>() && dtype && dtype->is_string() &&
         dtype->get<std::string>() == "Sequence";
}

// LlamaHfVocab + _set_vocab_llama_hf.
Result<GgufVocab> ConvertLlamaHf(const json& tok, const std::optional<json>& tok_config,
                                 const std::optional<json>& special_map, const json& config) {
  GgufVocab v;
  v.model = "llama";
  v.pre = "default";
  std::map<uint64_t, std::string> by_id;
  const json* mv = Member(*Member(tok, "model"), "vocab");
  if (mv == nullptr) return Corruption("tokenizer.json: model has no 'vocab'");
  BLZ_ASSIGN_OR_RETURN(uint64_t base, ReadVocabObject(*mv, "tokenizer.json: model.vocab", &by_id));
  BLZ_ASSIGN_OR_RETURN(std::vector<AddedToken> added, ReadAddedTokensList(tok));
  for (const AddedToken& a : added) by_id[a.id] = a.content;
  std::set<std::string> named = NamedSpecialTokens(tok_config, special_map);
  std::set<uint64_t> special_ids;
  std::map<std::string, uint64_t> id_of;
  for (const auto& [id, text] : by_id) id_of.emplace(text, id);
  for (const std::string& s : named) {
    if (auto it = id_of.find(s); it != id_of.end()) special_ids.insert(it->second);
  }
  v.tokens.reserve(base);
  for (uint64_t id = 0; id < base; ++id) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      return InvalidArgument("tokenizer.json: no token has id " + std::to_string(id) +
                             " (the vocabulary has " + std::to_string(base) + " entries)");
    }
    GgufTokenType t = IsByteToken(it->second)       ? GgufTokenType::kByte
                      : special_ids.count(id) != 0 ? GgufTokenType::kControl
                                                   : GgufTokenType::kNormal;
    v.tokens.push_back(it->second);
    v.token_types.push_back(static_cast<int32_t>(t));
    v.scores.push_back(-1000.0f);
  }
  std::vector<AddedToken> extra;
  for (const AddedToken& a : added) {
    if (a.id >= base) extra.push_back(a);
  }
  std::sort(extra.begin(), extra.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  for (const AddedToken& a : extra) {
    if (a.id != v.tokens.size()) {
      return InvalidArgument("tokenizer.json: added token '" + a.content + "' has id " +
                             std::to_string(a.id) + ", expected " +
                             std::to_string(v.tokens.size()) + " (ids must follow the vocabulary)");
    }
    GgufTokenType t = named.count(a.content) != 0 ? GgufTokenType::kControl
                                                  : GgufTokenType::kUserDefined;
    v.tokens.push_back(a.content);
    v.token_types.push_back(static_cast<int32_t>(t));
    v.scores.push_back(-1000.0f);
  }
  BLZ_RETURN_IF_ERROR(LoadSpecialVocab(tok, tok_config, config, v.tokens.size(), &v));
  return v;
}

// get_vocab_base + _set_vocab_gpt2 (byte-level BPE).
Result<GgufVocab> ConvertByteLevel(const std::optional<json>& tok,
                                   const std::map<std::string, std::string>& files,
                                   const std::optional<json>& tok_config, const json& config,
                                   const TokenizerDefaults& defaults) {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = defaults.bpe_pre;
  std::map<uint64_t, std::string> by_id;
  std::vector<AddedToken> added;
  uint64_t count = 0;
  if (tok) {
    const json* model = Member(*tok, "model");
    const json* vocab = model ? Member(*model, "vocab") : nullptr;
    if (vocab == nullptr) return Corruption("tokenizer.json: model has no 'vocab'");
    BLZ_ASSIGN_OR_RETURN(count, ReadVocabObject(*vocab, "tokenizer.json: model.vocab", &by_id));
    BLZ_ASSIGN_OR_RETURN(added, ReadAddedTokensList(*tok));
    const json* merges = Member(*model, "merges");
    if (merges != nullptr) {
      BLZ_ASSIGN_OR_RETURN(v.merges, ReadJsonMerges(*merges));
    }
  } else {
    BLZ_ASSIGN_OR_RETURN(std::optional<json> vocab, ParseFile(files, "vocab.json"));
    BLZ_ASSIGN_OR_RETURN(std::optional<json> added_json, ParseFile(files, "added_tokens.json"));
    if (!vocab) return InvalidArgument("vocab.json is missing");
    BLZ_ASSIGN_OR_RETURN(count, ReadVocabObject(*vocab, "vocab.json", &by_id));
    BLZ_ASSIGN_OR_RETURN(added, ReadSlowAddedTokens(tok_config, added_json));
  }
  if (v.merges.empty()) {
    if (auto it = files.find("merges.txt"); it != files.end()) {
      BLZ_ASSIGN_OR_RETURN(v.merges, ParseMergesTxt(it->second));
    }
  }
  std::map<uint64_t, const AddedToken*> added_by_id;
  for (const AddedToken& a : added) {
    if (by_id.emplace(a.id, a.content).second) ++count;
    by_id[a.id] = a.content;
    added_by_id[a.id] = &a;
  }
  uint64_t vocab_size = count;
  if (const json* vs = Member(config, "vocab_size"); vs && !vs->is_null()) {
    BLZ_ASSIGN_OR_RETURN(vocab_size, TokenId(*vs, "config.json: vocab_size"));
  }
  if (!by_id.empty() && by_id.rbegin()->first >= vocab_size) {
    return InvalidArgument("token '" + by_id.rbegin()->second + "' has id " +
                           std::to_string(by_id.rbegin()->first) + ", not below vocab_size " +
                           std::to_string(vocab_size));
  }
  v.tokens.reserve(vocab_size);
  v.token_types.reserve(vocab_size);
  for (uint64_t id = 0; id < vocab_size; ++id) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.token_types.push_back(static_cast<int32_t>(GgufTokenType::kUnused));
      continue;
    }
    std::string text = it->second;
    GgufTokenType type = GgufTokenType::kNormal;
    if (auto a = added_by_id.find(id); a != added_by_id.end()) {
      if (a->second->special || LooksSpecial(text)) {
        type = GgufTokenType::kControl;
      } else {
        type = GgufTokenType::kUserDefined;
        // Pre-normalize user-defined spaces ("\u2581" -> " "), as the converter does.
        for (size_t p = text.find("\xe2\x96\x81"); p != std::string::npos;
             p = text.find("\xe2\x96\x81", p + 1)) {
          text.replace(p, 3, " ");
        }
      }
    }
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(static_cast<int32_t>(type));
  }
  BLZ_RETURN_IF_ERROR(LoadSpecialVocab(tok, tok_config, config, std::nullopt, &v));
  return v;
}

// Appends a u64 little-endian length and the bytes.
void AppendGgufString(std::string* raw, std::string_view s) {
  uint64_t n = s.size();
  for (int i = 0; i < 8; ++i) raw->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  raw->append(s);
}

GgufValue StringArray(const std::vector<std::string>& items) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.element_type = GgufType::kString;
  v.count = items.size();
  size_t total = 0;
  for (const std::string& s : items) total += 8 + s.size();
  v.raw.reserve(total);
  for (const std::string& s : items) AppendGgufString(&v.raw, s);
  return v;
}

template <typename T>
GgufValue ScalarArray(GgufType type, const std::vector<T>& items) {
  static_assert(sizeof(T) == 4);
  GgufValue v;
  v.type = GgufType::kArray;
  v.element_type = type;
  v.count = items.size();
  v.raw.resize(items.size() * 4);
  for (size_t i = 0; i < items.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &items[i], 4);
    for (int b = 0; b < 4; ++b) v.raw[i * 4 + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
  }
  return v;
}

// The string elements of array `key` (nullopt when absent).
Result<std::optional<std::vector<std::string>>> StringItems(const formats::GgufHeader& header,
                                                            std::string_view key) {
  const GgufValue* v = formats::FindGgufValue(header, key);
  if (v == nullptr) return std::optional<std::vector<std::string>>();
  if (v->type != GgufType::kArray || v->element_type != GgufType::kString) {
    return Corruption(std::string(key) + ": not an array of strings");
  }
  std::vector<std::string> out;
  std::string_view rest = v->raw;
  formats::GgufItemView item;
  for (uint64_t i = 0; i < v->count; ++i) {
    if (!formats::NextGgufItem(GgufType::kString, &rest, &item)) {
      return Corruption(std::string(key) + ": element " + std::to_string(i) + " is malformed");
    }
    out.emplace_back(item.str);
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

}  // namespace

Result<GgufVocab> ConvertHfTokenizer(const std::map<std::string, std::string>& files,
                                     const json& config, const TokenizerDefaults& defaults,
                                     std::string_view source) {
  try {
    BLZ_ASSIGN_OR_RETURN(std::optional<json> tok, ParseFile(files, "tokenizer.json"));
    BLZ_ASSIGN_OR_RETURN(std::optional<json> tok_config, ParseFile(files, "tokenizer_config.json"));
    BLZ_ASSIGN_OR_RETURN(std::optional<json> special_map,
                         ParseFile(files, "special_tokens_map.json"));
    if (tok) {
      const json* model = Member(*tok, "model");
      const json* type = model ? Member(*model, "type") : nullptr;
      if (model == nullptr || !model->is_object()) {
        return Corruption("tokenizer.json: no 'model' object");
      }
      if (type && type->is_string() && type->get<std::string>() != "BPE") {
        return Unsupported("tokenizer.json: tokenizer model '" + type->get<std::string>() +
                           "' is not supported for GGUF export (only BPE)");
      }
      if (defaults.try_llama_hf && IsLlamaHfTokenizer(*tok)) {
        return ConvertLlamaHf(*tok, tok_config, special_map, config);
      }
      return ConvertByteLevel(tok, files, tok_config, config, defaults);
    }
    if (files.count("vocab.json") != 0 && files.count("merges.txt") != 0) {
      return ConvertByteLevel(std::nullopt, files, tok_config, config, defaults);
    }
    if (files.count("tokenizer.model") != 0) {
      return Unsupported(std::string(source) +
                         ": a SentencePiece tokenizer.model without tokenizer.json is not "
                         "supported for GGUF export");
    }
    return InvalidArgument("no tokenizer.json or vocab.json + merges.txt in " +
                           std::string(source));
  } catch (const json::exception& e) {
    return Corruption(std::string(source) + ": tokenizer files: " + e.what());
  }
}

std::vector<GgufKv> GgufVocabKvs(const GgufVocab& vocab) {
  std::vector<GgufKv> kvs;
  kvs.push_back({"tokenizer.ggml.model", GgufValue::String(vocab.model)});
  kvs.push_back({"tokenizer.ggml.pre", GgufValue::String(vocab.pre)});
  kvs.push_back({"tokenizer.ggml.tokens", StringArray(vocab.tokens)});
  if (!vocab.scores.empty()) {
    kvs.push_back({"tokenizer.ggml.scores", ScalarArray(GgufType::kFloat32, vocab.scores)});
  }
  kvs.push_back({"tokenizer.ggml.token_type", ScalarArray(GgufType::kInt32, vocab.token_types)});
  if (!vocab.merges.empty()) {
    kvs.push_back({"tokenizer.ggml.merges", StringArray(vocab.merges)});
  }
  // gguf-py's key names (constants.py; "seperator" is its spelling).
  for (const auto& [typ, id] : vocab.special_ids) {
    std::string name = typ == "pad"   ? "padding"
                       : typ == "sep" ? "seperator"
                       : typ == "unk" ? "unknown"
                                      : typ;
    kvs.push_back({"tokenizer.ggml." + name + "_token_id", GgufValue::U32(id)});
  }
  // GGUFWriter has add_add_{bos,eos,sep}_token only; the converter skips the other types.
  for (const auto& [typ, add] : vocab.add_special) {
    if (typ != "bos" && typ != "eos" && typ != "sep") continue;
    kvs.push_back({"tokenizer.ggml.add_" + typ + "_token", GgufValue::Bool(add)});
  }
  if (vocab.chat_template) {
    kvs.push_back({"tokenizer.chat_template", GgufValue::String(*vocab.chat_template)});
  }
  return kvs;
}

Result<std::map<std::string, std::string>> RebuildHfTokenizerFiles(
    const formats::GgufHeader& header) {
  std::map<std::string, std::string> files;
  const GgufValue* model = formats::FindGgufValue(header, "tokenizer.ggml.model");
  if (model == nullptr || model->AsString() == nullptr || *model->AsString() != "gpt2") {
    return files;
  }
  BLZ_ASSIGN_OR_RETURN(auto tokens, StringItems(header, "tokenizer.ggml.tokens"));
  BLZ_ASSIGN_OR_RETURN(auto merges, StringItems(header, "tokenizer.ggml.merges"));
  if (!tokens) return Corruption("tokenizer.ggml.model is gpt2 but tokenizer.ggml.tokens is absent");
  std::vector<int32_t> types(tokens->size(), static_cast<int32_t>(GgufTokenType::kNormal));
  if (const GgufValue* tt = formats::FindGgufValue(header, "tokenizer.ggml.token_type")) {
    if (tt->type != GgufType::kArray || tt->element_type != GgufType::kInt32 ||
        tt->count != tokens->size() || tt->raw.size() != tt->count * 4) {
      return Corruption("tokenizer.ggml.token_type: not an int32 array of one type per token");
    }
    for (size_t i = 0; i < types.size(); ++i) {
      uint32_t bits = 0;
      for (int b = 0; b < 4; ++b) {
        bits |= static_cast<uint32_t>(static_cast<uint8_t>(tt->raw[i * 4 + b])) << (8 * b);
      }
      types[i] = static_cast<int32_t>(bits);
    }
  }
  std::string vocab = "{";
  bool first = true;
  // vocab.json is an object: a token text that repeats (or that only differs in invalid UTF-8,
  // replaced by U+FFFD) is written once, with its first id; a repeated key would make the file
  // invalid for blz's strict JSON reader.
  std::set<std::string> written;
  for (size_t i = 0; i < tokens->size(); ++i) {
    if (types[i] == static_cast<int32_t>(GgufTokenType::kUnused) &&
        (*tokens)[i] == "[PAD" + std::to_string(i) + "]") {
      continue;
    }
    std::string key = json((*tokens)[i]).dump(-1, ' ', false, json::error_handler_t::replace);
    if (!written.insert(key).second) continue;
    if (!first) vocab += ",";
    first = false;
    vocab += key;
    vocab += ":" + std::to_string(i);
  }
  vocab += "}";
  files["vocab.json"] = std::move(vocab);
  std::string merges_txt = "#version: 0.2\n";
  if (merges) {
    for (const std::string& m : *merges) merges_txt += m + "\n";
  }
  files["merges.txt"] = std::move(merges_txt);
  return files;
}

}  // namespace blz::exporter
