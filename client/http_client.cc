#include "client/http_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>

namespace blz::client {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr size_t kChunkBytes = 256 * 1024;

std::string ToStd(beast::string_view s) { return std::string(s.data(), s.size()); }

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

bool HasCrLf(std::string_view s) {
  return s.find('\r') != std::string_view::npos || s.find('\n') != std::string_view::npos ||
         s.find('\0') != std::string_view::npos;
}

// An open file descriptor, closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string HttpResponse::Header(std::string_view name) const {
  for (const HttpHeader& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return h.value;
  }
  return "";
}

bool HttpResponse::HasHeader(std::string_view name) const {
  for (const HttpHeader& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return true;
  }
  return false;
}

bool HttpResponse::ContentLength(uint64_t* out) const {
  if (!HasHeader("Content-Length")) return false;
  std::string v = Header("Content-Length");
  if (v.empty() || v.size() > 19) return false;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + uint64_t(c - '0');
  }
  *out = n;
  return true;
}

struct HttpClient::Impl {
  std::string host;
  uint16_t port = 0;
  std::string authority;
  HttpClientOptions options;
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  bool connected = false;
  int connections_opened = 0;

  // Drives the pending asynchronous operation (and its timer) to completion.
  void Run() {
    ioc.restart();
    ioc.run();
  }

  std::string Where() const { return "http://" + authority; }

  std::string Describe(const error_code& ec, std::chrono::milliseconds timeout) const {
    if (ec == beast::error::timeout) {
      return "timed out after " + std::to_string(timeout.count()) + " ms";
    }
    return ec.message();
  }

  void CloseConnection() {
    error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.close();
    buffer.clear();
    connected = false;
  }

