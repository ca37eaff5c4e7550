// Runs the real server (Beast sessions, listener, handler pool) on 127.0.0.1 with an ephemeral
// port in-process, and talks to it with a minimal Beast client. Every client operation has a
// 10 s deadline, loops are bounded, and the server is stopped at the end of each test.
#include "registry/server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "registry/forwarded.h"
#include "registry/net.h"
#include "registry/registry.h"
#include "tests/registry/handler_harness.h"
#include "tests/registry/live_registry.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

using Req = http::request<http::string_body>;
using Res = http::response<http::string_body>;
constexpr std::chrono::seconds kDeadline{10};

// A blocking HTTP/1.1 client over one connection, built from Beast's async operations so that
// every step has a deadline.
class Client {
 public:
  explicit Client(uint16_t port) : stream_(ioc_) {
    stream_.expires_after(kDeadline);
    stream_.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                          [this](beast::error_code ec) { ec_ = ec; });
    Run();
  }

  bool ok() const { return !ec_; }
  const beast::error_code& error() const { return ec_; }

  // Sends `req` (Content-Length prepared) and reads one final response (skipping 1xx).
  Res Send(Req req) {
    req.version(11);
    req.set(http::field::host, "127.0.0.1");
    req.prepare_payload();
    const bool head = req.method() == http::verb::head;
    stream_.expires_after(kDeadline);
    http::async_write(stream_, req, [this](beast::error_code ec, size_t) { ec_ = ec; });
    Run();
    return ReadFinal(head);
  }

  // Sends only the head of `req` (announcing `content_length` body bytes that never come) and
  // reads the response: for requests the server refuses before reading the body.
  Res SendHeadOnly(Req req, uint64_t content_length) {
    WriteHead(std::move(req), content_length);
    return ReadFinal(false);
  }

  // Reads and returns the next response (e.g. a 100 Continue).
  Res ReadOne(bool head = false) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(64ull << 20);
    if (head) parser.skip(true);
    stream_.expires_after(kDeadline);
    http::async_read(stream_, buffer_, parser,
                     [this](beast::error_code ec, size_t) { ec_ = ec; });
    Run();
    return parser.release();
  }

  // Writes only the head of `req`, announcing `content_length` body bytes (sent later with
  // WriteRaw).
  void WriteHead(Req req, uint64_t content_length) {
    req.version(11);
    req.set(http::field::host, "127.0.0.1");
    req.content_length(content_length);
    http::request_serializer<http::string_body> sr(req);
    stream_.expires_after(kDeadline);
    http::async_write_header(stream_, sr, [this](beast::error_code ec, size_t) { ec_ = ec; });
    Run();
  }

  // Writes raw bytes; false when the write failed.
  bool WriteRaw(const std::string& bytes) {
    stream_.expires_after(kDeadline);
    beast::error_code result;
    net::async_write(stream_, net::buffer(bytes),
                     [&](beast::error_code ec, size_t) { result = ec; });
    Run();
    return !result;
  }

  // Shrinks the socket's receive buffer (no autotuning): a large response stays mostly unsent.
  void SetReceiveBuffer(int bytes) {
    beast::error_code ec;
    stream_.socket().set_option(net::socket_base::receive_buffer_size(bytes), ec);
  }

  // The client's own address, "127.0.0.1:<port>".
  std::string LocalAddress() {
    beast::error_code ec;
    tcp::endpoint e = stream_.socket().local_endpoint(ec);
    return e.address().to_string() + ":" + std::to_string(e.port());
  }

  // Bytes the server has sent that are waiting to be read.
  size_t Available() {
    beast::error_code ec;
    size_t n = stream_.socket().available(ec);
    return ec ? 0 : n;
  }

  // True when the server closed the connection (a read hits EOF).
  bool ServerClosed() {
    char byte;
    stream_.expires_after(kDeadline);
    beast::error_code result;
    stream_.async_read_some(net::buffer(&byte, 1),
                            [&](beast::error_code ec, size_t) { result = ec; });
    Run();
    return result == net::error::eof || result == net::error::connection_reset;
  }

 private:
  Res ReadFinal(bool head) {
    for (int i = 0; i < 3 && !ec_; ++i) {
      Res res = ReadOne(head);
      if (ec_ || res.result_int() >= 200) return res;
    }
    return Res{};
  }
  void Run() {
    ioc_.restart();
    ioc_.run();
  }

  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  beast::error_code ec_;
};

