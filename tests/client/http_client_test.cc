#include "client/http_client.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/client/test_server.h"
#include "tests/connect_proxy.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::MakeResponse;
using blz::testing::TempDir;
using blz::testing::TestRequest;
using blz::testing::TestResponse;
using blz::testing::TestServer;
namespace http = boost::beast::http;

TEST(HttpClientTest, GetToMemoryAndReuseConnection) {
  TestServer server([](const TestRequest& req) {
    return MakeResponse(http::status::ok, "hello " + std::string(req.target()), "text/plain");
  });
  HttpClient client("127.0.0.1", server.port());
  for (int i = 0; i < 3; ++i) {
    HttpRequest req;
    req.target = "/x" + std::to_string(i);
    Result<HttpResponse> r = client.Send(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello /x" + std::to_string(i));
    EXPECT_EQ(r->Header("content-type"), "text/plain");
  }
  EXPECT_EQ(client.connections_opened(), 1);
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(server.requests(), 3);
}

TEST(HttpClientTest, ReconnectsWhenServerClosesEachConnection) {
  TestServer server([](const TestRequest&) {
    TestResponse res = MakeResponse(http::status::ok, "bye", "text/plain");
    res.keep_alive(false);
    return res;
  });
  HttpClient client("127.0.0.1", server.port());
  for (int i = 0; i < 3; ++i) {
    HttpRequest req;
    req.target = "/";
    Result<HttpResponse> r = client.Send(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, "bye");
  }
  EXPECT_EQ(server.connections(), 3);
}

TEST(HttpClientTest, StreamsFileBodyWithProgress) {
  TempDir tmp;
  std::string data(700 * 1024 + 13, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 131 % 251);
  blz::testing::WriteFileBytes(tmp / "body.bin", data);

  TestServer server([](const TestRequest& req) {
    return MakeResponse(http::status::created, std::to_string(req.body().size()), "text/plain");
  });
  HttpClient client("127.0.0.1", server.port());
  HttpRequest req;
  req.method = "PUT";
  req.target = "/upload";
  req.body_file = tmp / "body.bin";
  uint64_t last_done = 0, last_total = 0;
  int calls = 0;
  TransferOptions t;
  t.upload_progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
    ++calls;
  };
  Result<HttpResponse> r = client.Send(req, t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, std::to_string(data.size()));
  EXPECT_EQ(last_done, data.size());
  EXPECT_EQ(last_total, data.size());
  EXPECT_GT(calls, 1);
  ASSERT_EQ(server.seen().size(), 1u);
  EXPECT_EQ(server.seen()[0].body(), data);
}

// A body of known length is read straight from the socket in reads of up to 1 MiB
// (ReadResponse): a body over that, byte for byte, and the connection kept for the next request.
TEST(HttpClientTest, StreamsResponseToSinkWithProgress) {
  std::string data(3 * 1024 * 1024 + 7, 'z');
  for (size_t i = 0; i < data.size(); i += 4093) data[i] = char('a' + i % 26);
  TestServer server(
      [&](const TestRequest&) { return MakeResponse(http::status::ok, data, "application/x"); });
  HttpClient client("127.0.0.1", server.port());
  std::string got;
  uint64_t last_done = 0;
  TransferOptions t;
  t.sink = [&](ByteSpan chunk) {
    got.append(AsChars(chunk));
    return Status::Ok();
  };
  t.download_progress = [&](uint64_t done, uint64_t total) {
    last_done = done;
    EXPECT_EQ(total, data.size());
  };
  HttpRequest req;
  req.target = "/blob";
  Result<HttpResponse> r = client.Send(req, t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->body.empty());
  EXPECT_EQ(r->body_bytes, data.size());
  EXPECT_EQ(got, data);
  EXPECT_EQ(last_done, data.size());
  got.clear();
  r = client.Send(req, t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got, data);
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpClientTest, ErrorBodiesGoToMemoryEvenWithSink) {
  TestServer server(
      [](const TestRequest&) { return MakeResponse(http::status::not_found, "{\"x\":1}"); });
  HttpClient client("127.0.0.1", server.port());
  bool sink_called = false;
  TransferOptions t;
  t.sink = [&](ByteSpan) {
    sink_called = true;
    return Status::Ok();
  };
  HttpRequest req;
  req.target = "/missing";
  Result<HttpResponse> r = client.Send(req, t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "{\"x\":1}");
  EXPECT_FALSE(sink_called);
}

