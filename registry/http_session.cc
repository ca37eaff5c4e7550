#include "registry/http_session.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <limits>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <string_view>
#include <utility>
#include <vector>

#include "core/file_util.h"
#include "registry/errors.h"
#include "registry/forwarded.h"
#include "registry/health_handlers.h"
#include "registry/metrics_handlers.h"
#include "registry/wire.h"
#include "store/blob_store.h"

namespace blz::registry {
namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Statuses that never carry a body (RFC 9110 §6.4.1).
bool NoBodyStatus(int status) { return (status >= 100 && status < 200) || status == 204 || status == 304; }

// HSTS for two years (RFC 6797), on every response over TLS.
constexpr char kStrictTransportSecurity[] = "max-age=63072000";

// The one place every response's head is finished: the handler's headers, then those the
// session adds to all responses (replacing any a handler set).
template <class Message>
void FillHeaders(Message& msg, const Response& res, bool close, bool tls) {
  msg.version(11);
  msg.result(static_cast<unsigned>(res.status));
  for (const Header& h : res.headers) msg.insert(h.name, h.value);
  msg.set(http::field::server, "blz");
  msg.set("X-Content-Type-Options", "nosniff");
  if (tls) msg.set("Strict-Transport-Security", kStrictTransportSecurity);
  msg.keep_alive(!close);
}

// The size of the response head as the serializer writes it.
template <class Message>
uint64_t HeadBytes(const Message& msg) {
  std::ostringstream os;
  os << msg.base();
  return uint64_t(os.tellp());
}

// Why a read or write step failed, for the access log.
std::string Why(const beast::error_code& ec, const char* while_what) {
  if (ec == beast::error::timeout) {
    return std::string("timeout (") + std::to_string(kIoTimeout.count()) + " s without progress) " +
           while_what;
  }
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::error::broken_pipe || ec == net::ssl::error::stream_truncated) {
    return std::string("client closed the connection ") + while_what;
  }
  return std::string(while_what) + ": " + ec.message();
}

}  // namespace

std::string FormatEndpoint(const tcp::endpoint& endpoint) {
  const net::ip::address addr = endpoint.address();
  // An IPv4 client of a dual-stack socket arrives as ::ffff:a.b.c.d: log it as IPv4.
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    return net::ip::make_address_v4(net::ip::v4_mapped, addr.to_v6()).to_string() + ":" +
           std::to_string(endpoint.port());
  }
  if (addr.is_v6()) return "[" + addr.to_string() + "]:" + std::to_string(endpoint.port());
  return addr.to_string() + ":" + std::to_string(endpoint.port());
}

HttpSession::HttpSession(tcp::socket&& socket, Registry* registry, HandlerPools* handlers,
                         const SessionOptions* options)
    : stream_(std::move(socket), options->tls.get()),
      registry_(registry),
      handlers_(handlers),
      options_(options) {
  beast::error_code ec;
  peer_ = stream_.socket().remote_endpoint(ec);
  client_ = ec ? "-" : FormatEndpoint(peer_);
}

HttpSession::~HttpSession() { RemoveBodyFile(); }

void HttpSession::Run() {
  net::dispatch(stream_.get_executor(),
                beast::bind_front_handler(stream_.is_tls() ? &HttpSession::Handshake
                                                           : &HttpSession::ReadHeader,
                                          shared_from_this()));
}

void HttpSession::Handshake() {
  stream_.expires_after(kIoTimeout);
  beast::async_detect_ssl(
      stream_.lowest_layer(), buffer_,
      [self = shared_from_this()](beast::error_code ec, bool is_tls) {
        if (ec) return self->Close();
        if (!is_tls) {
          // Plain HTTP on the TLS port: say so in plain HTTP, then close.
          static const std::string kAnswer =
              "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
              "X-Content-Type-Options: nosniff\r\n"
              "Content-Length: 48\r\n\r\nclient sent an HTTP request to an HTTPS server\r\n";
          self->stream_.expires_after(kIoTimeout);
          net::async_write(self->stream_.lowest_layer(), net::buffer(kAnswer),
                           [self](beast::error_code, size_t) { self->Close(); });
          return;
        }
        self->stream_.expires_after(kIoTimeout);
        self->stream_.tls().async_handshake(
            net::ssl::stream_base::server, self->buffer_.data(),
            [self](beast::error_code hec, size_t used) {
              if (hec) return self->Close();
              self->buffer_.consume(used);
              self->ReadHeader();
            });
      });
}

