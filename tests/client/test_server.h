// A tiny in-test HTTP server (Boost.Beast, asynchronous, one thread) on 127.0.0.1 with an
// ephemeral port. Each request is answered by a handler function. Bounded: the I/O thread
// runs for at most 60 s and every read has a 10 s timeout; the destructor stops it.
//
// Misbehaviour for tests of the client's error paths, chosen by the handler through headers of
// the response it returns (the headers are stripped before sending):
//   X-Test-Hang: 1         never answer (the client must time out)
//   X-Test-Truncate: <n>   announce Content-Length <n> (> body size), send the body, close
#ifndef BLZ_TESTS_CLIENT_TEST_SERVER_H_
#define BLZ_TESTS_CLIENT_TEST_SERVER_H_

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace blz::testing {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;

using TestRequest = http::request<http::string_body>;
using TestResponse = http::response<http::string_body>;

// A response with `status`, `body` and its Content-Length.
inline TestResponse MakeResponse(http::status status, std::string body = "",
                                 std::string content_type = "application/json") {
  TestResponse res{status, 11};
  if (!content_type.empty()) res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

// An OCI error response: {"errors":[{"code":code,"message":message}]}.
inline TestResponse OciError(http::status status, const std::string& code,
                             const std::string& message) {
  return MakeResponse(status, R"({"errors":[{"code":")" + code + R"(","message":")" + message +
                                  R"(","detail":null}]})");
}

class TestServer {
 public:
  using Handler = std::function<TestResponse(const TestRequest&)>;

  explicit TestServer(Handler handler) : handler_(std::move(handler)) {
    tcp::endpoint ep(net::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    Accept();
    thread_ = std::thread([this] { ioc_.run_for(std::chrono::seconds(60)); });
  }

  ~TestServer() {
    ioc_.stop();
    thread_.join();
  }

  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }
  int requests() const { return requests_.load(); }

  // Requests seen so far (method, target, headers, body), in order.
  std::vector<TestRequest> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  class Session : public std::enable_shared_from_this<Session> {
   public:
    Session(tcp::socket socket, TestServer* server)
        : stream_(std::move(socket)), server_(server) {}

    void Read() {
      parser_.emplace();
      parser_->body_limit(256ull << 20);
      stream_.expires_after(std::chrono::seconds(10));
      http::async_read(stream_, buffer_, *parser_,
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->OnRead(ec);
                       });
    }

   private:
    void OnRead(beast::error_code ec) {
      if (ec) return Close();
      TestRequest req = parser_->release();
      ++server_->requests_;
      {
        std::lock_guard<std::mutex> lock(server_->mu_);
        server_->seen_.push_back(req);
      }
      res_ = server_->handler_(req);
      if (res_.find("X-Test-Hang") != res_.end()) {
        // Hold the connection without answering; the timer keeps the session alive.
        hang_timer_ = std::make_unique<net::steady_timer>(stream_.get_executor());
        hang_timer_->expires_after(std::chrono::seconds(20));
        hang_timer_->async_wait([self = shared_from_this()](beast::error_code) { self->Close(); });
        return;
      }
      bool keep = req.keep_alive();
      auto trunc = res_.find("X-Test-Truncate");
      if (trunc != res_.end()) {
        uint64_t announced = std::stoull(std::string(trunc->value()));
        res_.erase("X-Test-Truncate");
        res_.content_length(announced);
        keep = false;
      }
      res_.keep_alive(keep && res_.keep_alive());
      keep = res_.keep_alive();
      http::async_write(stream_, res_,
                        [self = shared_from_this(), keep](beast::error_code wec, size_t) {
                          if (wec || !keep) return self->Close();
                          self->Read();
                        });
    }

    void Close() {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream_.close();
    }

    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    TestResponse res_;
    std::unique_ptr<net::steady_timer> hang_timer_;
    TestServer* server_;
  };

  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;
      ++connections_;
      std::make_shared<Session>(std::move(socket), this)->Read();
      Accept();
    });
  }

  Handler handler_;
  net::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  std::vector<TestRequest> seen_;
};

}  // namespace blz::testing

#endif  // BLZ_TESTS_CLIENT_TEST_SERVER_H_
