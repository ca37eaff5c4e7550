#include "formats/json_strict.h"

#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace blz::formats {
namespace {

// Builds the DOM from nlohmann's SAX events, rejecting duplicate keys and deep nesting as it
// goes. Every event costs O(log width) at most (one map insertion, or for ordered_json one hash
// set insertion and an append), so a parse is linear in the text up to that factor.
// (nlohmann's own callback parser re-scans the parent container at every end of an object, and
// its ordered_json parser looks every key up in the object's vector, linearly: a header with n
// tensors cost O(n^2) either way.)
//
// Pointers on the stack stay valid: an object's members live in a std::map (stable nodes) or,
// for ordered_json, a vector, which like an array only grows at its back while none of its
// elements is open.
template <typename Json>
class StrictDomBuilder {
 public:
  using json = Json;

  bool null() { return Put(json(nullptr)) != nullptr; }
  bool boolean(bool v) { return Put(json(v)) != nullptr; }
  bool number_integer(typename json::number_integer_t v) { return Put(json(v)) != nullptr; }
  bool number_unsigned(typename json::number_unsigned_t v) { return Put(json(v)) != nullptr; }
  bool number_float(typename json::number_float_t v, const typename json::string_t& /*text*/) {
    return Put(json(v)) != nullptr;
  }
  bool string(typename json::string_t& v) { return Put(json(std::move(v))) != nullptr; }
  bool binary(typename json::binary_t& /*v*/) {
    error_ = "binary values are not JSON";
    return false;
  }
  bool start_object(size_t /*elements*/) { return Open(nlohmann::detail::value_t::object); }
  bool start_array(size_t /*elements*/) { return Open(nlohmann::detail::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(typename json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool parse_error(size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    error_position_ = position;
    error_ = ex.what();
    syntax_error_ = true;
    return false;
  }

  json TakeRoot() { return std::move(root_); }
  const std::string& error() const { return error_; }
  bool syntax_error() const { return syntax_error_; }
  size_t error_position() const { return error_position_; }

 private:
  // Places `v` where the parser is: the root, the next array element, or the member named by
  // the last key. Returns where it now lives, or nullptr (error_ set) on a duplicate key.
  json* Put(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      auto& elements = top->template get_ref<typename json::array_t&>();
      elements.push_back(std::move(v));
      return &elements.back();
    }
    auto& members = top->template get_ref<typename json::object_t&>();
    if constexpr (kOrdered) {
      if (!keys_.back().insert(key_).second) {
        error_ = "duplicate key \"" + key_.substr(0, 200) + "\"";
        return nullptr;
      }
      AppendMember(top, std::move(key_), std::move(v));
      return &members.back().second;
    } else {
      auto [it, inserted] = members.emplace(std::move(key_), std::move(v));
      if (!inserted) {
        error_ = "duplicate key \"" + it->first.substr(0, 200) + "\"";
        return nullptr;
      }
      return &it->second;
    }
  }

  bool Open(nlohmann::detail::value_t type) {
    if (stack_.size() >= size_t(kMaxJsonDepth)) {
      error_ = "objects and arrays nest deeper than " + std::to_string(kMaxJsonDepth);
      return false;
    }
    json* v = Put(json(type));
    if (v == nullptr) return false;
    stack_.push_back(v);
    if constexpr (kOrdered) keys_.emplace_back();
    return true;
  }

  bool Close() {
    if (!stack_.empty()) stack_.pop_back();
    if constexpr (kOrdered) {
      if (!keys_.empty()) keys_.pop_back();
    }
    return true;
  }

  static constexpr bool kOrdered = std::is_same_v<Json, nlohmann::ordered_json>;

  json root_;
  std::vector<json*> stack_;
  std::vector<std::unordered_set<std::string>> keys_;  // ordered_json: per open container
  std::string key_;
  std::string error_;
  bool syntax_error_ = false;
  size_t error_position_ = 0;
};

}  // namespace

std::optional<size_t> FindInvalidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;  // continuation byte, overlong 2-byte lead (C0/C1) or F5..FF
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return i;
    }
    i += len;
  }
  return std::nullopt;
}

namespace {

template <typename Json>
Result<Json> ParseStrict(std::string_view text, std::string_view what, uint64_t base_offset) {
  const std::string w(what);
  if (auto bad = FindInvalidUtf8(text)) {
    return Corruption(w + ": not valid UTF-8 at byte offset " +
                      std::to_string(base_offset + *bad));
  }
  if (text.size() >= 3 && static_cast<unsigned char>(text[0]) == 0xEF &&
      static_cast<unsigned char>(text[1]) == 0xBB && static_cast<unsigned char>(text[2]) == 0xBF) {
    return Corruption(w + ": starts with a UTF-8 byte order mark at byte offset " +
                      std::to_string(base_offset));
  }
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{...}\0junk" would parse.
  // JSON text never holds a raw NUL (inside strings it must be escaped as \u0000).
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return Corruption(w + ": NUL byte at byte offset " + std::to_string(base_offset + nul) +
                      " (JSON text cannot contain one)");
  }
  StrictDomBuilder<Json> builder;
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &builder, nlohmann::json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    return Corruption(w + ": cannot parse JSON: " + e.what());
  }
  if (ok) return builder.TakeRoot();
  if (builder.syntax_error()) {
    // The position is the 1-based index of the character after the offending token's start.
    const size_t p = builder.error_position();
    const uint64_t at = base_offset + (p > 0 ? p - 1 : 0);
    return Corruption(w + ": not valid JSON at byte offset " + std::to_string(at) + ": " +
                      builder.error());
  }
  return Corruption(w + ": " + builder.error());
}

}  // namespace

Result<nlohmann::json> ParseJsonStrict(std::string_view text, std::string_view what,
                                       uint64_t base_offset) {
  return ParseStrict<nlohmann::json>(text, what, base_offset);
}

Result<nlohmann::ordered_json> ParseJsonStrictOrdered(std::string_view text,
                                                      std::string_view what,
                                                      uint64_t base_offset) {
  return ParseStrict<nlohmann::ordered_json>(text, what, base_offset);
}

}  // namespace blz::formats
