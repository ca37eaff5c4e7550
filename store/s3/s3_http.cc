#include "store/s3/s3_http.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <strings.h>

namespace blz::store::s3 {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr size_t kChunk = 256 << 10;

// Runs one asynchronous operation to completion on `ioc` (the stream's expiry bounds it).
template <class Start>
beast::error_code Run(asio::io_context& ioc, Start&& start) {
  beast::error_code result = asio::error::would_block;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

Status NetError(const std::string& where, std::string_view what, const beast::error_code& ec,
                std::chrono::milliseconds timeout) {
  if (ec == beast::error::timeout) {
    return Unavailable(where + ": " + std::string(what) + " timed out after " +
                       std::to_string(timeout.count()) + " ms");
  }
  return Unavailable(where + ": " + std::string(what) + " failed: " + ec.message());
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Sends the request line, headers and body of `x`.
template <class Stream>
Status SendRequest(asio::io_context& ioc, Stream& stream, beast::tcp_stream& lowest,
                   const std::string& where, const HttpExchange& x,
                   std::chrono::milliseconds timeout) {
  http::request<http::empty_body> req;
  req.method_string(x.method);
  req.target(x.target);
  req.version(11);
  for (const auto& [name, value] : x.headers) req.insert(name, value);
  const uint64_t body_size = x.body_file.empty() ? x.body.size() : x.body_file_size;
  if (body_size > 0 || x.method == "PUT" || x.method == "POST") {
    req.set(http::field::content_length, std::to_string(body_size));
  }
  http::request_serializer<http::empty_body> sr{req};
  lowest.expires_after(timeout);
  beast::error_code ec =
      Run(ioc, [&](auto h) { http::async_write_header(stream, sr, std::move(h)); });
  if (ec) return NetError(where, "sending the request", ec, timeout);

  if (x.body_file.empty()) {
    for (size_t off = 0; off < x.body.size(); off += kChunk) {
      const size_t n = std::min(kChunk, x.body.size() - off);
      lowest.expires_after(timeout);
      ec = Run(ioc, [&](auto h) {
        asio::async_write(stream, asio::buffer(x.body.data() + off, n), std::move(h));
      });
      if (ec) return NetError(where, "sending the body", ec, timeout);
    }
  } else {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(x.body_file.c_str(), "rb"));
    if (!f) return IOError(where + ": cannot open " + x.body_file);
    std::vector<char> buf(kChunk);
    uint64_t left = x.body_file_size;
    while (left > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      const size_t got = std::fread(buf.data(), 1, want, f.get());
      if (got != want) return IOError(where + ": " + x.body_file + " is shorter than when hashed");
      lowest.expires_after(timeout);
      ec = Run(ioc, [&](auto h) { asio::async_write(stream, asio::buffer(buf.data(), got), std::move(h)); });
      if (ec) return NetError(where, "sending the body", ec, timeout);
      left -= got;
    }
  }
  return Status::Ok();
}

template <class Stream>
Result<HttpReply> Exchange(asio::io_context& ioc, Stream& stream, beast::tcp_stream& lowest,
                           const std::string& where, const HttpExchange& x,
                           std::chrono::milliseconds timeout) {
  BLZ_RETURN_IF_ERROR(SendRequest(ioc, stream, lowest, where, x, timeout));
  beast::error_code ec;
  beast::flat_buffer buffer;
  http::response_parser<http::empty_body> hp;
  hp.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (x.method == "HEAD") hp.skip(true);
  lowest.expires_after(timeout);
  ec = Run(ioc, [&](auto h) { http::async_read_header(stream, buffer, hp, std::move(h)); });
  if (ec) return NetError(where, "reading the response header", ec, timeout);

  HttpReply reply;
  reply.status = static_cast<int>(hp.get().result_int());
  for (const auto& field : hp.get()) {
    reply.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  if (x.method == "HEAD") return reply;
  if (hp.is_done()) {
    if (!x.response_file.empty() && reply.status / 100 == 2) {
      std::unique_ptr<std::FILE, FileCloser> f(std::fopen(x.response_file.c_str(), "wb"));
      if (!f) return IOError(where + ": cannot write " + x.response_file);
    }
    return reply;
  }

  if (!x.response_file.empty() && reply.status / 100 == 2) {
    http::response_parser<http::file_body> fp{std::move(hp)};
    fp.body_limit(std::numeric_limits<std::uint64_t>::max());
    fp.get().body().open(x.response_file.c_str(), beast::file_mode::write, ec);
    if (ec) return IOError(where + ": cannot write " + x.response_file + ": " + ec.message());
    // file_body reads chunk by chunk; the expiry is renewed per read so it bounds a stall.
    while (!fp.is_done()) {
      lowest.expires_after(timeout);
      ec = Run(ioc, [&](auto h) { http::async_read_some(stream, buffer, fp, std::move(h)); });
      if (ec) return NetError(where, "reading the body", ec, timeout);
    }
    return reply;
  }
  http::response_parser<http::string_body> sp{std::move(hp)};
  sp.body_limit(x.max_body);
  while (!sp.is_done()) {
    lowest.expires_after(timeout);
    ec = Run(ioc, [&](auto h) { http::async_read_some(stream, buffer, sp, std::move(h)); });
    if (ec == http::error::body_limit) {
      return TooLarge(where + ": response body exceeds " + std::to_string(x.max_body) + " bytes");
    }
    if (ec) return NetError(where, "reading the body", ec, timeout);
  }
  reply.body = std::move(sp.get().body());
  return reply;
}

}  // namespace

std::string HeaderValue(const HeaderList& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (n.size() == name.size() && strncasecmp(n.data(), name.data(), n.size()) == 0) return v;
  }
  return "";
}

namespace {

// One open connection: plain TCP, or TLS over it (then `tcp` is moved into `tls`).
struct Connection {
  asio::io_context ioc;
  std::unique_ptr<asio::ssl::context> ctx;
  std::unique_ptr<beast::tcp_stream> tcp;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *tcp; }
  // Runs f(stream) with the stream requests go through.
  template <class F>
  auto With(F&& f) {
    return tls ? f(*tls) : f(*tcp);
  }
};

Result<std::unique_ptr<Connection>> Connect(const S3Endpoint& ep, const std::string& connect_host,
                                            const std::string& where,
                                            std::chrono::milliseconds timeout) {
  auto c = std::make_unique<Connection>();
  tcp::resolver resolver(c->ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(connect_host, std::to_string(ep.port), ec);
  if (ec) return Unavailable(where + ": cannot resolve " + connect_host + ": " + ec.message());
  c->tcp = std::make_unique<beast::tcp_stream>(c->ioc);
  c->tcp->expires_after(timeout);
  ec = Run(c->ioc, [&](auto h) { c->tcp->async_connect(endpoints, std::move(h)); });
  if (ec) return NetError(where, "connecting", ec, timeout);
  if (!ep.tls) return c;

  c->ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  asio::ssl::context& ctx = *c->ctx;
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                  asio::ssl::context::no_tlsv1_1);
  ctx.set_default_verify_paths(ec);
  if (ec) return Unavailable(where + ": cannot load the system trust store: " + ec.message());
  ctx.set_verify_mode(asio::ssl::verify_peer);
  c->tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(std::move(*c->tcp), ctx);
  c->tcp.reset();
  auto& tls = *c->tls;
  if (!SSL_set_tlsext_host_name(tls.native_handle(), connect_host.c_str())) {
    return Unavailable(where + ": cannot set TLS SNI");
  }
  tls.set_verify_callback(asio::ssl::host_name_verification(connect_host));
  c->lowest().expires_after(timeout);
  ec = Run(c->ioc,
           [&](auto h) { tls.async_handshake(asio::ssl::stream_base::client, std::move(h)); });
  if (ec) {
    const long verify = SSL_get_verify_result(tls.native_handle());
    if (verify != X509_V_OK) {
      return Unavailable(where + ": " + std::string(kCertificateVerifyFailed) + " (" +
                         X509_verify_cert_error_string(verify) +
                         ") against the system trust store");
    }
    return NetError(where, "TLS handshake", ec, timeout);
  }
  return c;
}

std::string Where(const S3Endpoint& ep, const std::string& connect_host, const HttpExchange& x) {
  return x.method + " " + (ep.tls ? "https://" : "http://") + connect_host + ":" +
         std::to_string(ep.port);
}

class BeastHttpStream final : public HttpStream {
 public:
  BeastHttpStream(std::unique_ptr<Connection> conn, std::string where,
                  std::chrono::milliseconds timeout)
      : conn_(std::move(conn)), where_(std::move(where)), timeout_(timeout) {}

