// Parsing of what arrives on the wire: OCI repository names and tags, request targets (path +
// query), and byte ranges. Pure functions; no I/O.
#ifndef BLZ_REGISTRY_WIRE_H_
#define BLZ_REGISTRY_WIRE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace blz::registry {

inline constexpr size_t kMaxNameLength = 255;

// OCI repository name: '/'-separated components, each matching
// [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*, at most 255 bytes in all. kInvalidArgument otherwise,
// naming the offending component.
Status ValidateRepositoryName(std::string_view name);

// OCI tag: [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
bool IsValidTag(std::string_view tag);

// An origin-form target split into percent-decoded path components and query parameters.
// "/v2/a/b/blobs/uploads/?digest=sha256%3Aab" ->
//   components {"v2","a","b","blobs","uploads",""}, query {digest: "sha256:ab"}.
// The path is split on '/' BEFORE decoding, so "%2F" stays inside its component.
// Repository names must be built from raw_components: a name never needs percent-encoding,
// so a raw component holding '%' (e.g. "org%2fmodel") fails ValidateRepositoryName instead of
// being decoded into the two components "org/model".
struct Target {
  std::string path;                     // decoded path
  std::vector<std::string> components;  // path split on '/', without the leading empty one
  std::vector<std::string> raw_components;   // the same, still percent-encoded
  std::map<std::string, std::string> query;  // first value of each parameter wins
};

// Errors: kInvalidArgument (not origin-form, bad percent-encoding, NUL bytes).
Result<Target> ParseTarget(std::string_view target);

// Decodes %XX escapes (no '+' translation). Errors: kInvalidArgument.
Result<std::string> PercentDecode(std::string_view s);

// Is `name` (a query parameter name, percent-decoded, any case) one that can carry a secret?
// token, access_token, id_token, refresh_token, password, passwd, pass, secret,
// client_secret, key, api_key, apikey, auth, authorization, sig, signature, credential(s),
// session, plus anything ending in "token", "secret", "password" or "key".
bool IsSecretParameter(std::string_view name);

// `target` with the value of every secret-carrying query parameter (IsSecretParameter)
// replaced by REDACTED, for logs: "/v2/?token=abc&n=1" -> "/v2/?token=REDACTED&n=1".
// The path, the other parameters and the order are kept byte for byte; a parameter without
// '=' or with an undecodable name is kept. Never fails.
std::string RedactTarget(std::string_view target);

// A satisfiable byte range [first, last] (inclusive) of a resource of known size.
struct ByteRange {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t length() const { return last - first + 1; }
};

// Outcome of interpreting a `Range` request header (RFC 9110 §14) against a resource of
// `size` bytes. Only a single "bytes=" range is honoured: "a-b" (b clipped to size-1), "a-",
// "-n" (the last n bytes).
struct RangeRequest {
  enum class Kind : uint8_t {
    kWhole,          // no (or an ignorable: malformed, multi-range, non-bytes) Range: send 200
    kPartial,        // send 206 with `range`
    kUnsatisfiable,  // send 416 with Content-Range: bytes */size
  };
  Kind kind = Kind::kWhole;
  ByteRange range;
};
RangeRequest ParseRangeHeader(std::optional<std::string_view> header, uint64_t size);

// OCI chunk Content-Range "<first>-<last>" (inclusive; no unit). Also accepts the RFC form
// "bytes <first>-<last>/<total or *>". nullopt when malformed or first > last.
std::optional<ByteRange> ParseChunkRange(std::string_view header);

// Checks a request's message framing headers (RFC 9112 §6.1, §6.3), against request smuggling:
// `transfer_encodings` are the values of its Transfer-Encoding fields in order,
// `has_content_length` whether it has a Content-Length field, `http10` whether it is HTTP/1.0.
// The only transfer coding blz accepts is a single "chunked" (any case). Ok when there is no
// Transfer-Encoding, or exactly "chunked" without Content-Length on HTTP/1.1.
// Errors, each naming the field value (the session answers them and closes the connection):
//   kInvalidArgument (400): Transfer-Encoding on HTTP/1.0; an empty or malformed coding list;
//     "chunked" not the final coding or applied twice; Transfer-Encoding with Content-Length.
//   kUnsupported (501 Not Implemented): any other coding ("gzip", "identity", "xchunked").
Status CheckRequestFraming(const std::vector<std::string_view>& transfer_encodings,
                           bool has_content_length, bool http10);

// Parses a decimal uint64 (digits only, no sign, no overflow).
std::optional<uint64_t> ParseUint(std::string_view s);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_WIRE_H_
