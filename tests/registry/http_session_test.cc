// The Beast session (registry/http_session.cc) on a real server on 127.0.0.1 with raw request
// bytes: request framing that could smuggle a second request (RFC 9112 §6.1, §6.3) is refused
// and the connection closed; a valid chunked body still works; every response carries
// X-Content-Type-Options: nosniff (and, over plain HTTP, no Strict-Transport-Security). The TLS
// side (suites, HSTS) is in server_tls_test.cc.
#include "registry/http_session.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
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

  // The status codes of the responses received, in order.
  std::vector<std::string> Statuses() const {
    std::vector<std::string> out;
    for (size_t at = received.find("HTTP/1.1 "); at != std::string::npos;
         at = received.find("HTTP/1.1 ", at + 1)) {
      if (at == 0 || received.compare(at - 2, 2, "\r\n") == 0) out.push_back(received.substr(at + 9, 3));
    }
    return out;
  }
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

// `close_after_writing`: shut down the sending side once `bytes` are written (a client that
// stops mid-body); `allow_write_error`: the server may close before reading all of `bytes`.
Exchange Raw(uint16_t port, const std::string& bytes, bool close_after_writing = false,
             bool allow_write_error = false) {
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
                                          [&](beast::error_code wec, size_t) {
                                            result = wec;
                                            // A client that stops sending mid-body.
                                            beast::error_code ignored;
                                            if (close_after_writing) {
                                              stream.socket().shutdown(tcp::socket::shutdown_send,
                                                                       ignored);
                                            }
                                          });
                       });
  ioc.run();
  if (!allow_write_error) {
    EXPECT_FALSE(result) << result.message();
  }
  // Read until the server closes (EOF) or the deadline.
  static char buf[64 * 1024];
  for (int i = 0; i < 10000; ++i) {
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

// The value of header `name` in the first response of `x` ("" when absent).
std::string HeaderOf(const Exchange& x, const std::string& name) {
  const std::string head = x.FirstHead();
  const size_t at = head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  const size_t begin = at + name.size() + 4;
  return head.substr(begin, head.find("\r\n", begin) - begin);
}

// Deterministic bytes that differ from chunk to chunk.
std::string Bytes(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    out[i] = char(seed >> 24);
  }
  return out;
}

// While it lives, files this process writes may not grow past `bytes` (RLIMIT_FSIZE, with
// SIGXFSZ ignored: writes fail with EFBIG, as they would with ENOSPC on a full disk).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &before_), 0);
    struct rlimit small = before_;
    small.rlim_cur = bytes;
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  }
  ~FileSizeLimit() {
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &before_), 0);
    ::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit before_ {};
  void (*old_handler_)(int) = nullptr;
};

// Files left under the registry's uploads directory, but for the session's parts.
std::vector<std::string> LooseUploadFiles(const std::filesystem::path& data) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(data / "uploads")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("parts-", 0) != 0) out.push_back(name);
  }
  return out;
}

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