  Status ReadHeader() {
    http::response_parser<http::empty_body> hp;
    hp.body_limit(std::numeric_limits<std::uint64_t>::max());
    conn_->lowest().expires_after(timeout_);
    beast::error_code ec = conn_->With([&](auto& stream) {
      return Run(conn_->ioc, [&](auto h) {
        http::async_read_header(stream, buffer_, hp, std::move(h));
      });
    });
    if (ec) return NetError(where_, "reading the response header", ec, timeout_);
    status_ = static_cast<int>(hp.get().result_int());
    for (const auto& field : hp.get()) {
      headers_.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    parser_.emplace(std::move(hp));
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    return Status::Ok();
  }

  int status() const override { return status_; }
  const HeaderList& headers() const override { return headers_; }

  Result<size_t> Read(char* buf, size_t size) override {
    if (parser_->is_done() || size == 0) return size_t{0};
    auto& body = parser_->get().body();
    body.data = buf;
    body.size = size;
    body.more = true;
    while (true) {
      conn_->lowest().expires_after(timeout_);
      beast::error_code ec = conn_->With([&](auto& stream) {
        return Run(conn_->ioc, [&](auto h) {
          http::async_read_some(stream, buffer_, *parser_, std::move(h));
        });
      });
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return NetError(where_, "reading the body", ec, timeout_);
      const size_t got = size - body.size;
      if (got > 0 || parser_->is_done()) return got;
    }
  }

 private:
  std::unique_ptr<Connection> conn_;
  std::string where_;
  std::chrono::milliseconds timeout_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  int status_ = 0;
  HeaderList headers_;
};

}  // namespace

Result<std::string> HttpStream::ReadAll(uint64_t max) {
  std::string out;
  char buf[16 << 10];
  while (true) {
    BLZ_ASSIGN_OR_RETURN(size_t n, Read(buf, sizeof(buf)));
    if (n == 0) return out;
    if (out.size() + n > max) {
      return TooLarge("response body exceeds " + std::to_string(max) + " bytes");
    }
    out.append(buf, n);
  }
}

Result<HttpReply> HttpDo(const S3Endpoint& ep, const std::string& connect_host,
                         const HttpExchange& x, std::chrono::milliseconds timeout) {
  const std::string where = Where(ep, connect_host, x);
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Connect(ep, connect_host, where, timeout));
  if (!c->tls) {
    auto reply = Exchange(c->ioc, *c->tcp, *c->tcp, where, x, timeout);
    beast::error_code ec;
    c->tcp->socket().shutdown(tcp::socket::shutdown_both, ec);
    return reply;
  }
  return Exchange(c->ioc, *c->tls, c->lowest(), where, x, timeout);
}

Result<std::unique_ptr<HttpStream>> OpenHttpStream(const S3Endpoint& ep,
                                                   const std::string& connect_host,
                                                   const HttpExchange& x,
                                                   std::chrono::milliseconds timeout) {
  const std::string where = Where(ep, connect_host, x);
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Connect(ep, connect_host, where, timeout));
  Connection& conn = *c;
  BLZ_RETURN_IF_ERROR(conn.With([&](auto& stream) {
    return SendRequest(conn.ioc, stream, conn.lowest(), where, x, timeout);
  }));
  auto stream = std::make_unique<BeastHttpStream>(std::move(c), where, timeout);
  BLZ_RETURN_IF_ERROR(stream->ReadHeader());
  return std::unique_ptr<HttpStream>(std::move(stream));
}

}  // namespace blz::store::s3
