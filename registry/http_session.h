// One HTTP/1.1 connection (Beast async, one strand per connection), plain or TLS
// (registry/session_stream.h; SessionOptions::tls: the handshake comes first, with the same
// timeout as any read, and a plain HTTP request on a TLS listener gets a plain-text 400).
// The access log's client and the request's scheme and forwarded host come from
// ResolveForwarded (registry/forwarded.h: X-Forwarded-* only from trusted proxies). A thin shell around
// Registry: read the head (request_parser<empty_body>), ask Registry::PlanBody how to read the
// body (string_body with a cap, or file_body streamed into <data>/uploads: Beast's "deferred
// body" pattern), run Registry::Handle on a handler pool (registry/handler_pools.h: the light or,
// for BodyPlan::heavy requests, the bounded heavy pool; so the I/O threads never block on hashing
// or patch computation, and slow requests never starve cheap ones), then write the response (string, file range, or
// headers only), and loop while keep-alive.
//
// A request whose framing is in doubt (CheckRequestFraming, registry/wire.h: a transfer coding
// other than a single chunked, Transfer-Encoding with Content-Length or on HTTP/1.0) gets 400 or
// 501 and the connection is closed unread. Every response head is finished in one place
// (FillHeaders): X-Content-Type-Options: nosniff always, Strict-Transport-Security over TLS.
//
// Every read and every write step has a 30 s inactivity timeout (re-armed for each chunk, so
// large bodies are bounded by stalls, not by total time). Request bodies must also keep a
// minimum average rate (RegistryOptions::body_rate, registry/registry.h kMinBodyBytesPerSecond
// over kBodyRateWindow): a slower body gets 408, the connection is closed and the partial body
// file removed, or what it wrote into an upload's session file cut off again (an upload
// session keeps the chunks committed before).
//
// One access-log line per request (registry/access_log.h: time, client, user, method, redacted
// target, status, body bytes in and out, milliseconds, and for a refused slow body the
// reason). The session only fills an AccessLogEntry; formatting is pure. A request whose
// transfer does not complete (the client closes the connection or stalls past the timeout while
// sending its body or receiving the response; a write error) is logged too, marked aborted,
// with the body bytes actually exchanged. Idle keep-alive connections that close between
// requests log nothing.
// Each logged request is also counted in Registry::metrics() (registry/metrics.h). GET /metrics
// (SessionOptions::metrics) is answered here, on the light pool, by HandleMetrics
// (registry/metrics_handlers.h) instead of the registry's routing. Other requests are first
// offered to SessionOptions::web (the web view), from the head alone; its answer is sent
// without the handler pools, counted under the route "web".
#ifndef BLZ_REGISTRY_HTTP_SESSION_H_
#define BLZ_REGISTRY_HTTP_SESSION_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "registry/access_log.h"
#include "registry/file_range_body.h"
#include "registry/handler_pools.h"
#include "registry/http_message.h"
#include "registry/net.h"
#include "registry/registry.h"
#include "registry/server.h"  // SessionOptions
#include "registry/session_stream.h"

namespace blz::registry {

inline constexpr std::chrono::seconds kIoTimeout{30};

// "127.0.0.1:51234", "[::1]:51234".
std::string FormatEndpoint(const tcp::endpoint& endpoint);

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  // `registry`, `handlers` and `options` must outlive the session.
  HttpSession(tcp::socket&& socket, Registry* registry, HandlerPools* handlers,
              const SessionOptions* options);
  ~HttpSession();

  // Starts the read loop (on the connection's strand).
  void Run();

 private:
  // TLS: detects a plain HTTP client (answered with 400), then the handshake.
  void Handshake();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  // The request's framing headers (CheckRequestFraming, registry/wire.h): an error means the
  // body's length is unknown, so the session answers (400, or 501 for an unknown transfer
  // coding) and closes the connection.
  Status CheckFraming() const;
  void StartBody();
  template <class Parser>
  void ReadBodySome(Parser& parser);
  // A file body of known length (Content-Length; chunked bodies go through Beast's parser):
  // read straight from the stream in large buffers, written to the body file and fed to the
  // plan's hash (BodyPlan::hash) as it arrives: few large reads instead of Beast's 64 KiB
  // steps (issue 28).
  void StartRawFileBody();
  void ReadRawBodySome();
  // Writes `n` received body bytes to the body file (and the hash). False (and the error
  // response sent, closing the connection) when the file cannot take them (a full disk).
  bool WriteRawBody(const uint8_t* data, size_t n);
  void FinishRawBody();
  void CloseRawBodyFd();
  void OnBodyError(beast::error_code ec);
  // After `n` more body bytes: false (and the 408 sent) when the current rate window has
  // ended below the minimum rate; else true (starting a new window when one ended).
  bool CheckBodyRate(size_t n);
  void OnBody();
  void SendResponse(Response res);
  template <class Body>
  void WriteSome(std::shared_ptr<http::response<Body>> msg,
                 std::shared_ptr<http::response_serializer<Body>> sr);
  void OnWritten(bool close);
  // The current request ended without completing: logs it as aborted (`why`), closes.
  void Abort(const std::string& why);
  // Logs the current request once (no-op when none is in progress or it was logged).
  void LogRequest(bool aborted);
  void Close();
  void RemoveBodyFile();

  SessionStream stream_;
  tcp::endpoint peer_;
  beast::flat_buffer buffer_;
  Registry* registry_;
  HandlerPools* handlers_;
  const SessionOptions* options_;
  std::string client_;  // the peer (or the client a trusted proxy names), for the access log
  bool metrics_request_ = false;  // GET /metrics (registry/metrics_handlers.h), not the registry's
  int health_request_ = 0;        // HealthTarget of /healthz, /readyz (registry/health_handlers.h)
  bool web_request_ = false;      // answered by SessionOptions::web (logged as route "web")

  std::optional<http::request_parser<http::empty_body>> head_parser_;
  std::optional<http::request_parser<http::string_body>> string_parser_;
  std::optional<http::request_parser<http::file_body>> file_parser_;

  RequestHead head_;
  BodyPlan plan_;
  std::string body_file_;
  // The raw file body (StartRawFileBody): its descriptor (-1 when none is open), the bytes
  // still to read, the read buffer (allocated on the first such body, kept for the next).
  // With plan_.session_file the body is written there with pwrite from byte body_pos_ on
  // (body_fd_ stays -1: the descriptor is the session file's).
  bool raw_body_ = false;
  int body_fd_ = -1;
  uint64_t body_left_ = 0;
  uint64_t body_pos_ = 0;
  std::vector<uint8_t> raw_buffer_;
  bool keep_alive_ = false;
  // The current request, for the access log (reset by ReadHeader).
  bool in_request_ = false;  // a head arrived and the request is not logged yet
  std::chrono::steady_clock::time_point started_;
  std::chrono::system_clock::time_point started_wall_;
  int status_ = 0;           // 0 until a response is being sent
  std::string log_user_;     // Response::principal
  uint64_t bytes_in_ = 0;    // request body bytes read
  uint64_t body_bytes_ = 0;  // response body bytes announced
  uint64_t header_bytes_ = 0;  // the response head's size on the wire
  uint64_t wire_bytes_ = 0;    // response bytes written so far (head included)
  // The body-rate window (CheckBodyRate): its start and the bytes read in it.
  std::chrono::steady_clock::time_point rate_window_start_;
  uint64_t rate_window_bytes_ = 0;
  std::string log_note_;  // the access log's note ("" = none)
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_HTTP_SESSION_H_
