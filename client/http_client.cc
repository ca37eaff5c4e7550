#include "client/http_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/text.h"
#include "core/unique_fd.h"

namespace blz::client {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr size_t kChunkBytes = 256 * 1024;
// Largest read of a response body of known length (ReadResponse).
constexpr size_t kRawBodyBytes = 1 << 20;

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

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return out;
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}

// The first of the environment variables `names` that is set and not empty, or "".
std::string GetEnvFirst(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

std::string Base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 |
                 uint32_t(uint8_t(in[i + 2]));
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

bool IsIpAddress(const std::string& host) {
  error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

// A parsed proxy URL.
struct ProxyUrl {
  std::string host;  // without brackets
  uint16_t port = 1080;
  std::string authorization;  // "Basic ..." when the URL has user:password, else ""
};

Result<ProxyUrl> ParseProxyUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("proxy '" + std::string(url) + "': " + std::string(why) +
                           " (expected http://HOST[:PORT])");
  };
  std::string_view rest = url;
  size_t scheme_end = rest.find("://");
  if (scheme_end != std::string_view::npos) {
    std::string scheme = ToLower(rest.substr(0, scheme_end));
    if (scheme != "http") return bad("only http:// proxies are supported");
    rest = rest.substr(scheme_end + 3);
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) return bad("a path is not allowed");
  ProxyUrl out;
  size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    out.authorization = "Basic " + Base64(rest.substr(0, at));
    rest = rest.substr(at + 1);
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unterminated '['");
    out.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("invalid port");
      port_text = rest.substr(1);
    }
  } else {
    size_t colon = rest.rfind(':');
    out.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port_text = rest.substr(colon + 1);
    if (colon != std::string_view::npos && port_text.empty()) return bad("invalid port");
  }
  if (out.host.empty() || HasCrLf(out.host)) return bad("missing host");
  if (!port_text.empty()) {
    uint32_t port = 0;
    if (port_text.size() > 5) return bad("invalid port");
    for (char c : port_text) {
      if (c < '0' || c > '9') return bad("invalid port");
      port = port * 10 + uint32_t(c - '0');
    }
    if (port == 0 || port > 65535) return bad("invalid port");
    out.port = uint16_t(port);
  }
  return out;
}

}  // namespace