TEST(HttpClientTest, HeadDoesNotWaitForBody) {
  TestServer server([](const TestRequest&) {
    TestResponse res{http::status::ok, 11};
    res.content_length(12345);  // announced, not sent: HEAD has no body
    return res;
  });
  HttpClient client("127.0.0.1", server.port());
  HttpRequest req;
  req.method = "HEAD";
  req.target = "/v2/a/blobs/x";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  uint64_t len = 0;
  ASSERT_TRUE(r->ContentLength(&len));
  EXPECT_EQ(len, 12345u);
  // The connection is still usable afterwards.
  Result<HttpResponse> again = client.Send(req);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpClientTest, MemoryBodyCapGivesTooLarge) {
  TestServer server(
      [](const TestRequest&) { return MakeResponse(http::status::ok, std::string(5000, 'a')); });
  HttpClient client("127.0.0.1", server.port());
  TransferOptions t;
  t.max_memory_body = 1000;
  HttpRequest req;
  req.target = "/big";
  Result<HttpResponse> r = client.Send(req, t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTooLarge) << r.status().ToString();
}

TEST(HttpClientTest, TruncatedBodyIsAnIOError) {
  TestServer server([](const TestRequest&) {
    TestResponse res = MakeResponse(http::status::ok, std::string(100, 'a'));
    res.set("X-Test-Truncate", "1000");
    return res;
  });
  HttpClient client("127.0.0.1", server.port());
  HttpRequest req;
  req.target = "/short";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIOError) << r.status().ToString();
  // Into a sink, the bytes that came before the cut are delivered (a resumed download goes on
  // after them).
  std::string got;
  TransferOptions t;
  t.sink = [&](ByteSpan chunk) {
    got.append(AsChars(chunk));
    return Status::Ok();
  };
  r = client.Send(req, t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIOError) << r.status().ToString();
  EXPECT_NE(r.status().message().find("after 100 bytes"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(got, std::string(100, 'a'));
}

TEST(HttpClientTest, StalledServerTimesOut) {
  TestServer server([](const TestRequest&) {
    TestResponse res = MakeResponse(http::status::ok);
    res.set("X-Test-Hang", "1");
    return res;
  });
  HttpClientOptions options;
  options.io_timeout = std::chrono::milliseconds(200);
  HttpClient client("127.0.0.1", server.port(), options);
  HttpRequest req;
  req.target = "/slow";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().ToString();
}

TEST(HttpClientTest, ConnectionRefusedIsUnavailable) {
  uint16_t port = 0;
  {
    TestServer server([](const TestRequest&) { return MakeResponse(http::status::ok); });
    port = server.port();
  }
  HttpClient client("127.0.0.1", port);
  HttpRequest req;
  req.target = "/";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
}

TEST(HttpClientTest, RejectsHeaderInjectionAndBadTargets) {
  HttpClient client("127.0.0.1", 1);  // never contacted
  HttpRequest req;
  req.target = "/ok";
  req.headers.push_back({"Authorization", "Bearer x\r\nEvil: 1"});
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);

  HttpRequest bad_target;
  bad_target.target = "no-slash";
  EXPECT_EQ(client.Send(bad_target).status().code(), Code::kInvalidArgument);

  HttpRequest bad_method;
  bad_method.method = "FETCH";
  bad_method.target = "/";
  EXPECT_EQ(client.Send(bad_method).status().code(), Code::kInvalidArgument);
}

TEST(HttpClientTest, MissingBodyFileIsIOError) {
  TestServer server([](const TestRequest&) { return MakeResponse(http::status::ok); });
  HttpClient client("127.0.0.1", server.port());
  HttpRequest req;
  req.method = "PUT";
  req.target = "/u";
  req.body_file = "/nonexistent/blz/file";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIOError);
}

TEST(HttpClientTest, NoProxyMatching) {
  EXPECT_TRUE(NoProxyMatches("*", "anything.example.com", 443));
  EXPECT_TRUE(NoProxyMatches("example.com", "example.com", 443));
  EXPECT_TRUE(NoProxyMatches("example.com", "a.b.example.com", 443));
  EXPECT_TRUE(NoProxyMatches(".example.com", "a.example.com", 443));
  EXPECT_TRUE(NoProxyMatches(" foo.org , Example.COM ", "x.example.com", 443));
  EXPECT_FALSE(NoProxyMatches("example.com", "badexample.com", 443));
  EXPECT_FALSE(NoProxyMatches("a.example.com", "example.com", 443));
  EXPECT_TRUE(NoProxyMatches("127.0.0.1", "127.0.0.1", 5000));
  EXPECT_FALSE(NoProxyMatches("127.0.0.1", "127.0.0.2", 5000));
  EXPECT_TRUE(NoProxyMatches("localhost:5000", "localhost", 5000));
  EXPECT_FALSE(NoProxyMatches("localhost:5000", "localhost", 5001));
  EXPECT_TRUE(NoProxyMatches("::1", "::1", 5000));
  EXPECT_TRUE(NoProxyMatches("[::1]:5000", "::1", 5000));
  EXPECT_FALSE(NoProxyMatches("[::1]:5000", "::1", 80));
  EXPECT_FALSE(NoProxyMatches("", "example.com", 443));
  EXPECT_FALSE(NoProxyMatches(",,", "example.com", 443));
}

