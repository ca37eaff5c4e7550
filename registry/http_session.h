// One HTTP/1.1 connection (Beast async, one strand per connection). A thin shell around
// Registry: read the head (request_parser<empty_body>), ask Registry::PlanBody how to read the
// body (string_body with a cap, or file_body streamed into <data>/uploads: Beast's "deferred
// body" pattern), run Registry::Handle on a handler pool (registry/handler_pools.h: the light or,
// for BodyPlan::heavy requests, the bounded heavy pool; so the I/O threads never block on hashing
// or patch computation, and slow requests never starve cheap ones), then write the response (string, file range, or
// headers only), and loop while keep-alive.
//
// Every read and every write step has a 30 s inactivity timeout (re-armed for each chunk, so
// large bodies are bounded by stalls, not by total time). Request bodies must also keep a
// minimum average rate (RegistryOptions::body_rate, registry/registry.h kMinBodyBytesPerSecond
// over kBodyRateWindow): a slower body gets 408, the connection is closed and the partial body
// file removed (an upload session keeps the chunks committed before). One line per request is
// logged to stderr: method, target (secret query values redacted, registry/wire.h
// RedactTarget; control characters escaped, core/text.h), status, body bytes, milliseconds,
// and for a refused slow body the reason.
#ifndef BLZ_REGISTRY_HTTP_SESSION_H_
#define BLZ_REGISTRY_HTTP_SESSION_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "registry/file_range_body.h"
#include "registry/handler_pools.h"
#include "registry/http_message.h"
#include "registry/net.h"
#include "registry/registry.h"

namespace blz::registry {

inline constexpr std::chrono::seconds kIoTimeout{30};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, Registry* registry, HandlerPools* handlers);
  ~HttpSession();

  // Starts the read loop (on the connection's strand).
  void Run();

 private:
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void StartBody();
  template <class Parser>
  void ReadBodySome(Parser& parser);
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
  void Close();
  void RemoveBodyFile();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  Registry* registry_;
  HandlerPools* handlers_;

  std::optional<http::request_parser<http::empty_body>> head_parser_;
  std::optional<http::request_parser<http::string_body>> string_parser_;
  std::optional<http::request_parser<http::file_body>> file_parser_;

  RequestHead head_;
  BodyPlan plan_;
  std::string body_file_;
  bool keep_alive_ = false;
  std::chrono::steady_clock::time_point started_;
  int status_ = 0;
  uint64_t body_bytes_ = 0;
  // The body-rate window (CheckBodyRate): its start and the bytes read in it.
  std::chrono::steady_clock::time_point rate_window_start_;
  uint64_t rate_window_bytes_ = 0;
  std::string log_note_;  // appended to the access log line ("" = none)
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_HTTP_SESSION_H_