Req Make(http::verb verb, const std::string& target, const std::string& token = "",
         std::string body = "") {
  Req req{verb, target, 11};
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  req.body() = std::move(body);
  return req;
}

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = char(x >> 24);
  }
  return s;
}

class LiveServerTest : public testing::LiveRegistryTest {
 protected:
  void SetUp() override {
    RegistryOptions options;
    options.create_patch = [](const std::string&, const std::string&, const std::string&,
                              const std::string&, const std::string& out) -> Status {
      return WriteFileAtomic(out, "stand-in patch");
    };
    ASSERT_NO_FATAL_FAILURE(Start(std::move(options), SessionOptions{}));
    EXPECT_EQ(server_->url(), "http://127.0.0.1:" + std::to_string(server_->port()));
  }
};

TEST_F(LiveServerTest, PushAndPullOverOneConnection) {
  Client c(server_->port());
  ASSERT_TRUE(c.ok()) << c.error().message();

  // Anonymous: challenged, with the token endpoint on the address the client used (its Host
  // header, here without a port).
  Res anon = c.Send(Make(http::verb::get, "/v2/"));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(anon.result_int(), 401);
  EXPECT_EQ(std::string(anon[http::field::www_authenticate]),
            "Bearer realm=\"http://127.0.0.1/v2/_blz/token\",service=\"127.0.0.1\"");
  Res ping = c.Send(Make(http::verb::get, "/v2/", token_));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(ping.result_int(), 200);
  EXPECT_EQ(ping.body(), "{}");
  EXPECT_EQ(ping["Docker-Distribution-API-Version"], "registry/2.0");

  // Monolithic upload of 3 MiB (streamed to a file by the session).
  const std::string blob = Bytes(3 << 20);
  const std::string d = MakeDigest(Sha256Hex(blob));
  Res up = c.Send(Make(http::verb::post, "/v2/org/m/blobs/uploads/?digest=" + d, token_, blob));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(up.result_int(), 201) << up.body();
  EXPECT_EQ(up[http::field::location], "/v2/org/m/blobs/" + d);

  Res head = c.Send(Make(http::verb::head, "/v2/org/m/blobs/" + d));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(head.result_int(), 200);
  EXPECT_EQ(head[http::field::content_length], std::to_string(blob.size()));
  EXPECT_EQ(head["Docker-Content-Digest"], d);

  Req ranged = Make(http::verb::get, "/v2/org/m/blobs/" + d);
  ranged.set(http::field::range, "bytes=1000-1999");
  Res part = c.Send(ranged);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(part.result_int(), 206);
  EXPECT_EQ(part[http::field::content_range],
            "bytes 1000-1999/" + std::to_string(blob.size()));
  EXPECT_EQ(part.body(), blob.substr(1000, 1000));

  Res whole = c.Send(Make(http::verb::get, "/v2/org/m/blobs/" + d));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(whole.result_int(), 200);
  EXPECT_TRUE(whole.body() == blob);

  Req bad_range = Make(http::verb::get, "/v2/org/m/blobs/" + d);
  bad_range.set(http::field::range, "bytes=99999999-");
  Res unsat = c.Send(bad_range);
  EXPECT_EQ(unsat.result_int(), 416);
  EXPECT_EQ(unsat[http::field::content_range], "bytes */" + std::to_string(blob.size()));

  // A manifest over a config and an archive (a real one: the registry identifies it).
  const std::string archive = testing::TinyArchive(1);
  const std::string ad = MakeDigest(Sha256Hex(archive));
  ASSERT_EQ(c.Send(Make(http::verb::post, "/v2/org/m/blobs/uploads/?digest=" + ad, token_, archive))
                .result_int(),
            201);
  const std::string config = "{\"archive_size\":" + std::to_string(archive.size()) + "}";
  const std::string cd = MakeDigest(Sha256Hex(config));
  ASSERT_EQ(c.Send(Make(http::verb::post, "/v2/org/m/blobs/uploads/?digest=" + cd, token_, config))
                .result_int(),
            201);
  nlohmann::json m = {
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config",
       {{"mediaType", "application/vnd.blz.model.config.v1+json"},
        {"digest", cd},
        {"size", config.size()}}},
      {"layers", {{{"mediaType", "application/vnd.blz.archive.v1"},
                   {"digest", ad},
                   {"size", archive.size()}}}}};
  Req put = Make(http::verb::put, "/v2/org/m/manifests/v1", token_, m.dump());
  put.set(http::field::content_type, "application/vnd.oci.image.manifest.v1+json");
  Res put_res = c.Send(put);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(put_res.result_int(), 201) << put_res.body();
  Res get_m = c.Send(Make(http::verb::get, "/v2/org/m/manifests/v1"));
  EXPECT_EQ(get_m.result_int(), 200);
  EXPECT_EQ(get_m.body(), m.dump());
  EXPECT_EQ(get_m[http::field::content_type], "application/vnd.oci.image.manifest.v1+json");
  Res tags = c.Send(Make(http::verb::get, "/v2/org/m/tags/list"));
  EXPECT_EQ(tags.body(), "{\"name\":\"org/m\",\"tags\":[\"v1\"]}");
  Res missing = c.Send(Make(http::verb::get, "/v2/org/m/manifests/v9"));
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_NE(missing.body().find("MANIFEST_UNKNOWN"), std::string::npos);
  EXPECT_TRUE(c.ok());
}

