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

template <class Stream>
Result<HttpReply> Exchange(asio::io_context& ioc, Stream& stream, beast::tcp_stream& lowest,
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

Result<HttpReply> HttpDo(const S3Endpoint& ep, const std::string& connect_host,
                         const HttpExchange& x, std::chrono::milliseconds timeout) {
  const std::string where = x.method + " " + (ep.tls ? "https://" : "http://") + connect_host +
                            ":" + std::to_string(ep.port);
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(connect_host, std::to_string(ep.port), ec);
  if (ec) return Unavailable(where + ": cannot resolve " + connect_host + ": " + ec.message());
  beast::tcp_stream tcp_stream(ioc);
  tcp_stream.expires_after(timeout);
  ec = Run(ioc, [&](auto h) { tcp_stream.async_connect(endpoints, std::move(h)); });
  if (ec) return NetError(where, "connecting", ec, timeout);

  if (!ep.tls) {
    auto reply = Exchange(ioc, tcp_stream, tcp_stream, where, x, timeout);
    tcp_stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return reply;
  }
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                  asio::ssl::context::no_tlsv1_1);
  ctx.set_default_verify_paths(ec);
  if (ec) return Unavailable(where + ": cannot load the system trust store: " + ec.message());
  ctx.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> tls(std::move(tcp_stream), ctx);
  if (!SSL_set_tlsext_host_name(tls.native_handle(), connect_host.c_str())) {
    return Unavailable(where + ": cannot set TLS SNI");
  }
  tls.set_verify_callback(asio::ssl::host_name_verification(connect_host));
  beast::tcp_stream& lowest = beast::get_lowest_layer(tls);
  lowest.expires_after(timeout);
  ec = Run(ioc, [&](auto h) { tls.async_handshake(asio::ssl::stream_base::client, std::move(h)); });
  if (ec) {
    const long verify = SSL_get_verify_result(tls.native_handle());
    if (verify != X509_V_OK) {
      return Unavailable(where + ": " + std::string(kCertificateVerifyFailed) + " (" +
                         X509_verify_cert_error_string(verify) +
                         ") against the system trust store");
    }
    return NetError(where, "TLS handshake", ec, timeout);
  }
  return Exchange(ioc, tls, lowest, where, x, timeout);
}

}  // namespace blz::store::s3