void HttpSession::ReadHeader() {
  head_parser_.emplace();
  head_parser_->header_limit(64 * 1024);
  // The body's limit is chosen after the head is read (BodyPlan); Beast would otherwise refuse
  // a Content-Length over its 1 MiB default while reading the head. (Not boost::none: Beast
  // 1.74 compares `len > optional` and so refuses every Content-Length when it is none.)
  head_parser_->body_limit(std::numeric_limits<uint64_t>::max());
  string_parser_.reset();
  file_parser_.reset();
  raw_body_ = false;
  body_left_ = 0;
  head_ = RequestHead();
  plan_ = BodyPlan();
  web_request_ = false;
  in_request_ = false;
  status_ = 0;
  log_user_.clear();
  bytes_in_ = 0;
  body_bytes_ = 0;
  header_bytes_ = 0;
  wire_bytes_ = 0;
  log_note_.clear();
  stream_.expires_after(kIoTimeout);
  http::async_read_header(stream_, buffer_, *head_parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            self->OnHeader(ec);
                          });
}

void HttpSession::OnHeader(beast::error_code ec) {
  if (ec) {
    // end_of_stream: the client closed between requests; anything else (timeout, reset, a
    // malformed head) also ends the connection.
    // (A TLS client that closes without close_notify: stream_truncated.)
    if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
        ec != net::error::connection_reset && ec != net::ssl::error::stream_truncated &&
        ec != net::error::eof) {
      status_ = 400;
      Response bad = ErrorResponse(OciError::kBadRequest, "malformed request: " + ec.message());
      bad.close = true;
      head_.method = "-";
      head_.target = "-";
      started_ = std::chrono::steady_clock::now();
      started_wall_ = std::chrono::system_clock::now();
      in_request_ = true;
      keep_alive_ = false;
      SendResponse(std::move(bad));
      return;
    }
    Close();
    return;
  }
  started_ = std::chrono::steady_clock::now();
  started_wall_ = std::chrono::system_clock::now();
  in_request_ = true;
  const auto& req = head_parser_->get();
  head_.method = std::string(req.method_string());
  head_.target = std::string(req.target());
  for (const auto& field : req) {
    head_.headers.push_back({std::string(field.name_string()), std::string(field.value())});
  }
  {
    static const TrustedProxies kNone;
    const ForwardedInfo fwd =
        ResolveForwarded(options_->trusted_proxies ? *options_->trusted_proxies : kNone, peer_,
                         head_.headers, stream_.is_tls());
    if (peer_.port() != 0) client_ = fwd.client;
    head_.scheme = fwd.scheme;
    head_.forwarded_host = fwd.forwarded_host;
    head_.client_address = client_;
  }
  if (auto cl = head_parser_->content_length(); cl.has_value()) head_.content_length = *cl;
  head_.chunked = head_parser_->chunked();
  keep_alive_ = req.keep_alive();
  if (Status framing = CheckFraming(); !framing.ok()) {
    // The body's length is unknown: never read what follows as another request.
    Response bad = ErrorResponse(framing, ErrorContext::kGeneral);
    if (framing.code() == Code::kUnsupported) bad.status = 501;  // Not Implemented
    bad.close = true;
    keep_alive_ = false;
    log_note_ = framing.message();
    SendResponse(std::move(bad));
    return;
  }

  metrics_request_ = options_->metrics && IsMetricsTarget(head_.target);
  // Health checks answer before the registry's routes and authentication (load balancers).
  health_request_ = static_cast<int>(HealthTargetOf(head_.target));
  web_request_ = false;
  std::optional<Response> web;
  if (!metrics_request_ && health_request_ == 0 && options_->web) web = options_->web(head_);
  if (metrics_request_ || health_request_ != 0) {
    plan_ = BodyPlan();  // a body (none is expected) is read and discarded
    plan_.limit = kMaxIgnoredBodyBytes;
  } else if (web.has_value()) {
    // The web view's answer (computed from the head alone, cheaply) is sent like a refusal:
    // at once, after discarding a small body, or closing on a large one.
    web_request_ = true;
    plan_ = BodyPlan();
    plan_.reject = std::move(web);
  } else {
    plan_ = registry_->PlanBody(head_);
  }
  if (plan_.reject.has_value()) {
    if (!head_.HasBody()) {
      SendResponse(std::move(*plan_.reject));
      return;
    }
    std::optional<std::string> expect = head_.Get("Expect");
    const bool small = head_.content_length.has_value() &&
                       *head_.content_length <= kMaxIgnoredBodyBytes;
    if (!small || expect.has_value()) {
      // Don't read (maybe gigabytes of) a body we will refuse: answer and close.
      plan_.reject->close = true;
      SendResponse(std::move(*plan_.reject));
      return;
    }
    // A small body: read and discard it so the connection stays usable.
    plan_.session_file.reset();
    plan_.kind = BodyPlan::Kind::kMemory;
    plan_.limit = kMaxIgnoredBodyBytes;
  }
  std::optional<std::string> expect = head_.Get("Expect");
  if (head_.HasBody() && expect.has_value() && EqualsIgnoreCase(*expect, "100-continue")) {
    auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
    stream_.expires_after(kIoTimeout);
    http::async_write(stream_, *cont,
                      [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                        if (wec) return self->Abort(Why(wec, "before the request body"));
                        self->StartBody();
                      });
    return;
  }
  StartBody();
}