TEST_F(LiveServerTest, ChunkedUploadWithExpectContinue) {
  Client c(server_->port());
  ASSERT_TRUE(c.ok());
  Res start = c.Send(Make(http::verb::post, "/v2/m/blobs/uploads/", token_));
  ASSERT_EQ(start.result_int(), 202);
  const std::string loc(start[http::field::location]);
  const std::string blob = Bytes(200000);

  Req p1 = Make(http::verb::patch, loc, token_, blob.substr(0, 100000));
  p1.set(http::field::content_range, "0-99999");
  p1.set(http::field::expect, "100-continue");
  Res r1 = c.Send(p1);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(r1.result_int(), 202);
  EXPECT_EQ(r1["Range"], "0-99999");

  Req p2 = Make(http::verb::patch, loc, token_, blob.substr(100000));
  p2.set(http::field::content_range, "100000-199999");
  EXPECT_EQ(c.Send(p2).result_int(), 202);

  Res status = c.Send(Make(http::verb::get, loc, token_));  // part of a push: needs push
  EXPECT_EQ(status.result_int(), 204);
  EXPECT_EQ(status["Range"], "0-199999");

  const std::string d = MakeDigest(Sha256Hex(blob));
  Res fin = c.Send(Make(http::verb::put, loc + "?digest=" + d, token_));
  EXPECT_EQ(fin.result_int(), 201) << fin.body();
  EXPECT_TRUE(registry_->blobs().Contains(d));
}

TEST_F(LiveServerTest, RefusedBodiesAreNotRead) {
  {
    // No token: refused from the head alone, the 2 GiB body is never read, connection closed.
    Client c(server_->port());
    ASSERT_TRUE(c.ok());
    Res r = c.SendHeadOnly(
        Make(http::verb::post, "/v2/m/blobs/uploads/?digest=" + MakeDigest(std::string(64, 'a'))),
        2ull << 30);
    ASSERT_TRUE(c.ok()) << c.error().message();
    EXPECT_EQ(r.result_int(), 401);
    EXPECT_EQ(std::string(r[http::field::www_authenticate]).rfind("Bearer realm=\"http://", 0), 0u);
    EXPECT_TRUE(c.ServerClosed());
  }
  {
    // A manifest over 4 MiB.
    Client c(server_->port());
    ASSERT_TRUE(c.ok());
    Res r = c.SendHeadOnly(Make(http::verb::put, "/v2/m/manifests/v1", token_), 5ull << 20);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(r.result_int(), 413);
    EXPECT_TRUE(c.ServerClosed());
  }
  {
    // A small refused body is read and discarded; the connection stays usable.
    Client c(server_->port());
    ASSERT_TRUE(c.ok());
    Res r = c.Send(Make(http::verb::post, "/v2/BAD/blobs/uploads/", token_, "tiny"));
    EXPECT_EQ(r.result_int(), 400);
    EXPECT_NE(r.body().find("NAME_INVALID"), std::string::npos);
    EXPECT_EQ(c.Send(Make(http::verb::get, "/v2/", token_)).result_int(), 200);
    EXPECT_TRUE(c.ok());
  }
  // Nothing was stored (asked through the blob store: any driver).
  auto stored = registry_->blobs().ListDigests();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->size(), 0u);
}