// An upload session's chunks with Content-Length bodies (read straight into the body file and
// hashed as they arrive, issue 28), pipelined on one kept-alive connection, the last bytes in
// the closing PUT: the blob is published with exactly those bytes; under a wrong digest
// nothing is published and the session is discarded.
TEST_F(HttpSessionTest, ChunksHashedOnArrivalPublishExactlyTheirBytes) {
  const std::string auth = "Authorization: Bearer " + token_ + "\r\n";
  for (bool right : {true, false}) {
    SCOPED_TRACE(right ? "right digest" : "wrong digest");
    const std::string a = Bytes(3 << 20, right ? 1 : 11), b = Bytes(1 << 20, 2);
    const std::string c = Bytes(12345, 3);
    const std::string blob = a + b + c;
    const std::string digest = MakeDigest(Sha256Hex(blob));
    const std::string claimed = right ? digest : MakeDigest(Sha256Hex(blob + "x"));
    Exchange open = Raw(server_->port(), "POST /v2/m/blobs/uploads/ HTTP/1.1\r\nHost: x\r\n" +
                                             auth + "Connection: close\r\n\r\n");
    ASSERT_EQ(open.Statuses(), std::vector<std::string>{"202"}) << open.received;
    const std::string location = HeaderOf(open, "Location");
    ASSERT_FALSE(location.empty()) << open.received;
    auto patch = [&](const std::string& bytes, size_t first) {
      return "PATCH " + location + " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Range: " +
             std::to_string(first) + "-" + std::to_string(first + bytes.size() - 1) +
             "\r\nContent-Length: " + std::to_string(bytes.size()) + "\r\n\r\n" + bytes;
    };
    Exchange x = Raw(server_->port(),
                     patch(a, 0) + patch(b, a.size()) + "PUT " + location + "?digest=" + claimed +
                         " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: " +
                         std::to_string(c.size()) + "\r\n\r\n" + c + "GET /v2/m/blobs/" +
                         digest + " HTTP/1.1\r\nHost: x\r\n" + auth +
                         "Connection: close\r\n\r\n");
    EXPECT_TRUE(x.closed);
    if (right) {
      ASSERT_EQ(x.Statuses(), (std::vector<std::string>{"202", "202", "201", "200"}))
          << x.received.substr(0, 3000);
      ASSERT_GE(x.received.size(), blob.size());
      EXPECT_TRUE(x.received.compare(x.received.size() - blob.size(), blob.size(), blob) == 0);
    } else {
      // (The refusal may close the connection before the GET: asked again below.)
      std::vector<std::string> statuses = x.Statuses();
      statuses.resize(3);
      ASSERT_EQ(statuses, (std::vector<std::string>{"202", "202", "400"}))
          << x.received.substr(0, 3000);
      EXPECT_NE(x.received.find("DIGEST_INVALID"), std::string::npos) << x.received;
      Exchange blob_head = Raw(server_->port(), "HEAD /v2/m/blobs/" + digest +
                                                    " HTTP/1.1\r\nHost: x\r\n" + auth +
                                                    "Connection: close\r\n\r\n");
      EXPECT_EQ(blob_head.Statuses(), std::vector<std::string>{"404"}) << blob_head.received;
      Exchange gone = Raw(server_->port(), "GET " + location + " HTTP/1.1\r\nHost: x\r\n" + auth +
                                               "Connection: close\r\n\r\n");
      EXPECT_EQ(gone.Statuses(), std::vector<std::string>{"404"}) << gone.received;
    }
    EXPECT_TRUE(LooseUploadFiles(tmp_ / "data").empty());
  }
}

// A chunk whose body stops midway (the client closes): nothing of it is stored, no body file
// is left, the session still holds 0 bytes, and the same chunk sent again completes the blob
// (no hash state advanced by the lost bytes is reused).
TEST_F(HttpSessionTest, AChunkCutMidBodyStoresNothingAndTheUploadContinues) {
  const std::string auth = "Authorization: Bearer " + token_ + "\r\n";
  const std::string blob = Bytes(2 << 20, 5);
  const std::string digest = MakeDigest(Sha256Hex(blob));
  Exchange open = Raw(server_->port(), "POST /v2/m/blobs/uploads/ HTTP/1.1\r\nHost: x\r\n" +
                                           auth + "Connection: close\r\n\r\n");
  ASSERT_EQ(open.Statuses(), std::vector<std::string>{"202"}) << open.received;
  const std::string location = HeaderOf(open, "Location");
  const std::string head = "PATCH " + location + " HTTP/1.1\r\nHost: x\r\n" + auth +
                           "Content-Range: 0-" + std::to_string(blob.size() - 1) +
                           "\r\nContent-Length: " + std::to_string(blob.size()) + "\r\n\r\n";
  Exchange cut = Raw(server_->port(), head + blob.substr(0, 700000), /*close_after_writing=*/true);
  EXPECT_TRUE(cut.closed);
  EXPECT_TRUE(cut.Statuses().empty()) << cut.received;
  Exchange held = Raw(server_->port(), "GET " + location + " HTTP/1.1\r\nHost: x\r\n" + auth +
                                           "Connection: close\r\n\r\n");
  ASSERT_EQ(held.Statuses(), std::vector<std::string>{"204"}) << held.received;
  EXPECT_EQ(HeaderOf(held, "Blz-Upload-Offset"), "0");
  EXPECT_TRUE(LooseUploadFiles(tmp_ / "data").empty());
  // The bytes it wrote into the session file (fs: chunks are written in place) are cut off.
  const std::string session_file =
      tmp_ / ("data/uploads/parts-" + location.substr(location.rfind('/') + 1) + "/data");
  ASSERT_TRUE(std::filesystem::exists(session_file));
  EXPECT_EQ(std::filesystem::file_size(session_file), 0u);
  Exchange x = Raw(server_->port(), head + blob + "PUT " + location + "?digest=" + digest +
                                        " HTTP/1.1\r\nHost: x\r\n" + auth +
                                        "Connection: close\r\n\r\n");
  EXPECT_EQ(x.Statuses(), (std::vector<std::string>{"202", "201"})) << x.received;
  EXPECT_EQ(HeaderOf(x, "Blz-Upload-Offset"), std::to_string(blob.size()));
}

