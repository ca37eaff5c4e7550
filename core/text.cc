#include "core/text.h"

#include <cstdint>
#include <cstdio>

namespace blz {
namespace {

void AppendHexByte(std::string* out, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\x");
  out->push_back(kHex[c >> 4]);
  out->push_back(kHex[c & 0xF]);
}

// The length (2..4) of the valid UTF-8 sequence at s[i] and its code point, or 0 when the
// bytes at s[i] are not one (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c >= 0xC2 && c <= 0xDF) {
    if (!cont(1)) return 0;
    *cp = (uint32_t(c & 0x1F) << 6) | (b(1) & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    *cp = (uint32_t(c & 0x0F) << 12) | (uint32_t(b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    if (*cp < 0x800 || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    *cp = (uint32_t(c & 0x07) << 18) | (uint32_t(b(1) & 0x3F) << 12) |
          (uint32_t(b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    if (*cp < 0x10000 || *cp > 0x10FFFF) return 0;
    return 4;
  }
  return 0;
}

// C1 controls and the invisible characters that reorder or break displayed text.
bool IsHiddenControl(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

std::string Escape(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(char(c));
      ++i;
      continue;
    }
    if (c < 0x80) {
      if (keep_newlines && (c == '\n' || c == '\t')) {
        out.push_back(char(c));
      } else if (c == '\n') {
        out.append("\\n");
      } else if (c == '\r') {
        out.append("\\r");
      } else if (c == '\t') {
        out.append("\\t");
      } else {
        AppendHexByte(&out, c);
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(s, i, &cp);
    if (n == 0) {
      AppendHexByte(&out, c);
      ++i;
      continue;
    }
    if (IsHiddenControl(cp)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u{%04X}", static_cast<unsigned>(cp));
      out.append(buf);
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace

std::string EscapeForTerminal(std::string_view s) { return Escape(s, /*keep_newlines=*/false); }

std::string EscapeTextForTerminal(std::string_view text) {
  return Escape(text, /*keep_newlines=*/true);
}

bool ParseDecimalU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + uint64_t(c - '0');
  }
  *out = n;
  return true;
}

}  // namespace blz