TEST(HttpClientTest, ProxyForReadsOptionsBeforeEnvironment) {
  HttpClientOptions o;
  o.proxy = "http://proxy.lan:3128";
  o.no_proxy = "internal.lan";
  EXPECT_EQ(ProxyFor(o, "models.example.com", 443), "http://proxy.lan:3128");
  EXPECT_EQ(ProxyFor(o, "r.internal.lan", 443), "");
  o.proxy = "";
  EXPECT_EQ(ProxyFor(o, "models.example.com", 443), "");
}

TEST(HttpClientTest, ConnectsThroughConnectProxy) {
  TestServer server([](const TestRequest& req) {
    return MakeResponse(http::status::ok, "via " + std::string(req.target()), "text/plain");
  });
  blz::testing::ConnectProxy proxy;
  ASSERT_NE(proxy.port(), 0);
  HttpClientOptions o;
  o.proxy = proxy.url();
  o.no_proxy = "";
  HttpClient client("127.0.0.1", server.port(), o);
  EXPECT_EQ(client.proxy(), proxy.url());
  for (int i = 0; i < 2; ++i) {  // the tunnel is kept alive between requests
    HttpRequest req;
    req.target = "/p" + std::to_string(i);
    Result<HttpResponse> r = client.Send(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, "via /p" + std::to_string(i));
  }
  EXPECT_EQ(client.connections_opened(), 1);
  ASSERT_EQ(proxy.targets().size(), 1u);
  EXPECT_EQ(proxy.targets()[0], "127.0.0.1:" + std::to_string(server.port()));

  // NO_PROXY bypasses it.
  o.no_proxy = "127.0.0.1";
  HttpClient direct("127.0.0.1", server.port(), o);
  EXPECT_EQ(direct.proxy(), "");
  HttpRequest req;
  req.target = "/direct";
  Result<HttpResponse> r = direct.Send(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(proxy.targets().size(), 1u);
}

TEST(HttpClientTest, ProxyRefusalIsUnavailableAndNamesTheProxy) {
  blz::testing::ConnectProxy proxy;  // refuses targets that are not loopback
  HttpClientOptions o;
  o.proxy = proxy.url();
  o.no_proxy = "";
  o.connect_timeout = std::chrono::milliseconds(5000);
  HttpClient client("192.0.2.1", 443, o);  // TEST-NET-1: never reached, the proxy refuses it
  HttpRequest req;
  req.target = "/";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("refused CONNECT"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("403"), std::string::npos) << r.status().message();
}

TEST(HttpClientTest, BadProxyUrlAndCaFileAreReported) {
  HttpClientOptions o;
  o.proxy = "socks5://127.0.0.1:1080";
  HttpClient client("127.0.0.1", 1, o);
  HttpRequest req;
  req.target = "/";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("only http:// proxies"), std::string::npos);

  TempDir dir;
  blz::testing::WriteFileBytes(dir / "ca.pem", "not a certificate\n");
  HttpClientOptions t;
  t.proxy = "";
  t.tls = true;
  t.ca_file = dir / "ca.pem";
  HttpClient tls("127.0.0.1", 1, t);
  EXPECT_STREQ(tls.scheme(), "https");
  Result<HttpResponse> r2 = tls.Send(req);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r2.status().message().find(dir / "ca.pem"), std::string::npos)
      << r2.status().message();
}

TEST(HttpClientTest, TlsToPlainServerFailsClearly) {
  TestServer server([](const TestRequest&) { return MakeResponse(http::status::ok, "x"); });
  HttpClientOptions o;
  o.proxy = "";
  o.tls = true;
  o.connect_timeout = std::chrono::milliseconds(5000);
  HttpClient client("127.0.0.1", server.port(), o);
  HttpRequest req;
  req.target = "/";
  Result<HttpResponse> r = client.Send(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("TLS handshake with 127.0.0.1:"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace blz::client