// A body the disk cannot take (here the file-size limit, RLIMIT_FSIZE, stands in for a full
// disk: writes fail as they would with ENOSPC): the client gets 507 with the reason (not a
// silently dropped connection), nothing is published and no partial file is left.
TEST_F(HttpSessionTest, ABodyTheDiskCannotTakeGets507AndLeavesNothing) {
  const std::string auth = "Authorization: Bearer " + token_ + "\r\n";
  const std::string blob = Bytes((1 << 20) + 4096, 9);
  const std::string digest = MakeDigest(Sha256Hex(blob));
  Exchange x;
  {
    FileSizeLimit limit(1 << 20);
    x = Raw(server_->port(),
            "POST /v2/m/blobs/uploads/?digest=" + digest + " HTTP/1.1\r\nHost: x\r\n" + auth +
                "Content-Length: " + std::to_string(blob.size()) + "\r\n\r\n" + blob,
            /*close_after_writing=*/false, /*allow_write_error=*/true);
  }
  EXPECT_TRUE(x.closed);
  ASSERT_EQ(x.Statuses(), std::vector<std::string>{"507"}) << x.received;
  EXPECT_NE(x.received.find("cannot write the request body"), std::string::npos) << x.received;
  Exchange head = Raw(server_->port(), "HEAD /v2/m/blobs/" + digest + " HTTP/1.1\r\nHost: x\r\n" +
                                           auth + "Connection: close\r\n\r\n");
  EXPECT_EQ(head.Statuses(), std::vector<std::string>{"404"}) << head.received;
  EXPECT_TRUE(LooseUploadFiles(tmp_ / "data").empty());
}

// ---- chunks written in place into the session file (store/blob_store.h, issue 28) ----

// A connection that sends a request in two steps (blocking POSIX calls), then reads the
// response until the server closes.
class TwoStepClient {
 public:
  explicit TwoStepClient(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~TwoStepClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool Send(const std::string& bytes) {
    size_t done = 0;
    while (connected_ && done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += size_t(n);
    }
    return connected_;
  }
  Exchange ReadToClose() {
    Exchange out;
    char buf[16384];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        out.closed = n == 0;
        break;
      }
      out.received.append(buf, size_t(n));
    }
    return out;
  }

 private:
  int fd_;
  bool connected_ = false;
};