Status HttpSession::CheckFraming() const {
  const auto& req = head_parser_->get();
  std::vector<std::string_view> transfer_encodings;
  for (const auto& field : req) {
    if (field.name() == http::field::transfer_encoding) {
      transfer_encodings.emplace_back(field.value().data(), field.value().size());
    }
  }
  BLZ_RETURN_IF_ERROR(CheckRequestFraming(transfer_encodings,
                                          req.find(http::field::content_length) != req.end(),
                                          req.version() < 11));
  // Beast must frame the body the same way: chunked exactly when a Transfer-Encoding passed.
  if (head_parser_->chunked() != !transfer_encodings.empty()) {
    return InvalidArgument("Transfer-Encoding is not a single final chunked coding");
  }
  return Status::Ok();
}

void HttpSession::StartBody() {
  rate_window_start_ = std::chrono::steady_clock::now();
  rate_window_bytes_ = 0;
  if (plan_.kind == BodyPlan::Kind::kFile && !head_.chunked) {
    StartRawFileBody();
    return;
  }
  if (plan_.kind == BodyPlan::Kind::kFile) {
    plan_.hash = nullptr;  // a chunked body is not hashed on the way: the handler hashes it
    plan_.session_file.reset();  // nor written in place (PlanBody offers that to known lengths)
    file_parser_.emplace(std::move(*head_parser_));
    head_parser_.reset();
    file_parser_->body_limit(plan_.limit);
    beast::error_code ec;
    file_parser_->get().body().open(plan_.file_path.c_str(), beast::file_mode::write_new, ec);
    if (ec) {
      Response err = ErrorResponse(OciError::kUnknown,
                                   "cannot create " + plan_.file_path + ": " + ec.message());
      err.close = true;
      file_parser_.reset();
      SendResponse(std::move(err));
      return;
    }
    body_file_ = plan_.file_path;
    ReadBodySome(*file_parser_);
  } else {
    string_parser_.emplace(std::move(*head_parser_));
    head_parser_.reset();
    string_parser_->body_limit(plan_.limit);
    ReadBodySome(*string_parser_);
  }
}

template <class Parser>
void HttpSession::ReadBodySome(Parser& parser) {
  if (parser.is_done()) {
    OnBody();
    return;
  }
  // Re-armed per chunk: an inactivity timeout, not a deadline for the whole body.
  stream_.expires_after(kIoTimeout);
  http::async_read_some(stream_, buffer_, parser,
                        [self = shared_from_this(), &parser](beast::error_code ec, size_t n) {
                          self->bytes_in_ += n;
                          if (ec) return self->OnBodyError(ec);
                          if (!parser.is_done() && !self->CheckBodyRate(n)) return;
                          self->ReadBodySome(parser);
                        });
}

// Reads of a raw file body ask for up to this much (a loopback or fast link then delivers
// hundreds of KiB per read instead of Beast's 64 KiB).
constexpr size_t kRawBodyBuffer = 1 << 20;

