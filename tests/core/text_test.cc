#include "core/text.h"

#include <gtest/gtest.h>

#include <string>

namespace blz {
namespace {

using namespace std::string_literals;

// No byte a terminal could obey: C0, DEL, or a UTF-8-encoded C1 control (0xC2 0x80..0x9F).
bool TerminalSafe(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return false;
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      return false;
    }
  }
  return true;
}

TEST(TextTest, PrintableTextIsKept) {
  EXPECT_EQ(EscapeForTerminal("model.layers.0.attn.q_proj.weight"),
            "model.layers.0.attn.q_proj.weight");
  EXPECT_EQ(EscapeForTerminal("a b\\c ~"), "a b\\c ~");
  EXPECT_EQ(EscapeForTerminal("h\xC3\xA9llo \xE6\xBC\xA2 \xF0\x9F\x98\x80"),
            "h\xC3\xA9llo \xE6\xBC\xA2 \xF0\x9F\x98\x80");  // é, 漢, an emoji
  EXPECT_EQ(EscapeForTerminal(""), "");
}

TEST(TextTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(EscapeForTerminal("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(EscapeForTerminal("x\ny\rz\tw"), "x\\ny\\rz\\tw");
  EXPECT_EQ(EscapeForTerminal("nul\0here"s), "nul\\x00here");
  EXPECT_EQ(EscapeForTerminal("\x7f\x07"), "\\x7f\\x07");
  // C1 controls (CSI U+009B is ESC '[' on many terminals) and invisible reordering controls.
  EXPECT_EQ(EscapeForTerminal("a\xC2\x9B" "2Jb"), "a\\u{009B}2Jb");
  EXPECT_EQ(EscapeForTerminal("\xE2\x80\xAE" "evil"), "\\u{202E}evil");
  EXPECT_EQ(EscapeForTerminal("\xE2\x81\xA6"), "\\u{2066}");
}

TEST(TextTest, InvalidUtf8IsEscapedBytewise) {
  EXPECT_EQ(EscapeForTerminal("a\x9b" "b"), "a\\x9bb");       // lone continuation byte (C1 in Latin-1)
  EXPECT_EQ(EscapeForTerminal("\xC0\xAF"), "\\xc0\\xaf");     // overlong '/'
  EXPECT_EQ(EscapeForTerminal("\xED\xA0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(EscapeForTerminal("\xF4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
  EXPECT_EQ(EscapeForTerminal("x\xE6\xBC"), "x\\xe6\\xbc");   // truncated at the end
  EXPECT_EQ(EscapeForTerminal("\xE6\x1b"), "\\xe6\\x1b");     // truncated by a control
}

TEST(TextTest, EveryByteValueComesOutSafe) {
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += 7) {
      const std::string in{char(a), char(b), '\x9f', char(0xC2)};
      const std::string out = EscapeForTerminal(in);
      EXPECT_TRUE(TerminalSafe(out)) << a << " " << b;
      EXPECT_EQ(out.find('\n'), std::string::npos);
    }
  }
}

TEST(TextTest, MultiLineTextKeepsNewlinesAndTabs) {
  EXPECT_EQ(EscapeTextForTerminal("a\tb\nc\x1b[0m\r\n"), "a\tb\nc\\x1b[0m\\r\n");
  EXPECT_TRUE(TerminalSafe(EscapeTextForTerminal("\x1b\x07\x7f\xC2\x85")));
}

TEST(TextTest, ParseDecimalU64AcceptsOnlyPlainDigits) {
  uint64_t v = 7;
  EXPECT_TRUE(ParseDecimalU64("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseDecimalU64("9999999999999999999", &v));  // 19 digits: the most accepted
  EXPECT_EQ(v, 9999999999999999999ull);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1a", "0x10", "10000000000000000000"}) {
    uint64_t untouched = 42;
    EXPECT_FALSE(ParseDecimalU64(bad, &untouched)) << bad;
    EXPECT_EQ(untouched, 42u) << bad;
  }
}

}  // namespace
}  // namespace blz
