// A small synchronous HTTP/1.1 client (plain TCP or TLS) for talking to a blz registry.
//
// TLS (HttpClientOptions::tls): OpenSSL 3 through Boost.Beast, TLS 1.2 or newer, SNI, and by
// default the peer certificate is verified against the system CA store (or `ca_file`) and must
// name the host (DNS name, or IP address SAN for an IP host). `insecure` turns verification off.
//
// Proxies: a proxy URL "http://[user:pass@]HOST[:PORT]" (port 1080 when omitted, as curl) comes
// from HttpClientOptions::proxy, else from the environment: https_proxy / HTTPS_PROXY for TLS,
// http_proxy / HTTP_PROXY for plain HTTP (lower case first). no_proxy / NO_PROXY (or
// HttpClientOptions::no_proxy) is a comma list of host names (suffix match on a dot boundary,
// a leading '.' allowed), IP addresses, HOST:PORT entries, or "*" (no proxy at all). As in curl,
// loopback hosts are proxied too unless NO_PROXY lists them. Both schemes go through the proxy
// with HTTP CONNECT (a tunnel to HOST:PORT; for TLS the handshake runs inside it).
//
// One HttpClient talks to one host:port over one connection, reused between requests while the
// server keeps it alive (a request sent on a reused connection that the server has meanwhile
// closed is retried once on a fresh connection). Connecting and every single read or write
// have a timeout; an operation that makes no progress for that long fails.
//
// Request bodies come from memory or are streamed from a file. Response bodies go to memory
// (capped) or, for 2xx answers, are streamed chunk by chunk to a caller-supplied sink. Progress
// callbacks see the bytes of the streamed body as they move.
//
// Errors (Boost.Asio / Beast error codes never leave this file's .cc):
//   kUnavailable  cannot resolve / connect, connection refused, timed out, connection dropped
//                 before a response header arrived; the proxy refused the CONNECT; the TLS
//                 handshake failed; an untrusted certificate is kUnavailable too, its message
//                 naming the host, OpenSSL's reason and the trust used ("certificate verify
//                 failed (self-signed certificate in certificate chain) against the system
//                 trust store"), and is not retried (client/retry.h IsRetryableFailure);
//   kNotFound     ca_file does not exist ("no such file: FILE ...");
//   kIOError      the connection failed mid-body, or the body file cannot be read;
//   kTooLarge     a response body is larger than the cap;
//   kInvalidArgument  a malformed request (bad method, CR/LF in a header).
// Any status code the server answers with is NOT an error here: the caller inspects
// HttpResponse::status.
//
// Not thread-safe: one HttpClient per thread.
#ifndef BLZ_CLIENT_HTTP_CLIENT_H_
#define BLZ_CLIENT_HTTP_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"

namespace blz::client {

struct HttpHeader {
  std::string name;
  std::string value;
};

struct HttpRequest {
  std::string method = "GET";  // "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"
  std::string target;          // origin form, e.g. "/v2/org/model/tags/list?n=10"
  // Extra header fields. Host, User-Agent and Content-Length are set by the client.
  std::vector<HttpHeader> headers;
  std::string body;       // in-memory body (used when body_file is empty)
  std::string body_file;  // when set: the body is this file, streamed (its size at send time)
  // With body_file: send only bytes [body_file_offset, body_file_offset + body_file_length)
  // (the length is clamped to the file's end; UINT64_MAX = to the end).
  uint64_t body_file_offset = 0;
  uint64_t body_file_length = UINT64_MAX;
};

struct HttpResponse {
  int status = 0;  // e.g. 200, 404
  std::string reason;
  std::vector<HttpHeader> headers;
  std::string body;         // the body when it was read to memory (not for streamed 2xx bodies)
  uint64_t body_bytes = 0;  // body bytes received (to memory or to the sink)

  // The first value of header `name` (case-insensitive), or "" when absent.
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
  // Content-Length when present and a valid number.
  bool ContentLength(uint64_t* out) const;
};

// (bytes done, bytes total). `total` is 0 when unknown.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;
// Receives one chunk of a streamed response body; a non-OK Status aborts the transfer (the
// connection is closed) and is returned by Send().
using BodySink = std::function<Status(ByteSpan chunk)>;
// Sees the response status and headers before any body byte; a non-OK Status aborts.
using HeadersFn = std::function<Status(const HttpResponse& head)>;

struct TransferOptions {
  // Cap on bodies read to memory (error bodies always go to memory).
  uint64_t max_memory_body = 16ull << 20;
  // When set, the body of a 2xx response streams here instead of to memory.
  BodySink sink;
  // Cap on a streamed body (set it to the expected size when known).
  uint64_t max_sink_body = UINT64_MAX;
  HeadersFn on_headers;
  ProgressFn upload_progress;    // request body (file bodies only)
  ProgressFn download_progress;  // response body
};

struct HttpClientOptions {
  std::chrono::milliseconds connect_timeout{10'000};
  // Per single read or write: a transfer that stalls this long fails.
  std::chrono::milliseconds io_timeout{60'000};
  std::string user_agent = "blz/0.1";

  // TLS (see the file comment).
  bool tls = false;
  std::string ca_file;    // PEM bundle of trusted CAs; "" = the system default verify paths
  // Where ca_file came from, for messages: "--ca-cert", "BLZ_CA_BUNDLE", "remembered by
  // `blz login`" ("" = not said).
  std::string ca_origin;
  // Trust the system store as well as ca_file (as docker does for certs.d/HOST/ca.crt).
  bool ca_adds_to_system = false;
  bool insecure = false;  // no certificate or host name verification

  // Proxy URL "http://HOST[:PORT]"; nullopt = from the environment; "" = no proxy.
  std::optional<std::string> proxy;
  // NO_PROXY list; nullopt = from the environment (no_proxy, NO_PROXY).
  std::optional<std::string> no_proxy;
};

// Marks the message of an untrusted-certificate failure (see kUnavailable above).
inline constexpr std::string_view kCertificateVerifyFailed = "certificate verify failed";

// Does the NO_PROXY list `no_proxy` exclude `host` (without brackets) on `port`? (See the file
// comment for the syntax.)
bool NoProxyMatches(std::string_view no_proxy, std::string_view host, uint16_t port);

// The proxy URL to use for `host`:`port` under `options` (the environment when the options
// leave it unset), or "" for a direct connection.
std::string ProxyFor(const HttpClientOptions& options, std::string_view host, uint16_t port);

class HttpClient {
 public:
  // `host` is a DNS name or an IP address (IPv6 without brackets).
  HttpClient(std::string host, uint16_t port, HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `request` and reads the whole response (see the file comment for errors).
  Result<HttpResponse> Send(const HttpRequest& request, const TransferOptions& transfer = {});

  // Closes the connection (the next Send reconnects).
  void Close();

  // "https" or "http".
  const char* scheme() const;
  // The proxy this client connects through ("" = direct).
  const std::string& proxy() const;
  // "host:port" as sent in the Host header (IPv6 hosts in brackets).
  const std::string& authority() const;
  // Connections opened so far (for tests of keep-alive reuse).
  int connections_opened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace blz::client

#endif  // BLZ_CLIENT_HTTP_CLIENT_H_
