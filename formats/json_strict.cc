#include "formats/json_strict.h"

#include <string>
#include <unordered_set>
#include <vector>

namespace blz::formats {
namespace {

// Thrown from the parse callback to stop parsing early; caught in ParseJsonStrict.
struct StrictJsonError {
  std::string message;
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

Result<nlohmann::json> ParseJsonStrict(std::string_view text, std::string_view what,
                                       uint64_t base_offset) {
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
  // One set of keys per open object; arrays push an empty marker so depth is tracked.
  std::vector<std::unordered_set<std::string>> keys;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event,
                      nlohmann::json& parsed) -> bool {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        keys.emplace_back();
        if (keys.size() > size_t(kMaxJsonDepth)) {
          throw StrictJsonError{"objects and arrays nest deeper than " +
                                std::to_string(kMaxJsonDepth)};
        }
        break;
      case E::object_end:
      case E::array_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case E::key:
        if (!keys.empty()) {
          const std::string& k = parsed.get_ref<const std::string&>();
          if (!keys.back().insert(k).second) {
            throw StrictJsonError{"duplicate key \"" + k.substr(0, 200) + "\""};
          }
        }
        break;
      case E::value:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback,
                                 /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const StrictJsonError& e) {
    return Corruption(w + ": " + e.message);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based position of the offending character.
    const uint64_t at = base_offset + (e.byte > 0 ? e.byte - 1 : 0);
    return Corruption(w + ": not valid JSON at byte offset " + std::to_string(at) + ": " +
                      e.what());
  } catch (const std::exception& e) {
    return Corruption(w + ": cannot parse JSON: " + e.what());
  }
}

}  // namespace blz::formats
