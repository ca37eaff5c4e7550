#include "registry/server.h"

#include <future>
#include <thread>
#include <vector>

#include <boost/asio/ssl.hpp>
#include <openssl/ssl.h>

#include "registry/forwarded.h"
#include "registry/handler_pools.h"
#include "registry/http_session.h"
#include "registry/net.h"
#include "registry/wire.h"

namespace blz::registry {
namespace {

int ThreadCount(int threads) {
  if (threads > 0) return threads;
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

// Accepts connections and starts one HttpSession per connection, each on its own strand.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& ioc, tcp::acceptor acceptor, Registry* registry,
           HandlerPools* handlers, const SessionOptions* options)
      : ioc_(ioc),
        acceptor_(std::move(acceptor)),
        registry_(registry),
        handlers_(handlers),
        options_(options) {}

  void Run() { Accept(); }
  void Stop() {
    beast::error_code ec;
    acceptor_.close(ec);
  }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_),
                           beast::bind_front_handler(&Listener::OnAccept, shared_from_this()));
  }
  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      std::make_shared<HttpSession>(std::move(socket), registry_, handlers_, options_)->Run();
    }
    Accept();  // keep accepting after transient errors (e.g. EMFILE)
  }

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  Registry* registry_;
  HandlerPools* handlers_;
  const SessionOptions* options_;
};

Result<tcp::endpoint> ParseListen(const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("listen address '" + listen + "' must be <host>:<port>");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::optional<uint64_t> port = ParseUint(listen.substr(colon + 1));
  if (!port.has_value() || *port > 65535) {
    return InvalidArgument("listen address '" + listen + "': bad port");
  }
  if (host == "localhost") host = "127.0.0.1";
  beast::error_code ec;
  net::ip::address addr = net::ip::make_address(host, ec);
  if (ec) {
    return InvalidArgument("listen address '" + listen + "': '" + host +
                           "' is not an IP address");
  }
  return tcp::endpoint(addr, uint16_t(*port));
}

}  // namespace

Result<std::shared_ptr<net::ssl::context>> LoadServerTlsContext(const std::string& cert_file,
                                                                const std::string& key_file) {
  if (cert_file.empty() || key_file.empty()) {
    return InvalidArgument("HTTPS needs both --tls-cert and --tls-key");
  }
  try {
    auto ctx = std::make_shared<net::ssl::context>(net::ssl::context::tls_server);
    ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                     net::ssl::context::no_sslv3 | net::ssl::context::single_dh_use);
    SSL_CTX* native = ctx->native_handle();
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    // Mozilla's "intermediate" configuration: TLS 1.2 only with forward-secret AEAD suites,
    // TLS 1.3 with OpenSSL's default suites, the client's preference order.
    if (SSL_CTX_set_cipher_list(native, kTls12CipherSuites) != 1 ||
        SSL_CTX_set_ciphersuites(native, kTls13CipherSuites) != 1) {
      return InvalidArgument("cannot set up TLS: this OpenSSL lacks the cipher suites " +
                             std::string(kTls12CipherSuites));
    }
    SSL_CTX_clear_options(native, SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_dh_auto(native, 1);  // DHE-RSA: RFC 7919 ffdhe groups sized to the key
    beast::error_code ec;
    ctx->use_certificate_chain_file(cert_file, ec);
    if (ec) {
      return InvalidArgument("TLS certificate '" + cert_file + "' cannot be loaded: " +
                             ec.message() + " (expected a PEM certificate chain)");
    }
    ctx->use_private_key_file(key_file, net::ssl::context::pem, ec);
    if (ec && ec.message().find("mismatch") != std::string::npos) {
      return InvalidArgument("TLS key '" + key_file + "' does not match the certificate '" +
                             cert_file + "'");
    }
    if (ec) {
      return InvalidArgument("TLS key '" + key_file + "' cannot be loaded: " + ec.message() +
                             " (expected a PEM private key)");
    }
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      return InvalidArgument("TLS key '" + key_file + "' does not match the certificate '" +
                             cert_file + "'");
    }
    return ctx;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("cannot set up TLS: ") + e.what());
  }
}

struct Server::Impl {
  explicit Impl(int n)
      : ioc(std::make_unique<net::io_context>(n)),
        handlers(std::make_unique<HandlerPools>(size_t(n), size_t(n),
                                                size_t(n) * (1 + kMaxHeavyQueuedPerThread))) {}

  // Teardown order (Stop): close the acceptor, stop ioc and join its threads, drain the handler
  // pool (running handlers finish; their replies are dropped), then destroy the pool, the
  // listener and finally ioc, which destroys the remaining sessions and closes their sockets.
  std::unique_ptr<net::io_context> ioc;
  std::unique_ptr<HandlerPools> handlers;
  std::shared_ptr<Listener> listener;
  std::vector<std::thread> io_threads;
  std::string host;
  uint16_t port = 0;
  bool stopped = false;
  SessionOptions session;  // outlives the sessions (destroyed with ioc in Stop)
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Stop(); }

Result<std::unique_ptr<Server>> Server::Start(Registry* registry, const std::string& listen,
                                              int threads, SessionOptions session) {
  BLZ_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseListen(listen));
  const int n = ThreadCount(threads);
  auto impl = std::make_unique<Impl>(n);
  impl->session = std::move(session);
  if (!impl->session.log) impl->session.log = StderrLogSink();
  tcp::acceptor acceptor(*impl->ioc);
  beast::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return IOError("cannot listen on " + listen + ": " + ec.message());
  tcp::endpoint bound = acceptor.local_endpoint(ec);
  if (ec) return IOError("cannot listen on " + listen + ": " + ec.message());
  impl->host = bound.address().to_string();
  impl->port = bound.port();
  impl->listener =
      std::make_shared<Listener>(*impl->ioc, std::move(acceptor), registry, impl->handlers.get(),
                                 &impl->session);
  impl->listener->Run();
  for (int i = 0; i < n; ++i) {
    impl->io_threads.emplace_back([ioc = impl->ioc.get()] { ioc->run(); });
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const std::string& Server::host() const { return impl_->host; }
uint16_t Server::port() const { return impl_->port; }

std::string Server::url() const {
  const bool v6 = impl_->host.find(':') != std::string::npos;
  return std::string(impl_->session.tls ? "https://" : "http://") +
         (v6 ? "[" + impl_->host + "]" : impl_->host) + ":" +
         std::to_string(impl_->port);
}

void Server::Stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  // Close the acceptor on an I/O thread and wait for it: once Stop returns, connecting fails.
  std::promise<void> closed;
  net::post(*impl_->ioc, [listener = impl_->listener, &closed] {
    listener->Stop();
    closed.set_value();
  });
  closed.get_future().wait();
  impl_->ioc->stop();
  for (auto& t : impl_->io_threads) t.join();
  impl_->io_threads.clear();
  impl_->handlers->Join();
  impl_->handlers.reset();
  impl_->listener.reset();
  impl_->ioc.reset();
}

}  // namespace blz::registry