class UploadSessionFileTest : public HttpSessionTest {
 protected:
  std::string Auth() const { return "Authorization: Bearer " + token_ + "\r\n"; }
  // Opens an upload session; returns its Location.
  std::string Open() {
    Exchange open = Raw(server_->port(), "POST /v2/m/blobs/uploads/ HTTP/1.1\r\nHost: x\r\n" +
                                             Auth() + "Connection: close\r\n\r\n");
    EXPECT_EQ(open.Statuses(), std::vector<std::string>{"202"}) << open.received;
    return HeaderOf(open, "Location");
  }
  std::string PatchHead(const std::string& location, size_t first, size_t size) const {
    return "PATCH " + location + " HTTP/1.1\r\nHost: x\r\n" + Auth() + "Content-Range: " +
           std::to_string(first) + "-" + std::to_string(first + size - 1) +
           "\r\nContent-Length: " + std::to_string(size) + "\r\nConnection: close\r\n\r\n";
  }
  Exchange Patch(const std::string& location, size_t first, const std::string& bytes) {
    return Raw(server_->port(), PatchHead(location, first, bytes.size()) + bytes);
  }
  Exchange Put(const std::string& location, const std::string& digest, const std::string& body) {
    return Raw(server_->port(), "PUT " + location + "?digest=" + digest +
                                    " HTTP/1.1\r\nHost: x\r\n" + Auth() + "Content-Length: " +
                                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
                                    body);
  }
  std::string Get(const std::string& digest) {
    Exchange x = Raw(server_->port(), "GET /v2/m/blobs/" + digest + " HTTP/1.1\r\nHost: x\r\n" +
                                          Auth() + "Connection: close\r\n\r\n");
    const size_t body = x.received.find("\r\n\r\n");
    return body == std::string::npos ? "" : x.received.substr(body + 4);
  }
  std::filesystem::path PartsDir(const std::string& location) const {
    return tmp_ / ("data/uploads/parts-" + location.substr(location.rfind('/') + 1));
  }
  // The names in the session's parts directory.
  std::vector<std::string> PartFiles(const std::string& location) const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(PartsDir(location), ec)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Chunks of known length go one after the other into the session file, nothing else is
// stored, and the closing PUT (with bytes of its own) publishes exactly those bytes; the
// session's directory goes with it.
TEST_F(UploadSessionFileTest, ChunksAreWrittenInPlaceAndTheClosingPutPublishesThem) {
  const std::string a = Bytes(3 << 20, 21), b = Bytes(1 << 20, 22), c = Bytes(777, 23);
  const std::string digest = MakeDigest(Sha256Hex(a + b + c));
  const std::string location = Open();
  ASSERT_FALSE(location.empty());
  EXPECT_EQ(Patch(location, 0, a).Statuses(), std::vector<std::string>{"202"});
  EXPECT_EQ(PartFiles(location), std::vector<std::string>{"data"});
  EXPECT_EQ(blz::testing::ReadFileBytes((PartsDir(location) / "data").string()), a);
  Exchange second = Patch(location, a.size(), b);
  EXPECT_EQ(second.Statuses(), std::vector<std::string>{"202"}) << second.received;
  EXPECT_EQ(HeaderOf(second, "Blz-Upload-Offset"), std::to_string(a.size() + b.size()));
  EXPECT_EQ(blz::testing::ReadFileBytes((PartsDir(location) / "data").string()), a + b);
  Exchange put = Put(location, digest, c);
  ASSERT_EQ(put.Statuses(), std::vector<std::string>{"201"}) << put.received;
  EXPECT_EQ(Get(digest), a + b + c);
  EXPECT_FALSE(std::filesystem::exists(PartsDir(location)));
  EXPECT_TRUE(LooseUploadFiles(tmp_ / "data").empty());
}

// A chunk that arrives while another request is still writing the session file (a client's
// retry, or a second client racing at the same offset) is stored as an ordinary part and
// recorded; the slower one, finishing later, gets 416, and the bytes it left in the file are
// never part of the blob.
TEST_F(UploadSessionFileTest, AChunkThatFindsTheFileBusyIsStoredAsAPartAndTheLoserGets416) {
  const std::string a = Bytes(2 << 20, 31), b = Bytes(1 << 20, 32);
  const std::string slow_a = Bytes(a.size(), 33);  // what the slower request sends at offset 0
  const std::string digest = MakeDigest(Sha256Hex(a + b));
  const std::string location = Open();
  ASSERT_FALSE(location.empty());
  TwoStepClient slow(server_->port());
  ASSERT_TRUE(slow.Send(PatchHead(location, 0, slow_a.size()) + slow_a.substr(0, 1 << 20)));
  // Its first half is in the session file: it holds the lock.
  const std::string file = (PartsDir(location) / "data").string();
  for (int i = 0; i < 500 && (!std::filesystem::exists(file) ||
                              std::filesystem::file_size(file) < (1u << 20));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(std::filesystem::file_size(file), 1u << 20);
  Exchange fast = Patch(location, 0, a);
  ASSERT_EQ(fast.Statuses(), std::vector<std::string>{"202"}) << fast.received;
  ASSERT_TRUE(slow.Send(slow_a.substr(1 << 20)));
  Exchange late = slow.ReadToClose();
  EXPECT_EQ(late.Statuses(), std::vector<std::string>{"416"}) << late.received;
  EXPECT_EQ(PartFiles(location).size(), 2u) << "the session file and the ordinary part";
  // The session has an ordinary part now: the next chunk is one too.
  EXPECT_EQ(Patch(location, a.size(), b).Statuses(), std::vector<std::string>{"202"});
  Exchange put = Put(location, digest, "");
  ASSERT_EQ(put.Statuses(), std::vector<std::string>{"201"}) << put.received;
  EXPECT_EQ(Get(digest), a + b);
}

// A session file that is also linked elsewhere (what a closing PUT killed after publishing
// leaves: the blob and the session share the file) is never written again: the next chunk
// goes to an ordinary part, the linked bytes stay as they were, and the upload completes.
TEST_F(UploadSessionFileTest, ASessionFileLinkedElsewhereIsNeverWrittenAgain) {
  const std::string a = Bytes(1 << 20, 41), b = Bytes(123456, 42);
  const std::string digest = MakeDigest(Sha256Hex(a + b));
  const std::string location = Open();
  ASSERT_FALSE(location.empty());
  ASSERT_EQ(Patch(location, 0, a).Statuses(), std::vector<std::string>{"202"});
  const std::string file = (PartsDir(location) / "data").string();
  const std::string published = tmp_ / "published-copy";
  ASSERT_EQ(::link(file.c_str(), published.c_str()), 0);
  ASSERT_EQ(Patch(location, a.size(), b).Statuses(), std::vector<std::string>{"202"});
  EXPECT_EQ(blz::testing::ReadFileBytes(published), a);
  EXPECT_EQ(PartFiles(location).size(), 2u);
  Exchange put = Put(location, digest, "");
  ASSERT_EQ(put.Statuses(), std::vector<std::string>{"201"}) << put.received;
  EXPECT_EQ(Get(digest), a + b);
  EXPECT_EQ(blz::testing::ReadFileBytes(published), a);
}

// A chunk the disk cannot take midway (RLIMIT_FSIZE standing in for a full disk): 507, what it
// wrote past the session's bytes is cut off again, the earlier chunk is intact, and the same
// chunk sent again completes the blob.
TEST_F(UploadSessionFileTest, AChunkTheDiskCannotTakeLosesNothingOfTheSession) {
  const std::string a = Bytes(256 << 10, 51), b = Bytes(1 << 20, 52);
  const std::string digest = MakeDigest(Sha256Hex(a + b));
  const std::string location = Open();
  ASSERT_FALSE(location.empty());
  ASSERT_EQ(Patch(location, 0, a).Statuses(), std::vector<std::string>{"202"});
  Exchange full;
  {
    FileSizeLimit limit(768 << 10);
    full = Raw(server_->port(), PatchHead(location, a.size(), b.size()) + b,
               /*close_after_writing=*/false, /*allow_write_error=*/true);
  }
  ASSERT_EQ(full.Statuses(), std::vector<std::string>{"507"}) << full.received;
  const std::string file = (PartsDir(location) / "data").string();
  EXPECT_EQ(blz::testing::ReadFileBytes(file), a) << "cut back to the session's bytes";
  Exchange held = Raw(server_->port(), "GET " + location + " HTTP/1.1\r\nHost: x\r\n" + Auth() +
                                           "Connection: close\r\n\r\n");
  EXPECT_EQ(HeaderOf(held, "Blz-Upload-Offset"), std::to_string(a.size()));
  ASSERT_EQ(Patch(location, a.size(), b).Statuses(), std::vector<std::string>{"202"});
  Exchange put = Put(location, digest, "");
  ASSERT_EQ(put.Statuses(), std::vector<std::string>{"201"}) << put.received;
  EXPECT_EQ(Get(digest), a + b);
}

}  // namespace
}  // namespace blz::registry
