// Making untrusted text safe to print on a terminal.
//
// Tensor names, metadata keys, file names, paths, registry names and tags, and messages from
// a server are untrusted: printed raw, an ESC sequence in a tensor name rewrites the user's
// terminal, and a newline in a path splits a one-line error message. Every human-readable
// output passes such strings through one of these functions (JSON output is escaped by the
// JSON writer instead).
#ifndef BLZ_CORE_TEXT_H_
#define BLZ_CORE_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace blz {

// A printable, single-line form of `s`:
//   - valid printable UTF-8 (ASCII 0x20..0x7E and multi-byte characters) is kept as is;
//   - "\n", "\r", "\t" become the two characters \n, \r, \t;
//   - other C0 controls (< 0x20) and DEL (0x7F) become \xNN (two lower-case hex digits);
//   - C1 controls (U+0080..U+009F, which some terminals obey like ESC) and the invisible
//     direction and line controls U+061C, U+200E, U+200F, U+2028..U+202E, U+2066..U+2069
//     become \u{XXXX};
//   - bytes that are not valid UTF-8 (bad lead or continuation bytes, overlong forms,
//     surrogates, code points over U+10FFFF, truncated sequences) become \xNN, one per byte.
// A backslash is kept as is (so the form is for display, not a reversible encoding).
// The result contains no byte < 0x20, no 0x7F and no C1 control.
std::string EscapeForTerminal(std::string_view s);

// Like EscapeForTerminal, but for multi-line text produced by blz itself (tables, reports):
// '\n' is kept (and so is '\t'); everything else is escaped as above. Use EscapeForTerminal
// on each untrusted field when the layout matters (a newline in a name would otherwise
// start a new row); this is the safety net for whole rendered documents.
std::string EscapeTextForTerminal(std::string_view text);

// Parses `s` as an unsigned decimal of 1 to 19 digits (no sign, no spaces: the form of HTTP's
// Content-Length and byte ranges), so it always fits in 64 bits. False for anything else.
bool ParseDecimalU64(std::string_view s, uint64_t* out);

}  // namespace blz

#endif  // BLZ_CORE_TEXT_H_