void HttpSession::StartRawFileBody() {
  head_parser_.reset();
  const uint64_t total = head_.content_length.value_or(0);
  if (total > plan_.limit) {  // PlanBody refuses these first; kept as the session's own bound
    OnBodyError(http::error::body_limit);
    return;
  }
  // A new file of its own, or the upload's session file after its recorded bytes
  // (BodyPlan::session_file: written with pwrite from body_pos_ on).
  if (plan_.session_file == nullptr) {
    body_fd_ = ::open(plan_.file_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (body_fd_ < 0) {
      Response err = ErrorResponse(OciError::kUnknown, "cannot create " + plan_.file_path +
                                                           ": " + std::strerror(errno));
      err.close = true;
      SendResponse(std::move(err));
      return;
    }
    body_file_ = plan_.file_path;
  }
  body_pos_ = plan_.session_offset;
  raw_body_ = true;
  body_left_ = total;
  // Body bytes that arrived with the head (never more than this body: what follows is the
  // next request's).
  if (body_left_ > 0 && buffer_.size() > 0) {
    const size_t n = size_t(std::min<uint64_t>(buffer_.size(), body_left_));
    bytes_in_ += n;
    if (!WriteRawBody(static_cast<const uint8_t*>(buffer_.data().data()), n)) return;
    buffer_.consume(n);
  }
  ReadRawBodySome();
}

void HttpSession::ReadRawBodySome() {
  if (body_left_ == 0) {
    FinishRawBody();
    return;
  }
  if (raw_buffer_.empty()) raw_buffer_.resize(kRawBodyBuffer);
  const size_t want = size_t(std::min<uint64_t>(raw_buffer_.size(), body_left_));
  // Re-armed per read: an inactivity timeout, not a deadline for the whole body.
  stream_.expires_after(kIoTimeout);
  stream_.async_read_some(
      net::buffer(raw_buffer_.data(), want),
      [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->bytes_in_ += n;
        if (n > 0 && !self->WriteRawBody(self->raw_buffer_.data(), n)) return;
        if (ec) {
          // The body ended early (the client closed or stalled): nothing of it is kept.
          if (ec == net::error::eof) ec = http::error::partial_message;
          return self->OnBodyError(ec);
        }
        if (self->body_left_ > 0 && !self->CheckBodyRate(n)) return;
        self->ReadRawBodySome();
      });
}

bool HttpSession::WriteRawBody(const uint8_t* data, size_t n) {
  if (plan_.hash != nullptr) {
    plan_.hash->sha.Update(ByteSpan(data, n));
    plan_.hash->bytes += n;
  }
  size_t done = 0;
  while (done < n) {
    const ssize_t w = plan_.session_file != nullptr
                          ? ::pwrite(plan_.session_file->fd(), data + done, n - done,
                                     off_t(body_pos_ + done))
                          : ::write(body_fd_, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      const std::string file =
          plan_.session_file != nullptr ? plan_.session_file->path() : body_file_;
      const std::string why = file + ": cannot write the request body: " + std::strerror(err);
      log_note_ = why;
      Response res = ErrorResponse(IOError(why), ErrorContext::kGeneral);
      if (err == ENOSPC || err == EDQUOT || err == EFBIG) res.status = 507;  // Insufficient Storage
      res.close = true;  // the rest of the body is not read
      SendResponse(std::move(res));  // removes the partial body file
      return false;
    }
    done += size_t(w);
  }
  body_left_ -= n;
  body_pos_ += n;
  return true;
}

void HttpSession::FinishRawBody() {
  CloseRawBodyFd();
  OnBody();
}

void HttpSession::CloseRawBodyFd() {
  if (body_fd_ >= 0) ::close(body_fd_);
  body_fd_ = -1;
}

void HttpSession::OnBodyError(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    Response err = ErrorResponse(OciError::kTooLarge, "request body exceeds the limit of " +
                                                          std::to_string(plan_.limit) + " bytes");
    err.close = true;
    string_parser_.reset();
    file_parser_.reset();
    SendResponse(std::move(err));
    return;
  }
  Abort(Why(ec, "while sending the request body"));
}

