// Internal to store/s3: one HTTP/1.1 exchange on a fresh TCP or TLS connection, with a timeout
// on connect and on every read and write. Boost error codes never leave s3_http.cc.
#ifndef BLZ_STORE_S3_S3_HTTP_H_
#define BLZ_STORE_S3_S3_HTTP_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "store/s3/s3_config.h"
#include "store/s3/sigv4.h"

namespace blz::store::s3 {

struct HttpExchange {
  std::string method;           // "GET", "PUT", "HEAD", ...
  std::string target;           // encoded origin form: "/bucket/key?uploads="
  HeaderList headers;           // everything to send (Host, Authorization, x-amz-*, ...)
  std::string_view body;        // in-memory body (when body_file is empty)
  std::string body_file;        // else: the body is this file's first body_file_size bytes
  uint64_t body_file_size = 0;
  std::string response_file;    // when set, a 2xx body is streamed here (created/truncated)
  uint64_t max_body = 16ull << 20;  // cap for a body read to memory
};

struct HttpReply {
  int status = 0;
  HeaderList headers;
  std::string body;  // empty when streamed to response_file
};

// In the message of a kUnavailable HttpDo error when the server's certificate is not trusted
// or does not name the host: retrying cannot help.
inline constexpr std::string_view kCertificateVerifyFailed = "TLS certificate verify failed";

// Connects to `connect_host`:ep.port (TLS with SNI and certificate + host-name verification
// when ep.tls), sends `x`, reads the reply. Any HTTP status is a reply, not an error.
// Errors: kUnavailable (resolve/connect/TLS/read/write failure or timeout; an untrusted
// certificate too, its message holding kCertificateVerifyFailed), kTooLarge (a body
// over max_body), kIOError (body_file / response_file cannot be read / written).
Result<HttpReply> HttpDo(const S3Endpoint& ep, const std::string& connect_host,
                         const HttpExchange& x, std::chrono::milliseconds timeout);

// A response whose body is read as the caller asks for it (a ranged GET streamed through the
// registry): the request is sent and the status line and headers read by OpenHttpStream; the
// connection stays open until the body is read or the object is destroyed.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  virtual int status() const = 0;
  virtual const HeaderList& headers() const = 0;
  // Up to `size` more bytes of the body into `buf`; 0 once the body is complete. Each read is
  // bounded by the timeout. Errors: kUnavailable (the connection failed or timed out, or it
  // closed before the body announced was complete).
  virtual Result<size_t> Read(char* buf, size_t size) = 0;
  // The rest of the body (at most `max` bytes; more is kTooLarge), for error answers.
  Result<std::string> ReadAll(uint64_t max);
};

// As HttpDo, but returns once the response headers are read (x.response_file is ignored).
// Errors: as HttpDo's before the body.
Result<std::unique_ptr<HttpStream>> OpenHttpStream(const S3Endpoint& ep,
                                                   const std::string& connect_host,
                                                   const HttpExchange& x,
                                                   std::chrono::milliseconds timeout);

// The value of header `name` (case-insensitive) or "".
std::string HeaderValue(const HeaderList& headers, std::string_view name);

}  // namespace blz::store::s3

#endif  // BLZ_STORE_S3_S3_HTTP_H_