  Status Connect() {
    CloseConnection();
    tcp::resolver resolver(ioc);
    error_code ec;
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec) return Unavailable("cannot resolve " + host + ": " + ec.message());
    stream.expires_after(options.connect_timeout);
    stream.async_connect(results, [&ec](const error_code& e, const tcp::endpoint&) { ec = e; });
    Run();
    if (ec) {
      CloseConnection();
      return Unavailable("cannot connect to " + Where() + ": " +
                         Describe(ec, options.connect_timeout));
    }
    error_code ignored;
    stream.socket().set_option(tcp::no_delay(true), ignored);
    connected = true;
    ++connections_opened;
    return Status::Ok();
  }

  template <typename Message>
  Status SetHeaders(const HttpRequest& request, Message* msg) {
    msg->set(http::field::host, authority);
    msg->set(http::field::user_agent, options.user_agent);
    for (const HttpHeader& h : request.headers) {
      if (h.name.empty() || HasCrLf(h.name) || HasCrLf(h.value)) {
        return InvalidArgument("HTTP header '" + h.name + "' has an invalid name or value");
      }
      msg->set(h.name, h.value);
    }
    return Status::Ok();
  }

  // Outcome of one attempt, for the retry decision.
  struct Attempt {
    bool connection_failed = false;  // the socket failed (not a local error)
    bool header_received = false;
    bool timed_out = false;
  };

  Status WriteMemoryBody(const HttpRequest& request, http::verb verb, Attempt* attempt) {
    http::request<http::string_body> req{verb, request.target, 11};
    BLZ_RETURN_IF_ERROR(SetHeaders(request, &req));
    req.body() = request.body;
    if (!request.body.empty() || verb == http::verb::post || verb == http::verb::put ||
        verb == http::verb::patch) {
      req.prepare_payload();
    }
    error_code ec;
    stream.expires_after(options.io_timeout);
    http::async_write(stream, req, [&ec](const error_code& e, size_t) { ec = e; });
    Run();
    if (ec) {
      attempt->connection_failed = true;
      attempt->timed_out = ec == beast::error::timeout;
      return Unavailable("sending " + request.method + " " + request.target + " to " + Where() +
                         " failed: " + Describe(ec, options.io_timeout));
    }
    return Status::Ok();
  }

  Status WriteFileBody(const HttpRequest& request, http::verb verb, const ProgressFn& progress,
                       Attempt* attempt) {
    Fd fd(::open(request.body_file.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      return IOError(request.body_file + ": cannot open: " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      return IOError(request.body_file + ": cannot stat: " + std::strerror(errno));
    }
    const uint64_t file_size = uint64_t(st.st_size);
    const uint64_t base = std::min(request.body_file_offset, file_size);
    const uint64_t size = std::min(request.body_file_length, file_size - base);
    if (size == 0) {
      HttpRequest copy = request;
      copy.body_file.clear();
      return WriteMemoryBody(copy, verb, attempt);
    }

    http::request<http::buffer_body> req{verb, request.target, 11};
    BLZ_RETURN_IF_ERROR(SetHeaders(request, &req));
    req.content_length(size);
    req.body().data = nullptr;
    req.body().size = 0;
    req.body().more = true;
    http::request_serializer<http::buffer_body> sr{req};

    auto fail = [&](const error_code& ec) {
      attempt->connection_failed = true;
      attempt->timed_out = ec == beast::error::timeout;
      return Unavailable("sending " + request.body_file + " to " + Where() + request.target +
                         " failed: " + Describe(ec, options.io_timeout));
    };

    error_code ec;
    stream.expires_after(options.io_timeout);
    http::async_write_header(stream, sr, [&ec](const error_code& e, size_t) { ec = e; });
    Run();
    if (ec) return fail(ec);

    std::vector<char> buf(kChunkBytes);
    uint64_t sent = 0;
    while (sent < size) {
      size_t want = size_t(std::min<uint64_t>(buf.size(), size - sent));
      ssize_t n = ::pread(fd.get(), buf.data(), want, off_t(base + sent));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IOError(request.body_file + ": read failed: " + std::strerror(errno));
      if (n == 0) {
        return IOError(request.body_file + ": file shrank while being sent (expected " +
                       std::to_string(size) + " bytes, got " + std::to_string(sent) + ")");
      }
      req.body().data = buf.data();
      req.body().size = size_t(n);
      req.body().more = sent + uint64_t(n) < size;
      stream.expires_after(options.io_timeout);
      http::async_write(stream, sr, [&ec](const error_code& e, size_t) { ec = e; });
      Run();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return fail(ec);
      sent += uint64_t(n);
      if (progress) progress(sent, size);
    }
    if (!sr.is_done()) {
      req.body().data = nullptr;
      req.body().size = 0;
      req.body().more = false;
      stream.expires_after(options.io_timeout);
      http::async_write(stream, sr, [&ec](const error_code& e, size_t) { ec = e; });
      Run();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return fail(ec);
    }
    return Status::Ok();
  }

  Status ReadResponse(const HttpRequest& request, http::verb verb,
                      const TransferOptions& transfer, HttpResponse* out, Attempt* attempt) {
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(transfer.sink ? std::max(transfer.max_sink_body, transfer.max_memory_body)
                                    : transfer.max_memory_body);
    if (verb == http::verb::head) parser.skip(true);

    error_code ec;
    stream.expires_after(options.io_timeout);
    http::async_read_header(stream, buffer, parser, [&ec](const error_code& e, size_t) { ec = e; });
    Run();
    if (ec) {
      attempt->connection_failed = true;
      attempt->timed_out = ec == beast::error::timeout;
      if (ec == http::error::body_limit) {
        return TooLarge(Where() + request.target + ": response body exceeds the limit");
      }
      return Unavailable("no response from " + Where() + " to " + request.method + " " +
                         request.target + ": " + Describe(ec, options.io_timeout));
    }
    attempt->header_received = true;

    auto& msg = parser.get();
    out->status = int(msg.result_int());
    out->reason = ToStd(msg.reason());
    for (const auto& field : msg) {
      out->headers.push_back({ToStd(field.name_string()), ToStd(field.value())});
    }
    if (transfer.on_headers) {
      Status s = transfer.on_headers(*out);
      if (!s.ok()) {
        CloseConnection();
        return s;
      }
    }

    const bool to_sink = transfer.sink && out->status >= 200 && out->status < 300;
    uint64_t total = 0;
    out->ContentLength(&total);
    if (verb == http::verb::head) total = 0;
    std::vector<char> buf(kChunkBytes);
    while (!parser.is_done()) {
      msg.body().data = buf.data();
      msg.body().size = buf.size();
      stream.expires_after(options.io_timeout);
      http::async_read(stream, buffer, parser, [&ec](const error_code& e, size_t) { ec = e; });
      Run();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        CloseConnection();
        // Bytes that arrived before the failure still reach the sink, so a resumed download
        // continues after them instead of fetching them again.
        if (size_t partial = buf.size() - msg.body().size;
            to_sink && partial > 0 && ec != http::error::body_limit) {
          out->body_bytes += partial;
          Status s = transfer.sink(ByteSpan(reinterpret_cast<const uint8_t*>(buf.data()), partial));
          if (!s.ok()) return s;
        }
        if (ec == http::error::body_limit) {
          return TooLarge(Where() + request.target + ": response body exceeds the limit of " +
                          std::to_string(to_sink ? transfer.max_sink_body
                                                 : transfer.max_memory_body) +
                          " bytes");
        }
        return IOError("connection to " + Where() + " failed while reading the body of " +
                       request.target + " after " + std::to_string(out->body_bytes) +
                       " bytes: " + Describe(ec, options.io_timeout));
      }
      size_t got = buf.size() - msg.body().size;
      if (got == 0) continue;
      out->body_bytes += got;
      if (to_sink) {
        Status s = transfer.sink(ByteSpan(reinterpret_cast<const uint8_t*>(buf.data()), got));
        if (!s.ok()) {
          CloseConnection();
          return s;
        }
      } else {
        if (out->body.size() + got > transfer.max_memory_body) {
          CloseConnection();
          return TooLarge(Where() + request.target + ": response body exceeds " +
                          std::to_string(transfer.max_memory_body) + " bytes");
        }
        out->body.append(buf.data(), got);
      }
      if (transfer.download_progress) transfer.download_progress(out->body_bytes, total);
    }
    if (!parser.keep_alive()) CloseConnection();
    return Status::Ok();
  }

  Status SendOnce(const HttpRequest& request, http::verb verb, const TransferOptions& transfer,
                  HttpResponse* out, Attempt* attempt) {
    Status write_status = request.body_file.empty()
                              ? WriteMemoryBody(request, verb, attempt)
                              : WriteFileBody(request, verb, transfer.upload_progress, attempt);
    if (!write_status.ok()) {
      if (!attempt->connection_failed || attempt->timed_out) {
        CloseConnection();
        return write_status;
      }
      // The server may have answered early (e.g. 401, 413) and closed its side: try to read
      // that answer before reporting the write failure.
      Attempt read_attempt;
      HttpResponse early;
      Status s = ReadResponse(request, verb, TransferOptions{}, &early, &read_attempt);
      CloseConnection();
      if (s.ok() && early.status >= 400) {
        *out = std::move(early);
        attempt->header_received = true;
        return Status::Ok();
      }
      return write_status;
    }
    Status s = ReadResponse(request, verb, transfer, out, attempt);
    if (!s.ok()) CloseConnection();
    return s;
  }
};