bool NoProxyMatches(std::string_view no_proxy, std::string_view host_in, uint16_t port) {
  const std::string host = ToLower(host_in);
  size_t start = 0;
  while (start <= no_proxy.size()) {
    size_t comma = no_proxy.find(',', start);
    std::string entry = ToLower(Trim(no_proxy.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    start = comma == std::string_view::npos ? no_proxy.size() + 1 : comma + 1;
    if (entry.empty()) continue;
    if (entry == "*") return true;
    // An optional :PORT ("[v6]:port" for IPv6, "host:port"; a bare IPv6 address has several
    // colons and no port).
    std::string entry_host = entry;
    int entry_port = -1;
    if (entry.front() == '[') {
      size_t close = entry.find(']');
      if (close == std::string::npos) continue;
      entry_host = entry.substr(1, close - 1);
      if (close + 1 < entry.size() && entry[close + 1] == ':') {
        entry_port = std::atoi(entry.c_str() + close + 2);
      }
    } else if (std::count(entry.begin(), entry.end(), ':') == 1) {
      size_t colon = entry.find(':');
      entry_host = entry.substr(0, colon);
      entry_port = std::atoi(entry.c_str() + colon + 1);
    }
    if (entry_port >= 0 && entry_port != int(port)) continue;
    while (!entry_host.empty() && entry_host.front() == '.') entry_host.erase(0, 1);
    if (entry_host.empty()) continue;
    if (host == entry_host) return true;
    if (host.size() > entry_host.size() &&
        host.compare(host.size() - entry_host.size(), entry_host.size(), entry_host) == 0 &&
        host[host.size() - entry_host.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

std::string ProxyFor(const HttpClientOptions& options, std::string_view host, uint16_t port) {
  std::string proxy = options.proxy.has_value()
                          ? *options.proxy
                          : options.tls ? GetEnvFirst({"https_proxy", "HTTPS_PROXY"})
                                        : GetEnvFirst({"http_proxy", "HTTP_PROXY"});
  if (proxy.empty()) return "";
  std::string no_proxy =
      options.no_proxy.has_value() ? *options.no_proxy : GetEnvFirst({"no_proxy", "NO_PROXY"});
  if (NoProxyMatches(no_proxy, host, port)) return "";
  return proxy;
}

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
  return ParseDecimalU64(Header("Content-Length"), out);
}

struct HttpClient::Impl {
  using TlsStream = beast::ssl_stream<beast::tcp_stream>;

  std::string host;
  uint16_t port = 0;
  std::string authority;
  HttpClientOptions options;
  net::io_context ioc;
  beast::tcp_stream plain{ioc};            // the connection when !options.tls
  std::unique_ptr<net::ssl::context> ssl;  // when options.tls
  std::unique_ptr<TlsStream> tls;          // the connection when options.tls (per connection)
  Status init_status = Status::Ok();       // a bad CA file or proxy URL, reported by Send
  std::string proxy_url;                   // "" = direct
  ProxyUrl proxy;
  beast::flat_buffer buffer;
  bool connected = false;
  int connections_opened = 0;

  void Init() {
    const bool v6 = host.find(':') != std::string::npos;
    authority = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
    proxy_url = ProxyFor(options, host, port);
    if (!proxy_url.empty()) {
      Result<ProxyUrl> p = ParseProxyUrl(proxy_url);
      if (!p.ok()) {
        init_status = p.status();
      } else {
        proxy = std::move(p).value();
      }
    }
    if (!options.tls) return;
    try {
      ssl = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
      SSL_CTX_set_min_proto_version(ssl->native_handle(), TLS1_2_VERSION);
      error_code ec;
      if (!options.ca_file.empty()) {
        struct stat st {};
        if (::stat(options.ca_file.c_str(), &st) != 0 && errno == ENOENT) {
          init_status = NotFound("no such file: " + options.ca_file + " (the CA bundle" +
                                 (options.ca_origin.empty() ? "" : " of " + options.ca_origin) +
                                 ")");
          return;
        }
        ssl->load_verify_file(options.ca_file, ec);
        if (ec) {
          init_status = InvalidArgument("CA bundle '" + options.ca_file +
                                        "' cannot be loaded: " + ec.message() +
                                        " (expected a PEM file of CA certificates)");
        } else if (options.ca_adds_to_system) {
          ssl->set_default_verify_paths(ec);  // best effort: the file alone may be enough
        }
      } else {
        ssl->set_default_verify_paths(ec);
        if (ec) init_status = Unavailable("cannot load the system CA store: " + ec.message());
      }
    } catch (const std::exception& e) {
      init_status = Unavailable(std::string("cannot set up TLS: ") + e.what());
    }
  }

  // The TCP layer of the current connection.
  beast::tcp_stream& Tcp() { return tls ? beast::get_lowest_layer(*tls) : plain; }

  // Calls `f` with the stream requests go over: the TLS stream or the plain one.
  template <class F>
  void WithStream(F&& f) {
    if (options.tls && tls) {
      f(*tls);
    } else {
      f(plain);
    }
  }

  // Drives the pending asynchronous operation (and its timer) to completion.
  void Run() {
    ioc.restart();
    ioc.run();
  }

  std::string Where() const { return std::string(options.tls ? "https://" : "http://") + authority; }

  std::string Describe(const error_code& ec, std::chrono::milliseconds timeout) const {
    if (ec == beast::error::timeout) {
      return "timed out after " + std::to_string(timeout.count()) + " ms";
    }
    return ec.message();
  }

  void CloseConnection() {
    error_code ignored;
    beast::tcp_stream& conn = Tcp();
    conn.socket().shutdown(tcp::socket::shutdown_both, ignored);
    conn.close();
    tls.reset();
    buffer.clear();
    connected = false;
  }

  // HTTP CONNECT through the proxy to host:port, on the freshly connected Tcp().
  Status ProxyConnect() {
    http::request<http::empty_body> req{http::verb::connect, authority, 11};
    req.set(http::field::host, authority);
    req.set(http::field::user_agent, options.user_agent);
    if (!proxy.authorization.empty()) req.set(http::field::proxy_authorization, proxy.authorization);
    error_code ec;
    beast::tcp_stream& conn = Tcp();
    conn.expires_after(options.connect_timeout);
    http::async_write(conn, req, [&ec](const error_code& e, size_t) { ec = e; });
    Run();
    http::response_parser<http::empty_body> parser;
    parser.skip(true);  // a 2xx answer to CONNECT has no body: the tunnel follows
    beast::flat_buffer head_buffer;
    if (!ec) {
      conn.expires_after(options.connect_timeout);
      http::async_read(conn, head_buffer, parser, [&ec](const error_code& e, size_t) { ec = e; });
      Run();
    }
    const std::string via = "proxy " + proxy.host + ":" + std::to_string(proxy.port);
    if (ec) {
      return Unavailable("CONNECT to " + authority + " through " + via + " failed: " +
                         Describe(ec, options.connect_timeout));
    }
    const unsigned status = parser.get().result_int();
    if (status < 200 || status >= 300) {
      return Unavailable(via + " refused CONNECT to " + authority + ": HTTP " +
                         std::to_string(status) + " " + ToStd(parser.get().reason()));
    }
    if (head_buffer.size() != 0) {
      return Unavailable(via + " sent data after its CONNECT answer");
    }
    return Status::Ok();
  }

  // The TLS handshake (SNI, verification) on the freshly connected (or tunnelled) Tcp().
  Status Handshake() {
    SSL* native = tls->native_handle();
    if (!IsIpAddress(host)) SSL_set_tlsext_host_name(native, host.c_str());  // SNI
    if (options.insecure) {
      tls->set_verify_mode(net::ssl::verify_none);
    } else {
      tls->set_verify_mode(net::ssl::verify_peer);
      X509_VERIFY_PARAM* param = SSL_get0_param(native);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      int ok = IsIpAddress(host) ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                                 : X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
      if (ok != 1) return Unavailable("TLS: cannot set the host name to verify: " + host);
    }
    error_code ec;
    Tcp().expires_after(options.connect_timeout);
    tls->async_handshake(net::ssl::stream_base::client, [&ec](const error_code& e) { ec = e; });
    Run();
    if (!ec) return Status::Ok();
    std::string why = Describe(ec, options.connect_timeout);
    const long verify = SSL_get_verify_result(native);
    // An untrusted certificate, or a peer that does not speak TLS, will not change on a retry:
    // the first is marked (kCertificateVerifyFailed, not retried by client/retry.h), the
    // second is kUnsupported.
    if (!options.insecure && verify != X509_V_OK) {
      // kUnavailable (the registry cannot be trusted: exit code 6), marked so that it is not
      // retried (client/retry.h IsRetryableFailure).
      std::string trust = "the system trust store";
      if (!options.ca_file.empty()) {
        trust = "the CA bundle " + options.ca_file +
                (options.ca_origin.empty() ? "" : " (" + options.ca_origin + ")") +
                (options.ca_adds_to_system ? " and the system trust store" : "");
      }
      return Unavailable("TLS handshake with " + host + " (" + authority + ") failed: " +
                         std::string(kCertificateVerifyFailed) + " (" +
                         X509_verify_cert_error_string(verify) + ") against " + trust +
                         "; pass --ca-cert FILE or set BLZ_CA_BUNDLE to trust its CA, or "
                         "remember it with `blz login https://" + authority +
                         " --ca-cert FILE` (or --insecure to skip verification)");
    }
    if (why.find("wrong version number") != std::string::npos ||
        why.find("packet length too long") != std::string::npos ||
        why.find("record layer failure") != std::string::npos) {
      return Unsupported("TLS handshake with " + authority + " failed: " + why +
                         " (the server does not speak TLS on this port? try http:// or "
                         "--plain-http)");
    }
    return Unavailable("TLS handshake with " + authority + " failed: " + why);
  }

  Status Connect() {
    CloseConnection();
    BLZ_RETURN_IF_ERROR(init_status);
    if (options.tls) tls = std::make_unique<TlsStream>(ioc, *ssl);
    beast::tcp_stream& conn = Tcp();
    const std::string& connect_host = proxy_url.empty() ? host : proxy.host;
    const uint16_t connect_port = proxy_url.empty() ? port : proxy.port;
    const std::string target = proxy_url.empty()
                                   ? Where()
                                   : "proxy " + proxy.host + ":" + std::to_string(proxy.port);
    tcp::resolver resolver(ioc);
    error_code ec;
    auto results = resolver.resolve(connect_host, std::to_string(connect_port), ec);
    if (ec) {
      CloseConnection();
      return Unavailable("cannot resolve " + connect_host + ": " + ec.message());
    }
    conn.expires_after(options.connect_timeout);
    conn.async_connect(results, [&ec](const error_code& e, const tcp::endpoint&) { ec = e; });
    Run();
    if (ec) {
      CloseConnection();
      return Unavailable("cannot connect to " + target + ": " +
                         Describe(ec, options.connect_timeout));
    }
    error_code ignored;
    conn.socket().set_option(tcp::no_delay(true), ignored);
    if (!proxy_url.empty()) {
      Status s = ProxyConnect();
      if (!s.ok()) {
        CloseConnection();
        return s;
      }
    }
    if (options.tls) {
      Status s = Handshake();
      if (!s.ok()) {
        CloseConnection();
        return s;
      }
    }
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
    Tcp().expires_after(options.io_timeout);
    WithStream([&](auto& stream) {
      http::async_write(stream, req, [&ec](const error_code& e, size_t) { ec = e; });
    });
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
    UniqueFd fd(::open(request.body_file.c_str(), O_RDONLY | O_CLOEXEC));
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
    Tcp().expires_after(options.io_timeout);
    WithStream([&](auto& stream) {
      http::async_write_header(stream, sr, [&ec](const error_code& e, size_t) { ec = e; });
    });
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
      Tcp().expires_after(options.io_timeout);
      WithStream([&](auto& stream) {
        http::async_write(stream, sr, [&ec](const error_code& e, size_t) { ec = e; });
      });
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
      Tcp().expires_after(options.io_timeout);
      WithStream([&](auto& stream) {
        http::async_write(stream, sr, [&ec](const error_code& e, size_t) { ec = e; });
      });
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
    Tcp().expires_after(options.io_timeout);
    WithStream([&](auto& stream) {
      http::async_read_header(stream, buffer, parser,
                              [&ec](const error_code& e, size_t) { ec = e; });
    });
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
    // Hands `n` body bytes to the sink or the in-memory body. Errors: the sink's, kTooLarge.
    auto take = [&](const char* data, size_t n) -> Status {
      out->body_bytes += n;
      if (to_sink) {
        BLZ_RETURN_IF_ERROR(transfer.sink(ByteSpan(reinterpret_cast<const uint8_t*>(data), n)));
      } else {
        if (out->body.size() + n > transfer.max_memory_body) {
          return TooLarge(Where() + request.target + ": response body exceeds " +
                          std::to_string(transfer.max_memory_body) + " bytes");
        }
        out->body.append(data, n);
      }
      if (transfer.download_progress) transfer.download_progress(out->body_bytes, total);
      return Status::Ok();
    };
    auto body_failed = [&](const error_code& e) {
      return IOError("connection to " + Where() + " failed while reading the body of " +
                     request.target + " after " + std::to_string(out->body_bytes) +
                     " bytes: " + Describe(e, options.io_timeout));
    };

    // A body of known length (a blob, a patch) is read straight from the stream in reads of up
    // to kRawBodyBytes, each with its own inactivity timeout, instead of through the parser's
    // 64 KiB reads (each a timer armed and cancelled: 140 MB/s on loopback against curl's
    // 900). Beast checked the length against the body limit with the head.
    if (!parser.is_done() && !parser.chunked() && parser.content_length().has_value()) {
      uint64_t left = *parser.content_length();
      if (const size_t early = size_t(std::min<uint64_t>(buffer.size(), left)); early > 0) {
        Status s = take(static_cast<const char*>(buffer.data().data()), early);
        buffer.consume(early);
        left -= early;
        if (!s.ok()) {
          CloseConnection();
          return s;
        }
      }
      std::vector<char> raw(size_t(std::min<uint64_t>(kRawBodyBytes, left)));
      while (left > 0) {
        const size_t want = size_t(std::min<uint64_t>(raw.size(), left));
        size_t got = 0;
        Tcp().expires_after(options.io_timeout);
        WithStream([&](auto& stream) {
          stream.async_read_some(net::buffer(raw.data(), want),
                                 [&ec, &got](const error_code& e, size_t n) {
                                   ec = e;
                                   got = n;
                                 });
        });
        Run();
        // Bytes that arrived before a failure still reach the sink, so a resumed download
        // continues after them instead of fetching them again.
        if (got > 0) {
          Status s = take(raw.data(), got);
          if (!s.ok()) {
            CloseConnection();
            return s;
          }
          left -= got;
        }
        if (ec && left > 0) {
          CloseConnection();
          return body_failed(ec == net::error::eof ? error_code(http::error::partial_message)
                                                   : ec);
        }
      }
      if (!parser.keep_alive()) CloseConnection();
      return Status::Ok();
    }

    std::vector<char> buf(kChunkBytes);
    while (!parser.is_done()) {
      msg.body().data = buf.data();
      msg.body().size = buf.size();
      Tcp().expires_after(options.io_timeout);
      WithStream([&](auto& stream) {
        http::async_read(stream, buffer, parser, [&ec](const error_code& e, size_t) { ec = e; });
      });
      Run();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        CloseConnection();
        // As above: bytes that arrived before the failure still reach the sink.
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
        return body_failed(ec);
      }
      size_t got = buf.size() - msg.body().size;
      if (got == 0) continue;
      if (Status s = take(buf.data(), got); !s.ok()) {
        CloseConnection();
        return s;
      }
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
  impl_->Init();
}

HttpClient::~HttpClient() {
  try {
    impl_->CloseConnection();
  } catch (...) {
  }
}

void HttpClient::Close() { impl_->CloseConnection(); }

const char* HttpClient::scheme() const { return impl_->options.tls ? "https" : "http"; }

const std::string& HttpClient::proxy() const { return impl_->proxy_url; }

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
