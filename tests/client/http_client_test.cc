#include "client/http_client.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/client/test_server.h"
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

TEST(HttpClientTest, StreamsResponseToSinkWithProgress) {
  std::string data(600 * 1024 + 7, 'z');
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

}  // namespace
}  // namespace blz::client
