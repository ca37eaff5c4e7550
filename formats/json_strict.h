// Strict JSON parsing for headers read from untrusted files (safetensors headers, .blz archive
// headers, shard index files).
//
// nlohmann::json accepts duplicate object keys (it silently keeps the last one) and reports
// UTF-8 errors only inside strings. ParseJsonStrict adds what blz's formats require:
//   - the text is valid UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF) and
//     does not start with a byte order mark;
//   - no object anywhere holds the same key twice;
//   - objects and arrays nest at most kMaxJsonDepth deep.
// Used for every JSON document read from outside: file headers here, and manifests and
// registry answers in the registry and client layers.
#ifndef BLZ_FORMATS_JSON_STRICT_H_
#define BLZ_FORMATS_JSON_STRICT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace blz::formats {

inline constexpr int kMaxJsonDepth = 64;

// Returns the offset of the first byte that is not part of a valid UTF-8 sequence, or nullopt
// when all of `text` is valid UTF-8.
std::optional<size_t> FindInvalidUtf8(std::string_view text);

// Parses `text` as one JSON value (surrounding whitespace allowed, nothing else).
// `what` names the input in errors ("model.safetensors: header"); `base_offset` is the absolute
// byte offset of text[0] in its file, so errors can name absolute byte offsets.
// Errors: kCorruption.
Result<nlohmann::json> ParseJsonStrict(std::string_view text, std::string_view what,
                                       uint64_t base_offset);
// The same, keeping every object's keys in document order (nlohmann::ordered_json), still in
// O(n log n): for headers whose key order matters (.wdelta, formats/wdelta.h).
Result<nlohmann::ordered_json> ParseJsonStrictOrdered(std::string_view text,
                                                      std::string_view what,
                                                      uint64_t base_offset);

// Appends `key`: `value` at the end of the ordered_json object *obj in O(1) (its operator[]
// and emplace search the object's vector for the key first, O(size): building an object of n
// keys with them costs O(n^2)). REQUIRES: obj is an object without `key` (the caller knows the
// keys are distinct).
inline void AppendMember(nlohmann::ordered_json* obj, std::string key,
                         nlohmann::ordered_json value) {
  auto& members = obj->get_ref<nlohmann::ordered_json::object_t&>();
  static_cast<nlohmann::ordered_json::object_t::Container&>(members).emplace_back(
      std::move(key), std::move(value));
}

}  // namespace blz::formats

#endif  // BLZ_FORMATS_JSON_STRICT_H_
