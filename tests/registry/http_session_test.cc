// The Beast session (registry/http_session.cc) on a real server on 127.0.0.1 with raw request
// bytes: request framing that could smuggle a second request (RFC 9112 §6.1, §6.3) is refused
// and the connection closed; a valid chunked body still works; every response carries
// X-Content-Type-Options: nosniff (and, over plain HTTP, no Strict-Transport-Security). The TLS
// side (suites, HSTS) is in server_tls_test.cc.
#include "registry/http_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/digest.h"
#include "registry/net.h"
#include "registry/registry.h"
#include "registry/server.h"
#include "tests/registry/live_registry.h"

namespace blz::registry {
namespace {

constexpr std::chrono::seconds kDeadline{10};

// What came back on one connection after writing `bytes`: everything the server sent until it
// closed the connection (or the deadline passed: then `closed` is false).
struct Exchange {
  std::string received;
  bool closed = false;

  // The number of responses (status lines) received.
  size_t Responses() const {
    size_t n = 0;
    for (size_t at = received.find("HTTP/1.1 "); at != std::string::npos;
         at = received.find("HTTP/1.1 ", at + 1)) {
      ++n;
    }
    return n;
  }
  // The head of the first response, lower-cased header names kept as sent.
  std::string FirstHead() const { return received.substr(0, received.find("\r\n\r\n") + 2); }
};

Exchange Raw(uint16_t port, const std::string& bytes) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  Exchange out;
  beast::error_code result;
  stream.expires_after(kDeadline);
  stream.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                       [&](beast::error_code ec) {
                         result = ec;
                         if (ec) return;
                         net::async_write(stream, net::buffer(bytes),
                                          [&](beast::error_code wec, size_t) { result = wec; });
                       });
  ioc.run();
  EXPECT_FALSE(result) << result.message();
  // Read until the server closes (EOF) or the deadline.
  char buf[4096];
  for (int i = 0; i < 1000; ++i) {
    ioc.restart();
    stream.expires_after(kDeadline);
    size_t got = 0;
    stream.async_read_some(net::buffer(buf), [&](beast::error_code ec, size_t n) {
      result = ec;
      got = n;
    });
    ioc.run();
    out.received.append(buf, got);
    if (result) {
      out.closed = result == net::error::eof || result == net::error::connection_reset;
      break;
    }
  }
  return out;
}

class HttpSessionTest : public testing::LiveRegistryTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Start()); }
};