TEST_F(LiveServerTest, PatchEndpointOverHttp) {
  Client c(server_->port());
  ASSERT_TRUE(c.ok());
  std::string archives[2] = {testing::TinyArchive(1), testing::TinyArchive(2)};
  for (int i = 0; i < 2; ++i) {
    const std::string config = "{}";
    const std::string cd = MakeDigest(Sha256Hex(config));
    const std::string ad = MakeDigest(Sha256Hex(archives[i]));
    c.Send(Make(http::verb::post, "/v2/m/blobs/uploads/?digest=" + cd, token_, config));
    c.Send(Make(http::verb::post, "/v2/m/blobs/uploads/?digest=" + ad, token_, archives[i]));
    nlohmann::json m = {
        {"schemaVersion", 2},
        {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
        {"config", {{"mediaType", "application/vnd.blz.model.config.v1+json"},
                    {"digest", cd}, {"size", config.size()}}},
        {"layers", {{{"mediaType", "application/vnd.blz.archive.v1"},
                     {"digest", ad}, {"size", archives[i].size()}}}}};
    Res r = c.Send(Make(http::verb::put, "/v2/m/manifests/v" + std::to_string(i), token_, m.dump()));
    ASSERT_EQ(r.result_int(), 201) << r.body();
  }
  const std::string target = "/v2/m/blz/patch?from=" + MakeDigest(Sha256Hex(archives[0])) +
                             "&to=" + MakeDigest(Sha256Hex(archives[1]));
  Res miss = c.Send(Make(http::verb::get, target));
  EXPECT_EQ(miss.result_int(), 200);
  EXPECT_EQ(miss["Blz-Patch-Cache"], "miss");
  EXPECT_EQ(miss.body(), "stand-in patch");
  Res hit = c.Send(Make(http::verb::get, target));
  EXPECT_EQ(hit["Blz-Patch-Cache"], "hit");
  EXPECT_EQ(hit.body(), "stand-in patch");
  EXPECT_EQ(hit["Docker-Content-Digest"], MakeDigest(Sha256Hex(std::string("stand-in patch"))));
}

TEST_F(LiveServerTest, ManyClientsInParallel) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Client c(server_->port());
      for (int i = 0; i < 10 && c.ok(); ++i) {
        if (c.Send(Make(http::verb::get, "/v2/_catalog")).result_int() == 200) ok.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 40);
}

TEST_F(LiveServerTest, StopClosesTheListener) {
  const uint16_t port = server_->port();
  {
    Client c(port);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c.Send(Make(http::verb::get, "/v2/", token_)).result_int(), 200);
  }
  server_->Stop();
  server_->Stop();  // idempotent
  Client after(port);
  EXPECT_FALSE(after.ok());
}

TEST(ServerStartTest, BadListenAddresses) {
  blz::testing::TempDir tmp;
  auto r = Registry::Open(tmp / "d", {});
  ASSERT_TRUE(r.ok());
  for (const char* bad : {"nonsense", "127.0.0.1:99999", "127.0.0.1:", "not-an-ip:80", ":80"}) {
    auto s = Server::Start(r->get(), bad, 1);
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << bad;
  }
  // Binding a port that is taken fails with kIOError.
  auto first = Server::Start(r->get(), "127.0.0.1:0", 1);
  ASSERT_TRUE(first.ok());
  auto second = Server::Start(r->get(), "127.0.0.1:" + std::to_string((*first)->port()), 1);
  EXPECT_EQ(second.status().code(), Code::kIOError);
}

