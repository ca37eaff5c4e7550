// S3Client's retry and error mapping against an in-process fake server: fault injection
// (5xx, SlowDown, refused connections, a server that never answers) that a real S3 server
// cannot produce on demand. Everything else is tested against radosgw (s3_client_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/ssl.hpp>
#include <cstdlib>
#include <filesystem>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <thread>

#include "store/s3/s3_client.h"

namespace blz::store::s3 {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct Scripted {
  int status;
  std::string body;
  // > body.size(): announce this Content-Length, send the body and close (a connection lost
  // mid-body, which a real server does not do on demand).
  uint64_t announce = 0;
};

// Answers the i-th connection with script[i] (one request per connection); with `silent`, it
// accepts and reads but never answers.
class FakeS3 {
 public:
  explicit FakeS3(std::vector<Scripted> script, bool silent = false)
      : script_(std::move(script)), silent_(silent), acceptor_(ioc_, {asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeS3() {
    stop_ = true;
    beast::error_code ec;
    // Wake the acceptor with a connection of our own.
    tcp::socket s(ioc_);
    s.connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }
  std::vector<std::string> targets() {
    std::lock_guard<std::mutex> l(mu_);
    return targets_;
  }
  std::vector<std::string> authorizations() {
    std::lock_guard<std::mutex> l(mu_);
    return authorizations_;
  }

 private:
  void Serve() {
    std::vector<tcp::socket> held;  // silent mode keeps connections open
    for (size_t i = 0;; ++i) {
      tcp::socket sock(ioc_);
      beast::error_code ec;
      acceptor_.accept(sock, ec);
      if (ec || stop_) return;
      beast::flat_buffer buf;
      http::request<http::string_body> req;
      http::read(sock, buf, req, ec);
      if (ec) continue;
      ++requests_;
      {
        std::lock_guard<std::mutex> l(mu_);
        targets_.emplace_back(req.target());
        authorizations_.emplace_back(req[http::field::authorization]);
      }
      if (silent_) {
        held.push_back(std::move(sock));
        continue;
      }
      const Scripted& s = script_[std::min(i, script_.size() - 1)];
      if (s.announce > s.body.size()) {
        const std::string raw = "HTTP/1.1 " + std::to_string(s.status) + " OK\r\nContent-Length: " +
                                std::to_string(s.announce) + "\r\n\r\n" + s.body;
        asio::write(sock, asio::buffer(raw), ec);
        sock.shutdown(tcp::socket::shutdown_both, ec);
        continue;
      }
      http::response<http::string_body> res{static_cast<http::status>(s.status), 11};
      res.body() = s.body;
      res.prepare_payload();
      http::write(sock, res, ec);
      sock.shutdown(tcp::socket::shutdown_both, ec);
    }
  }

  std::vector<Scripted> script_;
  bool silent_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::vector<std::string> targets_;
  std::vector<std::string> authorizations_;
  std::thread thread_;
};

std::string ErrorXml(const std::string& code) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code +
         "</Code><Message>injected</Message></Error>";
}

S3Config ConfigFor(const std::string& endpoint, int* retries) {
  S3Config c;
  c.bucket = "bucket1";
  c.endpoint = endpoint;
  c.region = "us-east-1";
  c.path_style = true;
  c.credentials = {"AKIDTEST", "secret-never-shown", ""};
  c.timeout = std::chrono::seconds(5);
  c.max_attempts = 4;
  c.backoff = std::chrono::milliseconds(1);
  c.on_retry = [retries](int, const Status&) { ++*retries; };
  return c;
}

TEST(S3ClientRetryTest, ServerErrorsAndSlowDownAreRetriedThenSucceed) {
  FakeS3 fake({{503, ErrorXml("SlowDown")}, {500, ErrorXml("InternalError")}, {200, "hello"}});
  int retries = 0;
  S3Client s3(ConfigFor(fake.endpoint(), &retries));
  auto got = s3.GetObject("dir/key");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "hello");
  EXPECT_EQ(retries, 2);
  EXPECT_EQ(fake.requests(), 3);
  for (const auto& t : fake.targets()) EXPECT_EQ(t, "/bucket1/dir/key");
  for (const auto& a : fake.authorizations()) {
    EXPECT_EQ(a.rfind("AWS4-HMAC-SHA256 Credential=AKIDTEST/", 0), 0u) << a;
  }
}

TEST(S3ClientRetryTest, GivesUpAfterMaxAttemptsNamingStatusAndCode) {
  FakeS3 fake({{503, ErrorXml("SlowDown")}});
  int retries = 0;
  S3Config config = ConfigFor(fake.endpoint(), &retries);
  config.max_attempts = 3;
  S3Client s3(config);
  Status st = s3.PutObject("k", "v");
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("503 SlowDown"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("bucket1/k"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("secret-never-shown"), std::string::npos);
  EXPECT_EQ(fake.requests(), 3);
  EXPECT_EQ(retries, 2);
}

TEST(S3ClientRetryTest, ClientErrorsAreNeverRetried) {
  struct Case {
    int status;
    const char* code;
    Code want;
  };
  for (const Case& c : {Case{404, "NoSuchKey", Code::kNotFound},
                        Case{403, "AccessDenied", Code::kUnauthorized},
                        Case{400, "EntityTooSmall", Code::kInvalidArgument},
                        Case{412, "PreconditionFailed", Code::kAlreadyExists}}) {
    FakeS3 fake({{c.status, ErrorXml(c.code)}});
    int retries = 0;
    S3Client s3(ConfigFor(fake.endpoint(), &retries));
    Status st = s3.DeleteObject("k");
    EXPECT_EQ(st.code(), c.want) << st.ToString();
    EXPECT_NE(st.message().find(c.code), std::string::npos) << st.message();
    EXPECT_EQ(fake.requests(), 1) << c.status;
    EXPECT_EQ(retries, 0) << c.status;
  }
}

// OpenObject (a streamed GET): retried like any request until the body starts...
TEST(S3ClientRetryTest, StreamedGetIsRetriedBeforeTheFirstByte) {
  FakeS3 fake({{503, ErrorXml("SlowDown")}, {206, "0123456789"}});
  int retries = 0;
  S3Client s3(ConfigFor(fake.endpoint(), &retries));
  auto body = s3.OpenObject("dir/key", ByteRange{100, 109});
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_EQ((*body)->size(), 10u);
  std::string got;
  char buf[4];
  while (true) {
    auto n = (*body)->Read(buf, sizeof(buf));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (*n == 0) break;
    got.append(buf, *n);
  }
  EXPECT_EQ(got, "0123456789");
  EXPECT_EQ(retries, 1);
  EXPECT_EQ(fake.requests(), 2);
}

// ...and a connection lost after it is an error of the read, never retried (the bytes before
// were handed out) nor a short success.
TEST(S3ClientRetryTest, StreamedGetLostMidBodyFailsTheReadWithoutRetrying) {
  FakeS3 fake({{200, std::string(3000, 'x'), /*announce=*/10000}});
  int retries = 0;
  S3Client s3(ConfigFor(fake.endpoint(), &retries));
  auto body = s3.OpenObject("dir/key");
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_EQ((*body)->size(), 10000u);
  uint64_t read = 0;
  Status failed;
  char buf[1024];
  while (failed.ok()) {
    auto n = (*body)->Read(buf, sizeof(buf));
    if (!n.ok()) {
      failed = n.status();
      break;
    }
    ASSERT_NE(*n, 0u) << "the body ended early without an error";
    read += *n;
  }
  EXPECT_EQ(failed.code(), Code::kUnavailable) << failed.ToString();
  EXPECT_NE(failed.message().find("bucket1/dir/key"), std::string::npos) << failed.message();
  EXPECT_EQ(read, 3000u);
  EXPECT_EQ(fake.requests(), 1);
  EXPECT_EQ(retries, 0);
}

TEST(S3ClientRetryTest, RefusedConnectionsAreRetriedThenUnavailable) {
  uint16_t port;
  {
    asio::io_context ioc;
    tcp::acceptor a(ioc, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }  // closed: connections to it are refused
  int retries = 0;
  S3Config config = ConfigFor("http://127.0.0.1:" + std::to_string(port), &retries);
  config.max_attempts = 3;
  S3Client s3(config);
  auto head = s3.HeadObject("k");
  EXPECT_EQ(head.status().code(), Code::kUnavailable) << head.status().ToString();
  EXPECT_EQ(retries, 2);
}

TEST(S3ClientRetryTest, ASilentServerTimesOut) {
  FakeS3 fake({}, /*silent=*/true);
  int retries = 0;
  S3Config config = ConfigFor(fake.endpoint(), &retries);
  config.timeout = std::chrono::milliseconds(200);
  config.max_attempts = 1;
  S3Client s3(config);
  auto got = s3.GetObject("k");
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
  EXPECT_NE(got.status().message().find("timed out"), std::string::npos) << got.status().message();
}

TEST(S3ClientRetryTest, HttpsToAPlainHttpServerFailsTheHandshakeAndIsRetried) {
  FakeS3 fake({{200, "plain"}});
  int retries = 0;
  S3Config config = ConfigFor("https://127.0.0.1:" + fake.endpoint().substr(fake.endpoint().rfind(':') + 1), &retries);
  config.max_attempts = 2;
  S3Client s3(config);
  auto got = s3.GetObject("k");
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
  EXPECT_NE(got.status().message().find("https://127.0.0.1"), std::string::npos) << got.status().message();
  EXPECT_EQ(retries, 1);
}

TEST(S3ClientRetryTest, AnUntrustedCertificateIsNotRetried) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("blz_s3_tls_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string key = (dir / "key.pem").string(), cert = (dir / "cert.pem").string();
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                          "-keyout '" + key + "' -out '" + cert + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a self-signed certificate";
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = acceptor.local_endpoint().port();
  std::atomic<int> handshakes{0};
  std::thread server([&] {
    asio::ssl::context ctx(asio::ssl::context::tls_server);
    ctx.use_certificate_chain_file(cert);
    ctx.use_private_key_file(key, asio::ssl::context::pem);
    // Serve until the client's attempts are over (the test connects once more to stop it).
    for (int i = 0; i < 2; ++i) {
      tcp::socket sock(ioc);
      beast::error_code ec;
      acceptor.accept(sock, ec);
      if (ec) return;
      asio::ssl::stream<tcp::socket> tls(std::move(sock), ctx);
      tls.handshake(asio::ssl::stream_base::server, ec);
      ++handshakes;
    }
  });
  int retries = 0;
  S3Config config = ConfigFor("https://127.0.0.1:" + std::to_string(port), &retries);
  S3Client s3(config);
  auto got = s3.GetObject("k");
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
  EXPECT_NE(got.status().message().find("certificate verify failed"), std::string::npos)
      << got.status().message();
  EXPECT_EQ(retries, 0);
  {
    tcp::socket wake(ioc);
    beast::error_code ec;
    wake.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
    wake.close(ec);  // the server's handshake on it ends at EOF
    server.join();
  }
  EXPECT_EQ(handshakes, 2);  // the client's one attempt + the wake-up connection
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(S3ClientRetryTest, PresignUrlAddressing) {
  int retries = 0;
  S3Config config = ConfigFor("https://s3.eu-west-1.amazonaws.com", &retries);
  config.region = "eu-west-1";
  config.path_style = false;
  auto vhost = S3Client(config).PresignUrl("GET", "a b/c", 1200, 1369353600);
  ASSERT_TRUE(vhost.ok()) << vhost.status().ToString();
  EXPECT_EQ(vhost->rfind("https://bucket1.s3.eu-west-1.amazonaws.com/a%20b/c?X-Amz-Algorithm=", 0), 0u)
      << *vhost;
  EXPECT_NE(vhost->find("X-Amz-Expires=1200&"), std::string::npos);
  config.path_style = true;
  config.endpoint = "http://127.0.0.1:7480";
  auto path = S3Client(config).PresignUrl("GET", "k", 60, 1369353600);
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->rfind("http://127.0.0.1:7480/bucket1/k?", 0), 0u) << *path;
  EXPECT_EQ(S3Client(config).PresignUrl("GET", "k", 604801, 0).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace blz::store::s3