// A request whose body is a second, complete request: a server that misreads the framing
// answers twice; a correct one refuses the first and closes without reading on.
TEST_F(HttpSessionTest, AmbiguousFramingIsRefusedAndTheConnectionClosed) {
  const std::string smuggled = "GET /v2/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const std::string chunked_smuggled = std::to_string(smuggled.size()) + "\r\n" + smuggled +
                                       "\r\n0\r\n\r\n";
  struct Case {
    const char* what;
    std::string head;  // the framing fields (and the request line's version)
    std::string body;
    const char* status;
    const char* message;
  };
  const std::string len = "Content-Length: " + std::to_string(smuggled.size()) + "\r\n";
  const Case cases[] = {
      {"unknown coding", "Transfer-Encoding: xchunked\r\n", smuggled, "501",
       "transfer coding 'xchunked' is not implemented"},
      {"identity", "Transfer-Encoding: identity\r\n", smuggled, "501",
       "transfer coding 'identity'"},
      {"chunked not final", "Transfer-Encoding: chunked, identity\r\n", smuggled, "400",
       "chunked must be the final coding"},
      {"gzip before chunked", "Transfer-Encoding: gzip, chunked\r\n", chunked_smuggled, "501",
       "transfer coding 'gzip'"},
      {"unknown coding and Content-Length", "Transfer-Encoding: xchunked\r\n" + len, smuggled,
       "501", "transfer coding 'xchunked'"},
      // Beast refuses these itself (as a malformed request).
      {"Content-Length then chunked", len + "Transfer-Encoding: chunked\r\n", chunked_smuggled,
       "400", "malformed request"},
      {"chunked then Content-Length", "Transfer-Encoding: chunked\r\n" + len, chunked_smuggled,
       "400", "malformed request"},
      {"two different Content-Lengths", len + "Content-Length: 0\r\n", smuggled, "400",
       "malformed request"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Exchange x = Raw(server_->port(), "POST /v2/m/blobs/uploads/ HTTP/1.1\r\nHost: x\r\n" +
                                          c.head + "\r\n" + c.body);
    EXPECT_TRUE(x.closed) << x.received;
    EXPECT_EQ(x.Responses(), 1u) << x.received;
    EXPECT_EQ(x.received.rfind(std::string("HTTP/1.1 ") + c.status + " ", 0), 0u) << x.received;
    EXPECT_NE(x.received.find(c.message), std::string::npos) << x.received;
  }
  // Transfer-Encoding on HTTP/1.0.
  Exchange old = Raw(server_->port(), "POST /v2/m/blobs/uploads/ HTTP/1.0\r\nHost: x\r\n"
                                      "Transfer-Encoding: chunked\r\n\r\n" + chunked_smuggled);
  EXPECT_TRUE(old.closed);
  EXPECT_EQ(old.Responses(), 1u) << old.received;
  EXPECT_EQ(old.received.rfind("HTTP/1.1 400 ", 0), 0u) << old.received;
  EXPECT_NE(old.received.find("in an HTTP/1.0 request"), std::string::npos) << old.received;
}

TEST_F(HttpSessionTest, ChunkedBodiesStillWorkOnAKeptAliveConnection) {
  const std::string blob = "hello, chunked";
  const std::string digest = MakeDigest(Sha256Hex(blob));
  Exchange x = Raw(server_->port(),
                   "POST /v2/m/blobs/uploads/?digest=" + digest + " HTTP/1.1\r\nHost: x\r\n"
                   "Authorization: Bearer " + token_ + "\r\nTransfer-Encoding: Chunked\r\n\r\n"
                   "5\r\nhello\r\n9\r\n, chunked\r\n0\r\n\r\n"
                   "GET /v2/m/blobs/" + digest + " HTTP/1.1\r\nHost: x\r\n"
                   "Connection: close\r\n\r\n");
  EXPECT_TRUE(x.closed);
  ASSERT_EQ(x.Responses(), 2u) << x.received;
  EXPECT_EQ(x.received.rfind("HTTP/1.1 201 ", 0), 0u) << x.received;
  EXPECT_NE(x.received.find("\r\n\r\nHTTP/1.1 200 "), std::string::npos) << x.received;
  EXPECT_EQ(x.received.substr(x.received.size() - blob.size()), blob);
}

// Every response, from the registry's handlers, /metrics, the session's own refusals, carries
// nosniff once; a plain-HTTP server sends no HSTS.
TEST_F(HttpSessionTest, EveryResponseSaysNosniff) {
  const std::string auth = "Authorization: Bearer " + token_ + "\r\n";
  for (const std::string& request :
       {std::string("GET /v2/ HTTP/1.1\r\nHost: x\r\n"),                 // 401
        "GET /v2/ HTTP/1.1\r\nHost: x\r\n" + auth,                       // 200
        "GET /v2/m/tags/list HTTP/1.1\r\nHost: x\r\n" + auth,            // 404
        "HEAD /v2/m/blobs/sha256:" + std::string(64, 'a') + " HTTP/1.1\r\nHost: x\r\n" + auth,
        std::string("GET /metrics HTTP/1.1\r\nHost: x\r\n"),             // 200
        std::string("DELETE /metrics HTTP/1.1\r\nHost: x\r\n"),          // 405
        std::string("GET /v2/ HTTP/1.1\r\nHost: x\r\nBad Header\r\n"),  // malformed: 400
        std::string("GET /v2/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n")}) {
    SCOPED_TRACE(request);
    Exchange x = Raw(server_->port(), request + "Connection: close\r\n\r\n");
    ASSERT_EQ(x.Responses(), 1u) << x.received;
    const std::string head = x.FirstHead();
    const size_t at = head.find("\r\nX-Content-Type-Options: nosniff\r\n");
    EXPECT_NE(at, std::string::npos) << head;
    EXPECT_EQ(head.find("X-Content-Type-Options", at + 3), std::string::npos) << head;
    EXPECT_EQ(head.find("Strict-Transport-Security"), std::string::npos) << head;
  }
}

}  // namespace
}  // namespace blz::registry