bool HttpSession::CheckBodyRate(size_t n) {
  const BodyRateLimit& limit = registry_->options().body_rate;
  rate_window_bytes_ += n;
  if (limit.min_bytes_per_second == 0 || limit.window.count() <= 0) return true;
  const auto now = std::chrono::steady_clock::now();
  const auto elapsed =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - rate_window_start_);
  if (elapsed < limit.window) return true;
  // At least min_bytes_per_second on average over the window that just ended (at least one
  // window long, so a stall is judged over its whole length).
  const double seconds = double(elapsed.count()) / 1000.0;
  const double rate = double(rate_window_bytes_) / seconds;
  if (rate >= double(limit.min_bytes_per_second)) {
    rate_window_start_ = now;
    rate_window_bytes_ = 0;
    return true;
  }
  char why[160];
  std::snprintf(why, sizeof why,
                "request body too slow: %llu bytes in %.1f s, under the minimum of %llu bytes/s",
                static_cast<unsigned long long>(rate_window_bytes_), seconds,
                static_cast<unsigned long long>(limit.min_bytes_per_second));
  log_note_ = why;
  Response err = ErrorResponse(OciError::kBadRequest, why);
  err.status = 408;  // Request Timeout
  err.close = true;
  string_parser_.reset();
  file_parser_.reset();
  SendResponse(std::move(err));  // removes the partial body file
  return false;
}

void HttpSession::OnBody() {
  Request req;
  req.head = head_;
  if (string_parser_.has_value()) {
    req.body = string_parser_->release().body();
    string_parser_.reset();
  }
  if (file_parser_.has_value()) {
    file_parser_->get().body().close();
    file_parser_.reset();
    req.body_file = body_file_;
  }
  if (raw_body_) {
    raw_body_ = false;
    req.body_hash = std::move(plan_.hash);  // every byte of the file went through it
    if (plan_.session_file != nullptr) {
      req.session_offset = plan_.session_offset;
      req.session_length = body_pos_ - plan_.session_offset;
      req.session_file = std::move(plan_.session_file);  // the handler releases the lock
    } else {
      req.body_file = body_file_;
    }
  }
  if (plan_.reject.has_value()) {
    SendResponse(std::move(*plan_.reject));
    return;
  }
  // Handlers may block (hashing, patch computation): run them off the I/O threads, then come
  // back to this connection's strand to write.
  const bool posted =
      handlers_->Post(plan_.heavy, [self = shared_from_this(), req = std::move(req),
                                    metrics = metrics_request_,
                                    health = health_request_]() mutable {
        Response res = metrics ? HandleMetrics(*self->registry_, req.head)
                       : health != 0
                           ? HandleHealth(*self->registry_, req.head,
                                          static_cast<HealthTarget>(health))
                           : self->registry_->Handle(req);
        // The session file's lock goes before the response does: the client's next chunk, sent
        // as soon as it reads this one, must find the file free.
        req.session_file.reset();
        net::post(self->stream_.get_executor(), [self, res = std::move(res)]() mutable {
          self->SendResponse(std::move(res));
        });
      });
  if (!posted) {
    Response busy = ErrorResponse(OciError::kTooManyRequests,
                                  "the registry is busy with other slow requests; retry later");
    busy.Set("Retry-After", "5");
    SendResponse(std::move(busy));
  }
}

void HttpSession::SendResponse(Response res) {
  RemoveBodyFile();
  const bool close = res.close || !keep_alive_;
  status_ = res.status;
  log_user_ = std::move(res.principal);
  body_bytes_ = res.head_only || NoBodyStatus(res.status) ? 0 : res.BodySize();
  wire_bytes_ = 0;

  if (res.head_only || NoBodyStatus(res.status)) {
    auto msg = std::make_shared<http::response<http::empty_body>>();
    FillHeaders(*msg, res, close, stream_.is_tls());
    if (!NoBodyStatus(res.status)) msg->content_length(res.BodySize());
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*msg);
    WriteSome(msg, sr);
    return;
  }
  if (res.producer != nullptr && res.file_path.empty()) {  // a body made as it is sent
    auto error = std::make_shared<std::string>();
    auto msg = std::make_shared<http::response<ProducerBody>>(
        std::piecewise_construct,
        std::make_tuple(ProducerBody::value_type{std::move(res.producer), res.file_length, error}));
    FillHeaders(*msg, res, close, stream_.is_tls());
    msg->content_length(res.file_length);
    auto sr = std::make_shared<http::response_serializer<ProducerBody>>(*msg);
    WriteSome(msg, sr);
    return;
  }
  if (!res.file_path.empty()) {
    FileRangeBody::value_type body;
    beast::error_code ec;
    body.file.open(res.file_path.c_str(), beast::file_mode::scan, ec);
    if (ec) {
      SendResponse(ErrorResponse(OciError::kUnknown,
                                 "cannot open " + res.file_path + ": " + ec.message()));
      return;
    }
    body.offset = res.file_offset;
    body.length = res.file_length;
    for (const Response::Segment& seg : res.file_segments) {
      body.segments.push_back({seg.offset, seg.length});
    }
    auto msg = std::make_shared<http::response<FileRangeBody>>(
        std::piecewise_construct, std::make_tuple(std::move(body)));
    FillHeaders(*msg, res, close, stream_.is_tls());
    msg->content_length(res.file_length);
    auto sr = std::make_shared<http::response_serializer<FileRangeBody>>(*msg);
    WriteSome(msg, sr);
    return;
  }
  auto msg = std::make_shared<http::response<http::string_body>>();
  FillHeaders(*msg, res, close, stream_.is_tls());
  msg->body() = std::move(res.body);
  msg->prepare_payload();
  auto sr = std::make_shared<http::response_serializer<http::string_body>>(*msg);
  WriteSome(msg, sr);
}