// A body trickled under the minimum rate is refused with 408, the connection closed, the
// partial body file removed, and the access log says why (with the query's token redacted).
TEST(SlowBodyTest, TrickledBodyIsCutOffAndLogged) {
  blz::testing::TempDir tmp;
  RegistryOptions options;
  options.body_rate.min_bytes_per_second = 1000;
  options.body_rate.window = std::chrono::milliseconds(500);
  auto r = Registry::Open(tmp / "data", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto token = (*r)->EnsureAdminToken();
  ASSERT_TRUE(token.ok() && token->has_value());
  auto server = Server::Start(r->get(), "127.0.0.1:0", 1);
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  ::testing::internal::CaptureStderr();
  Client c((*server)->port());
  ASSERT_TRUE(c.ok());
  const std::string target = "/v2/m/blobs/uploads/?digest=" + MakeDigest(std::string(64, 'a')) +
                             "&token=hunter2";
  c.WriteHead(Make(http::verb::post, target, **token), 100000);
  ASSERT_TRUE(c.ok()) << c.error().message();
  // 10 bytes/s against a 1000 bytes/s minimum: refused after the first 0.5 s window. Bounded:
  // at most 80 bytes (8 s) are sent.
  bool answered = false;
  for (int i = 0; i < 80 && !answered; ++i) {
    if (!c.WriteRaw("x")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    answered = c.Available() > 0;
  }
  Res res = c.ReadOne();
  EXPECT_EQ(res.result_int(), 408) << res.body();
  EXPECT_NE(res.body().find("too slow"), std::string::npos) << res.body();
  EXPECT_TRUE(c.ServerClosed());
  (*server)->Stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("&token=REDACTED 408 "), std::string::npos) << log;
  EXPECT_NE(log.find("request body too slow"), std::string::npos) << log;
  EXPECT_EQ(log.find("hunter2"), std::string::npos) << log;

  // The partial body file is gone; nothing was stored.
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp / "data")) {
    const std::string rel = e.path().string().substr((tmp / "data").size());
    files += e.is_regular_file() && rel.rfind("/blz.db", 0) != 0 && rel != "/auth_secret" ? 1 : 0;
  }
  EXPECT_EQ(files, 0u);
}

// Collects access-log lines (the sink runs on the server's I/O threads).
class LogCapture {
 public:
  AccessLogSink Sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
      cv_.notify_all();
    };
  }
  // The first `n` lines, parsed; waits at most 10 s for them (fewer when they never came).
  std::vector<nlohmann::json> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kDeadline, [&] { return lines_.size() >= n; });
    std::vector<nlohmann::json> out;
    for (const std::string& l : lines_) {
      EXPECT_EQ(l.find('\n'), l.size() - 1) << l;
      out.push_back(nlohmann::json::parse(l, nullptr, false));
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

// The JSON access log of a real server: one line per request with the client's address, the
// redacted target, body bytes in and out; transfers the client abandons (mid-body, mid-response)
// are logged as aborted with the bytes actually exchanged.
TEST(AccessLogLiveTest, EveryRequestIsLoggedIncludingAbortedTransfers) {
  blz::testing::TempDir tmp;
  auto r = Registry::Open(tmp / "data", RegistryOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto token = (*r)->EnsureAdminToken();
  ASSERT_TRUE(token.ok() && token->has_value());
  LogCapture log;
  auto server = Server::Start(r->get(), "127.0.0.1:0", 2,
                              SessionOptions{LogFormat::kJson, log.Sink()});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();

  const std::string blob = Bytes(16 << 20);
  const std::string d = MakeDigest(Sha256Hex(blob));
  std::string client;
  {
    Client c(port);
    ASSERT_TRUE(c.ok());
    client = c.LocalAddress();
    // Anonymous: the registry challenges (401) at /v2/.
    EXPECT_EQ(c.Send(Make(http::verb::get, "/v2/?token=hunter2")).result_int(), 401);
    EXPECT_EQ(c.Send(Make(http::verb::post, "/v2/org/m/blobs/uploads/?digest=" + d, **token,
                          blob))
                  .result_int(),
              201);
  }
  std::vector<nlohmann::json> lines = log.WaitFor(2);
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json& ping = lines[0];
  EXPECT_EQ(ping["client"], client);
  EXPECT_EQ(ping["user"], "-");
  EXPECT_EQ(ping["method"], "GET");
  EXPECT_EQ(ping["path"], "/v2/?token=REDACTED");
  EXPECT_EQ(ping["status"], 401);
  EXPECT_EQ(ping["bytes_in"], 0);
  EXPECT_GT(ping["bytes_out"], 2);  // the UNAUTHORIZED error document
  EXPECT_EQ(ping["aborted"], false);
  EXPECT_FALSE(ping.contains("note"));
  EXPECT_EQ(ping["time"].get<std::string>().size(), 24u) << ping;  // ....T..:..:..mmmZ
  EXPECT_EQ(ping["time"].get<std::string>().back(), 'Z');
  EXPECT_GE(ping["duration_ms"].get<double>(), 0.0);
  EXPECT_EQ(lines[1]["method"], "POST");
  EXPECT_EQ(lines[1]["status"], 201);
  EXPECT_EQ(lines[1]["bytes_in"], blob.size());
  EXPECT_EQ(lines[1]["bytes_out"], 0);

  // The client goes away 10 bytes into a 100000-byte body: no status, 10 bytes in.
  {
    Client c(port);
    ASSERT_TRUE(c.ok());
    c.WriteHead(Make(http::verb::post, "/v2/org/m/blobs/uploads/?digest=" + d, **token),
                100000);
    ASSERT_TRUE(c.WriteRaw(std::string(10, 'x')));
  }
  lines = log.WaitFor(3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2]["method"], "POST");
  EXPECT_TRUE(lines[2]["status"].is_null()) << lines[2];
  EXPECT_EQ(lines[2]["bytes_in"], 10);
  EXPECT_EQ(lines[2]["aborted"], true);
  EXPECT_EQ(lines[2]["note"], "client closed the connection while sending the request body");

  // The client asks for 16 MiB, reads nothing and closes: the line says 200, aborted, and how
  // much of the body left (less than all of it: the client's buffer is small).
  {
    Client c(port);
    ASSERT_TRUE(c.ok());
    c.SetReceiveBuffer(64 << 10);
    c.WriteHead(Make(http::verb::get, "/v2/org/m/blobs/" + d), 0);
    ASSERT_TRUE(c.ok());
  }
  lines = log.WaitFor(4);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3]["method"], "GET");
  EXPECT_EQ(lines[3]["status"], 200);
  EXPECT_EQ(lines[3]["aborted"], true) << lines[3];
  EXPECT_LT(lines[3]["bytes_out"].get<uint64_t>(), blob.size()) << lines[3];
  EXPECT_NE(lines[3]["note"].get<std::string>().find("while receiving the response"),
            std::string::npos)
      << lines[3];
  (*server)->Stop();
  EXPECT_EQ(log.WaitFor(4).size(), 4u);  // nothing else was logged
}

