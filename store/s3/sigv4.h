// AWS Signature Version 4 for S3: the Authorization header of a request and presigned
// (query-string) URLs. Pure functions: no clock, no network, no environment.
//
// Spec followed: AWS S3 API reference, "Authenticating Requests (AWS Signature Version 4)":
//   - "Signature Calculations for the Authorization Header: Transferring Payload in a Single
//     Chunk" (sig-v4-header-based-auth), and
//   - "Authenticating Requests: Using Query Parameters" (sigv4-query-string-auth).
// S3's rules differ from the generic SigV4 ones in two ways that matter here: the path is
// encoded ONCE and never normalized ("/a//b/../c" is signed as is), and '/' in the path is kept
// while every other byte outside A-Za-z0-9-._~ is %XX-encoded (upper-case hex).
//
// Secrets: the secret key enters only the HMAC chain; no returned string contains it. The
// session token appears (as it must) in the signed headers / the presigned query.
#ifndef BLZ_STORE_S3_SIGV4_H_
#define BLZ_STORE_S3_SIGV4_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace blz::store::s3 {

struct Credentials {
  std::string access_key_id;      // e.g. "AKIAIOSFODNN7EXAMPLE"
  std::string secret_access_key;  // never printed or logged
  std::string session_token;      // empty unless temporary credentials
};

// The payload hash of a request whose body is not hashed (S3 accepts it over TLS and plain HTTP).
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
// SHA-256 of the empty string: the payload hash of a request without a body.
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

using QueryParams = std::vector<std::pair<std::string, std::string>>;  // decoded name, value
using HeaderList = std::vector<std::pair<std::string, std::string>>;   // name, value

// S3 URI encoding: bytes A-Za-z0-9 '-' '.' '_' '~' are kept, '/' is kept iff !encode_slash,
// everything else becomes %XX (upper-case hex). Query names and values use encode_slash=true.
std::string UriEncode(std::string_view s, bool encode_slash);

// "20130524T000000Z" (ISO 8601 basic, UTC) for `unix_seconds`.
std::string AmzDate(int64_t unix_seconds);

// The canonical query string: each name and value UriEncode'd, sorted by encoded name (then
// value), joined "n1=v1&n2=v2"; a parameter without a value is "name=".
std::string CanonicalQueryString(const QueryParams& query);

// One request to sign with the Authorization header.
struct SigV4Request {
  std::string method;  // "GET", "PUT", ...
  std::string path;    // decoded absolute path, e.g. "/examplebucket/photos/a b.jpg" or "/"
  QueryParams query;   // decoded
  // Headers to sign and send. MUST include "host" (with ":port" when the port is not the
  // scheme's default). Names are matched case-insensitively. x-amz-date, x-amz-content-sha256
  // and (when the credentials have a session token) x-amz-security-token are added when absent.
  HeaderList headers;
  // Hex SHA-256 of the body, kEmptyPayloadSha256, or kUnsignedPayload. Sent as
  // x-amz-content-sha256 and used as the last line of the canonical request.
  std::string payload_hash;
};

struct SigV4Signed {
  std::string canonical_request;  // the exact text that was hashed
  std::string string_to_sign;
  std::string signed_headers;     // "host;range;x-amz-content-sha256;x-amz-date"
  std::string signature;          // 64 lower-case hex
  std::string authorization;      // the value of the Authorization header
  // Every header to send besides Authorization (the input ones plus those added), as given
  // (not lower-cased), in canonical (sorted) order.
  HeaderList headers;
};

// Signs `request` at time `unix_seconds` for `region` (e.g. "us-east-1") and `service` ("s3").
// Errors: kInvalidArgument when the host header is missing, the method/region/service or the
// access key is empty, or a header name/value contains CR or LF.
Result<SigV4Signed> SignRequest(const SigV4Request& request, const Credentials& credentials,
                                std::string_view region, std::string_view service,
                                int64_t unix_seconds);

// The largest X-Amz-Expires S3 accepts: 7 days.
inline constexpr int64_t kMaxPresignExpiresSeconds = 604800;

struct PresignRequest {
  std::string method = "GET";
  std::string host;    // the Host the URL will be fetched from (with ":port" when not default)
  std::string path;    // decoded absolute path, as in SigV4Request
  QueryParams query;   // extra parameters (e.g. response-content-type), decoded
  int64_t expires_seconds = 900;  // 1..kMaxPresignExpiresSeconds
};

struct Presigned {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;
  // The encoded path and query to append to "scheme://host": "/test.txt?X-Amz-Algorithm=...
  // &X-Amz-Signature=HEX" (the query in canonical order, the signature last).
  std::string path_and_query;
};

// A presigned URL for `request`: only "host" is signed and the payload is UNSIGNED-PAYLOAD;
// X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders and (with a
// session token) X-Amz-Security-Token are added to the query and signed.
// Errors: kInvalidArgument for expires outside 1..604800, an empty host, method or access key.
Result<Presigned> PresignUrl(const PresignRequest& request, const Credentials& credentials,
                             std::string_view region, std::string_view service,
                             int64_t unix_seconds);

}  // namespace blz::store::s3

#endif  // BLZ_STORE_S3_SIGV4_H_