HttpClient::HttpClient(std::string host, uint16_t port, HttpClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->options = std::move(options);
  bool ipv6 = impl_->host.find(':') != std::string::npos;
  impl_->authority =
      (ipv6 ? "[" + impl_->host + "]" : impl_->host) + ":" + std::to_string(port);
}

HttpClient::~HttpClient() {
  try {
    impl_->CloseConnection();
  } catch (...) {
  }
}

void HttpClient::Close() { impl_->CloseConnection(); }

const std::string& HttpClient::authority() const { return impl_->authority; }

int HttpClient::connections_opened() const { return impl_->connections_opened; }

Result<HttpResponse> HttpClient::Send(const HttpRequest& request, const TransferOptions& transfer) {
  http::verb verb = http::string_to_verb(request.method);
  if (verb == http::verb::unknown) {
    return InvalidArgument("unknown HTTP method '" + request.method + "'");
  }
  if (request.target.empty() || request.target[0] != '/' || HasCrLf(request.target) ||
      request.target.find(' ') != std::string::npos) {
    return InvalidArgument("invalid HTTP request target '" + request.target + "'");
  }
  for (const HttpHeader& h : request.headers) {
    if (h.name.empty() || HasCrLf(h.name) || HasCrLf(h.value)) {
      return InvalidArgument("HTTP header '" + h.name + "' has an invalid name or value");
    }
  }
  try {
    for (int attempt_no = 0;; ++attempt_no) {
      bool reused = impl_->connected;
      if (!impl_->connected) BLZ_RETURN_IF_ERROR(impl_->Connect());
      HttpResponse response;
      Impl::Attempt attempt;
      Status s = impl_->SendOnce(request, verb, transfer, &response, &attempt);
      if (s.ok()) return response;
      // A kept-alive connection the server closed in the meantime: retry once, fresh.
      if (reused && attempt_no == 0 && attempt.connection_failed && !attempt.header_received &&
          !attempt.timed_out) {
        impl_->CloseConnection();
        continue;
      }
      return s;
    }
  } catch (const std::exception& e) {
    impl_->CloseConnection();
    return IOError("HTTP request to " + impl_->Where() + request.target + " failed: " + e.what());
  }
}

}  // namespace blz::client