// GET /metrics through the real server: counted requests by route, method and code (the
// scrape itself included once it ended); with metrics off, /metrics is a plain 404.
TEST(MetricsLiveTest, ServedNextToTheRegistryUnlessDisabled) {
  blz::testing::TempDir tmp;
  auto r = Registry::Open(tmp / "data", RegistryOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  LogCapture log;
  auto server = Server::Start(r->get(), "127.0.0.1:0", 2,
                              SessionOptions{LogFormat::kText, log.Sink(), /*metrics=*/true});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Client c((*server)->port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.Send(Make(http::verb::get, "/v2/")).result_int(), 401);  // anonymous: challenged
  EXPECT_EQ(c.Send(Make(http::verb::get, "/v2/m/tags/list")).result_int(), 404);
  Res first = c.Send(Make(http::verb::get, "/metrics"));
  ASSERT_EQ(first.result_int(), 200) << first.body();
  EXPECT_EQ(first[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(first.body().find("blz_http_requests_total{route=\"base\",method=\"GET\",code=\"401\"} 1\n"),
            std::string::npos)
      << first.body();
  EXPECT_NE(first.body().find("blz_http_requests_total{route=\"tags\",method=\"GET\",code=\"404\"} 1\n"),
            std::string::npos)
      << first.body();
  EXPECT_NE(first.body().find("blz_storage_bytes{kind=\"blobs\"} "), std::string::npos);
  Res second = c.Send(Make(http::verb::get, "/metrics"));
  EXPECT_NE(second.body().find("blz_http_requests_total{route=\"metrics\",method=\"GET\",code=\"200\"} 1\n"),
            std::string::npos)
      << second.body();
  Res post = c.Send(Make(http::verb::post, "/metrics"));
  EXPECT_EQ(post.result_int(), 405);
  (*server)->Stop();

  auto off = Server::Start(r->get(), "127.0.0.1:0", 1,
                           SessionOptions{LogFormat::kText, log.Sink(), /*metrics=*/false});
  ASSERT_TRUE(off.ok());
  Client c2((*off)->port());
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2.Send(Make(http::verb::get, "/metrics")).result_int(), 404);
  (*off)->Stop();
}

// GET /healthz and /readyz through the real server of a private registry: answered without a
// token (load balancers have none), even with /metrics off, and counted under their own route
// kinds; the registry's routes stay closed to anonymous callers.
TEST(HealthLiveTest, HealthAndReadinessNeedNoTokenOnAPrivateRegistry) {
  blz::testing::TempDir tmp;
  RegistryOptions options;
  options.private_mode = true;
  auto r = Registry::Open(tmp / "data", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  LogCapture log;
  auto server = Server::Start(r->get(), "127.0.0.1:0", 2,
                              SessionOptions{LogFormat::kText, log.Sink(), /*metrics=*/false});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Client c((*server)->port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.Send(Make(http::verb::get, "/v2/_catalog")).result_int(), 401);
  Res healthz = c.Send(Make(http::verb::get, "/healthz"));
  ASSERT_EQ(healthz.result_int(), 200) << healthz.body();
  EXPECT_EQ(nlohmann::json::parse(healthz.body()).at("status"), "ok");
  EXPECT_EQ(healthz[http::field::content_type], "application/json");
  Res readyz = c.Send(Make(http::verb::get, "/readyz"));
  ASSERT_EQ(readyz.result_int(), 200) << readyz.body();
  EXPECT_EQ(nlohmann::json::parse(readyz.body()).at("status"), "ready");
  EXPECT_EQ(c.Send(Make(http::verb::post, "/readyz")).result_int(), 405);
  (*server)->Stop();
  const std::string scrape = (*r)->metrics().Render();
  EXPECT_NE(scrape.find("blz_http_requests_total{route=\"healthz\",method=\"GET\",code=\"200\"} 1\n"),
            std::string::npos)
      << scrape;
  EXPECT_NE(scrape.find("blz_http_requests_total{route=\"readyz\",method=\"GET\",code=\"200\"} 1\n"),
            std::string::npos)
      << scrape;
}

// --trusted-proxy: X-Forwarded-For/-Proto/-Host change the access log's client and the auth
// realm only when the connection comes from a trusted proxy.
TEST(TrustedProxyLiveTest, ForwardedHeadersOnlyFromTrustedProxies) {
  blz::testing::TempDir tmp;
  auto r = Registry::Open(tmp / "data", RegistryOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto request = [] {
    Req req = Make(http::verb::get, "/v2/");
    req.set("X-Forwarded-For", "203.0.113.9");
    req.set("X-Forwarded-Proto", "https");
    req.set("X-Forwarded-Host", "models.example.com");
    return req;
  };
  for (bool trusted : {false, true}) {
    LogCapture log;
    SessionOptions session;
    session.log_format = LogFormat::kJson;
    session.log = log.Sink();
    if (trusted) {
      Result<TrustedProxies> t = TrustedProxies::Parse({"127.0.0.0/8"});
      ASSERT_TRUE(t.ok());
      session.trusted_proxies = std::make_shared<const TrustedProxies>(std::move(*t));
    }
    auto server = Server::Start(r->get(), "127.0.0.1:0", 1, session);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    std::string client;
    Res res;
    {
      Client c((*server)->port());
      ASSERT_TRUE(c.ok());
      client = c.LocalAddress();
      res = c.Send(request());
    }
    EXPECT_EQ(res.result_int(), 401u);
    const std::string challenge(res[http::field::www_authenticate]);
    std::vector<nlohmann::json> lines = log.WaitFor(1);
    ASSERT_EQ(lines.size(), 1u);
    if (trusted) {
      EXPECT_EQ(lines[0]["client"], "203.0.113.9");
      EXPECT_EQ(challenge.rfind("Bearer realm=\"https://models.example.com/v2/_blz/token\"", 0),
                0u)
          << challenge;
    } else {
      EXPECT_EQ(lines[0]["client"], client);
      // The Host header the client sent (the test client sets its own), over plain http.
      EXPECT_EQ(challenge.rfind("Bearer realm=\"http://127.0.0.1", 0), 0u) << challenge;
      EXPECT_EQ(challenge.find("models.example.com"), std::string::npos) << challenge;
    }
    (*server)->Stop();
  }
}

// SessionOptions::web (the web view's hook, web/web_handler.h): asked with each request's head
// except /metrics; its answers are sent on the same keep-alive connection (a small body is read
// and discarded, a large one closes the connection unread), logged and counted under route
// "web"; nullopt leaves the request to the registry.
TEST(WebHookLiveTest, AnswersItsRequestsAndLeavesTheRestToTheRegistry) {
  blz::testing::TempDir tmp;
  auto r = Registry::Open(tmp / "data", RegistryOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  LogCapture log;
  std::atomic<int> asked{0};
  SessionOptions session{LogFormat::kJson, log.Sink()};
  session.web = [&asked](const RequestHead& head) -> std::optional<Response> {
    ++asked;
    if (head.target.rfind("/page", 0) != 0) return std::nullopt;
    Response res;
    res.Set("Content-Type", "text/plain");
    res.body = "page:" + head.method;
    if (head.method == "HEAD") res.head_only = true;
    return res;
  };
  auto server = Server::Start(r->get(), "127.0.0.1:0", 2, session);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  {
    Client c((*server)->port());
    ASSERT_TRUE(c.ok());
    Res get = c.Send(Make(http::verb::get, "/page"));
    EXPECT_EQ(get.result_int(), 200);
    EXPECT_EQ(get.body(), "page:GET");
    Res post = c.Send(Make(http::verb::post, "/page", "", std::string(1000, 'x')));
    EXPECT_EQ(post.result_int(), 200);
    EXPECT_EQ(post.body(), "page:POST");
    Res head = c.Send(Make(http::verb::head, "/page"));
    EXPECT_EQ(head.result_int(), 200);
    EXPECT_EQ(head[http::field::content_length], "9");
    // Same connection, the registry's paths: the hook declines, the registry answers.
    EXPECT_EQ(c.Send(Make(http::verb::get, "/v2/")).result_int(), 401);
    EXPECT_EQ(c.Send(Make(http::verb::get, "/elsewhere")).result_int(), 404);
    EXPECT_EQ(asked.load(), 5);
    Res metrics = c.Send(Make(http::verb::get, "/metrics"));
    EXPECT_EQ(asked.load(), 5);  // never asked about /metrics
    for (const char* sample : {"{route=\"web\",method=\"GET\",code=\"200\"} 1\n",
                               "{route=\"web\",method=\"POST\",code=\"200\"} 1\n",
                               "{route=\"web\",method=\"HEAD\",code=\"200\"} 1\n",
                               "{route=\"base\",method=\"GET\",code=\"401\"} 1\n",
                               "{route=\"other\",method=\"GET\",code=\"404\"} 1\n"}) {
      EXPECT_NE(metrics.body().find(std::string("blz_http_requests_total") + sample),
                std::string::npos)
          << sample << metrics.body();
    }
  }
  {
    // A large body is not read: the answer comes at once and the connection closes.
    Client c((*server)->port());
    ASSERT_TRUE(c.ok());
    Res big = c.SendHeadOnly(Make(http::verb::put, "/page"), 1ull << 30);
    EXPECT_EQ(big.result_int(), 200);
    EXPECT_EQ(big.body(), "page:PUT");
    EXPECT_FALSE(big.keep_alive());
  }
  // GET, POST, HEAD /page, /v2/, /elsewhere, /metrics, the PUT: one line each.
  std::vector<nlohmann::json> lines = log.WaitFor(7);
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0]["path"], "/page");
  EXPECT_EQ(lines[0]["status"], 200);
  EXPECT_EQ(lines[1]["method"], "POST");
  EXPECT_EQ(lines[1]["bytes_in"], 1000);  // read and discarded
  // (The second connection's line may come before the first's last one.)
  auto put = std::find_if(lines.begin(), lines.end(),
                          [](const nlohmann::json& l) { return l["method"] == "PUT"; });
  ASSERT_NE(put, lines.end());
  EXPECT_EQ((*put)["status"], 200);
  EXPECT_EQ((*put)["bytes_in"], 0);  // not read
  (*server)->Stop();
}

}  // namespace
}  // namespace blz::registry