template <class Body>
void HttpSession::WriteSome(std::shared_ptr<http::response<Body>> msg,
                            std::shared_ptr<http::response_serializer<Body>> sr) {
  if (wire_bytes_ == 0) header_bytes_ = HeadBytes(*msg);
  stream_.expires_after(kIoTimeout);
  http::async_write_some(stream_, *sr,
                         [self = shared_from_this(), msg, sr](beast::error_code ec, size_t n) {
                           self->wire_bytes_ += n;
                           if (ec) {
                             std::string why = Why(ec, "while receiving the response");
                             if constexpr (std::is_same_v<Body, ProducerBody>) {
                               const auto& error = msg->body().error;
                               if (error != nullptr && !error->empty()) why = *error;
                             }
                             return self->Abort(why);
                           }
                           if (!sr->is_done()) return self->WriteSome(msg, sr);
                           self->OnWritten(msg->need_eof());
                         });
}

void HttpSession::OnWritten(bool close) {
  LogRequest(/*aborted=*/false);
  if (close) return Close();
  ReadHeader();
}

void HttpSession::Abort(const std::string& why) {
  if (in_request_) {
    log_note_ = log_note_.empty() ? why : log_note_ + "; " + why;
    // Only the body bytes that left: the head goes first.
    body_bytes_ = std::min(body_bytes_, wire_bytes_ > header_bytes_ ? wire_bytes_ - header_bytes_
                                                                     : uint64_t(0));
    LogRequest(/*aborted=*/true);
  }
  Close();
}

void HttpSession::LogRequest(bool aborted) {
  if (!in_request_) return;
  in_request_ = false;
  AccessLogEntry entry;
  entry.time = started_wall_;
  entry.client = client_;
  entry.user = log_user_;
  entry.method = head_.method;
  entry.target = head_.target;
  entry.status = status_;
  entry.bytes_in = bytes_in_;
  entry.bytes_out = body_bytes_;
  entry.duration_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
          .count();
  entry.aborted = aborted;
  const std::string_view route = web_request_ ? std::string_view("web") : RouteKind(head_.target);
  registry_->metrics().RecordRequest(route, head_.method, status_, bytes_in_, body_bytes_,
                                     entry.duration_ms / 1000.0, aborted);
  entry.note = std::move(log_note_);
  log_note_.clear();
  const std::string line = FormatAccessLog(entry, options_->log_format);
  if (options_->log) {
    options_->log(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines never interleave
  }
}

void HttpSession::Close() {
  RemoveBodyFile();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
}

void HttpSession::RemoveBodyFile() {
  CloseRawBodyFd();
  raw_body_ = false;
  if (plan_.session_file != nullptr) {
    // A body that did not reach its handler: what it wrote past the session's bytes goes, and
    // so does the lock (never the file: it holds the session's earlier chunks).
    (void)plan_.session_file->Truncate(plan_.session_offset);  // garbage past it if this fails
    plan_.session_file.reset();
  }
  if (body_file_.empty()) return;
  if (file_parser_.has_value()) {
    file_parser_->get().body().close();
    file_parser_.reset();
  }
  RemoveAll(body_file_);
  body_file_.clear();
}

}  // namespace blz::registry
