// Where an S3 store lives and how to reach it: parsed from a storage URL plus the standard AWS
// environment variables.
//
// URL form (issue 25, `blz serve --storage`):
//   s3://BUCKET[/PREFIX]?endpoint=URL&region=R[&path_style=1]
// endpoint is "http://HOST[:PORT]" or "https://HOST[:PORT]" (percent-encoded or not); without
// it, AWS_ENDPOINT_URL_S3 is used, else "https://s3.REGION.amazonaws.com". region defaults to
// AWS_REGION, else "us-east-1". path_style=1 puts the bucket in the path
// (http://HOST/BUCKET/KEY); otherwise it is virtual-host style (http://BUCKET.HOST/KEY).
//
// Credentials come only from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN (optional). They are never part of an error message.
#ifndef BLZ_STORE_S3_S3_CONFIG_H_
#define BLZ_STORE_S3_S3_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "store/s3/sigv4.h"

namespace blz::store::s3 {

struct S3Endpoint {
  bool tls = false;
  std::string host;   // "127.0.0.1", "s3.us-east-1.amazonaws.com"
  uint16_t port = 0;  // 80 / 443 when the URL has none
};

struct S3Config {
  std::string bucket;
  std::string prefix;    // without leading '/', may be empty; NOT applied by S3Client
  std::string endpoint;  // "http://127.0.0.1:7480"; empty until ApplyS3Environment fills it
  std::string region;    // empty until ApplyS3Environment fills it
  bool path_style = false;
  Credentials credentials;
  // Per network operation (connect, each write, each read): one that makes no progress for
  // this long fails with kUnavailable.
  std::chrono::milliseconds timeout{30000};
  // Attempts per request (1 = no retry) and the first backoff (doubled each retry, capped at 8 s).
  int max_attempts = 4;
  std::chrono::milliseconds backoff{200};
  // When set, called before each retry with the attempt that failed (1-based) and its error
  // (for logs and metrics; the Status never holds credentials).
  std::function<void(int failed_attempt, const Status& error)> on_retry;
};

// Parses "s3://BUCKET[/PREFIX]?endpoint=URL&region=R&path_style=1". Unknown parameters, an
// empty or invalid bucket name (3-63 of a-z 0-9 . -) and a non-http(s) endpoint are
// kInvalidArgument. Credentials are left empty.
Result<S3Config> ParseS3Url(std::string_view url);

// Reads a variable; returns nullptr when unset. Default: std::getenv.
using EnvReader = std::function<const char*(const char*)>;

// Fills what the URL left open from the environment: the credentials (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the region (AWS_REGION, default "us-east-1") and
// the endpoint (AWS_ENDPOINT_URL_S3, default "https://s3.REGION.amazonaws.com"). Values given
// in the URL win. Errors: kUnauthorized when the access key or the secret is unset or empty
// (the message names the variable, never a value); kInvalidArgument for a bad endpoint.
Status ApplyS3Environment(S3Config* config, const EnvReader& getenv_fn = nullptr);

// Splits "http[s]://HOST[:PORT][/]" into its parts. kInvalidArgument for anything else
// (another scheme, a path, user info, a bad port).
Result<S3Endpoint> ParseS3Endpoint(std::string_view url);

// Decodes %XX escapes ('+' stays '+'). kInvalidArgument on a malformed escape.
Result<std::string> PercentDecode(std::string_view s);

}  // namespace blz::store::s3

#endif  // BLZ_STORE_S3_S3_CONFIG_H_
