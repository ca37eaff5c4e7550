// RunServer end to end: admin token on first start only, the "listening on" line, serving, and a
// clean return on SIGTERM. In registry_patch_test because RunServer links the patcher.
#include "registry/server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "core/digest.h"
#include "registry/net.h"
#include "store/fs/fs_blob_store.h"
#include "store/metadata_db.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

// A port that was free a moment ago, below the kernel's ephemeral range: a port bind(0) hands
// out may be taken next by another test's outgoing connection before the server binds it
// (scripts/free_port.py says more).
uint16_t FreePort() {
  int ephemeral_low = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) {
    range >> ephemeral_low;
  }
  const int low = ephemeral_low > 21000 ? 20000 : 1024;
  std::mt19937 rng(std::random_device{}());
  net::io_context ioc;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const auto port = uint16_t(low + int(rng() % uint32_t(std::max(1, ephemeral_low - low))));
    tcp::acceptor a(ioc);
    beast::error_code ec;
    a.open(tcp::v4(), ec);
    if (!ec) a.bind(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
    if (!ec) return port;
  }
  tcp::acceptor a(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

// GET /v2/ with a 5 s deadline; returns the status or 0.
int Ping(uint16_t port) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  int status = 0;
  stream.expires_after(std::chrono::seconds(5));
  beast::flat_buffer buf;
  http::request<http::empty_body> req{http::verb::get, "/v2/", 11};
  http::response<http::string_body> res;
  stream.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                       [&](beast::error_code ec) {
                         if (ec) return;
                         http::async_write(stream, req, [&](beast::error_code wec, size_t) {
                           if (wec) return;
                           http::async_read(stream, buf, res, [&](beast::error_code rec, size_t) {
                             if (!rec) status = res.result_int();
                           });
                         });
                       });
  ioc.run();
  return status;
}

// Runs RunServer in a thread until it answers, then sends SIGTERM. Returns its stdout.
std::string RunOnce(const ServerOptions& options, Status* result) {
  ::testing::internal::CaptureStdout();
  std::thread server([&] { *result = RunServer(options); });
  const uint16_t port = uint16_t(std::stoi(options.listen.substr(options.listen.rfind(':') + 1)));
  int status = 0;
  for (int i = 0; i < 200 && status == 0; ++i) {  // at most ~20 s
    status = Ping(port);
    if (status == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // GET /v2/ challenges anonymous clients, private or not (pushes always need credentials).
  EXPECT_EQ(status, 401);
  // The server answered, so its signal handlers are installed: SIGTERM stops it gracefully.
  std::raise(SIGTERM);
  server.join();
  return ::testing::internal::GetCapturedStdout();
}

TEST(RunServerTest, FirstStartPrintsTheAdminTokenOnce) {
  blz::testing::TempDir tmp;
  ServerOptions options;
  options.data_dir = tmp / "data";
  options.listen = "127.0.0.1:" + std::to_string(FreePort());
  options.threads = 2;
  Status result = Internal("not run");
  std::string out = RunOnce(options, &result);
  ASSERT_TRUE(result.ok()) << result.ToString();
  const size_t at = out.find("admin token: ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string token = out.substr(at + 13, 64);
  ASSERT_TRUE(IsLowerHex(token, 64)) << out;
  EXPECT_EQ(out.substr(at + 13 + 64, 1), "\n");
  EXPECT_NE(out.find("listening on http://" + options.listen + "\n"), std::string::npos) << out;

  // Only the hash is stored, and it verifies.
  auto db = store::MetadataDb::Open(options.data_dir + "/blz.db");
  ASSERT_TRUE(db.ok());
  EXPECT_TRUE(*(*db)->VerifyToken(token));
  EXPECT_EQ(blz::testing::ReadFileBytes(options.data_dir + "/blz.db").find(token),
            std::string::npos);
  db->reset();

  // Second start: no new token; --private makes reads need one.
  options.private_mode = true;
  options.listen = "127.0.0.1:" + std::to_string(FreePort());
  out = RunOnce(options, &result);
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(out.find("admin token:"), std::string::npos) << out;
  EXPECT_NE(out.find("listening on"), std::string::npos);
}

TEST(RunServerTest, VerifyStorageQuarantinesDamagedBlobsBeforeServing) {
  blz::testing::TempDir tmp;
  ServerOptions options;
  options.data_dir = tmp / "data";
  options.threads = 2;
  std::string bad, good;
  {
    auto blobs = store::FsBlobStore::Open(options.data_dir);
    ASSERT_TRUE(blobs.ok());
    auto b = (*blobs)->PutBytes("bytes the disk will damage");
    auto g = (*blobs)->PutBytes("intact bytes");
    ASSERT_TRUE(b.ok() && g.ok());
    bad = b->digest;
    good = g->digest;
    std::string bytes = blz::testing::ReadFileBytes(b->path);
    bytes[0] ^= 0x01;
    blz::testing::WriteFileBytes(b->path, bytes);
  }
  options.verify_storage = true;
  options.listen = "127.0.0.1:" + std::to_string(FreePort());
  Status result = Internal("not run");
  ::testing::internal::CaptureStderr();
  std::string out = RunOnce(options, &result);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_NE(out.find("listening on"), std::string::npos) << out;
  EXPECT_NE(err.find("verify-storage: 2 blobs"), std::string::npos) << err;
  EXPECT_NE(err.find("1 damaged (moved to " + options.data_dir + "/quarantine)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(bad), std::string::npos) << err;
  EXPECT_TRUE(std::filesystem::exists(options.data_dir + "/quarantine/" + bad.substr(7)));
  auto blobs = store::FsBlobStore::Open(options.data_dir);
  ASSERT_TRUE(blobs.ok());
  EXPECT_FALSE((*blobs)->Contains(bad));
  EXPECT_TRUE((*blobs)->Contains(good));
}

TEST(RunServerTest, ErrorsAreReturned) {
  blz::testing::TempDir tmp;
  ServerOptions options;
  options.data_dir = tmp / "data";
  options.listen = "not an address";
  EXPECT_EQ(RunServer(options).code(), Code::kInvalidArgument);
  // A failed start did not consume the one-time admin token.
  {
    auto db = store::MetadataDb::Open(options.data_dir + "/blz.db");
    ASSERT_TRUE(db.ok());
    EXPECT_EQ(*(*db)->CountTokens("admin"), 0);
  }
  blz::testing::WriteFileBytes(tmp / "file", "x");
  options.data_dir = tmp / "file";  // not a directory
  options.listen = "127.0.0.1:0";
  EXPECT_FALSE(RunServer(options).ok());
}

// Two servers never share a data directory: while one holds <data>/blz.lock, RunServer refuses
// with kUnavailable naming the directory and the holder's PID, before touching anything; once
// the lock is released a server starts.
TEST(RunServerTest, SecondServerOnTheSameDataDirectoryIsRefused) {
  blz::testing::TempDir tmp;
  ServerOptions options;
  options.data_dir = tmp / "data";
  options.threads = 1;
  options.listen = "127.0.0.1:" + std::to_string(FreePort());
  {
    Result<FileLock> held = LockDataDir(options.data_dir);
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    EXPECT_EQ(std::filesystem::status(options.data_dir).permissions(),
              std::filesystem::perms::owner_all);  // created private
    Status refused = RunServer(options);
    EXPECT_EQ(refused.code(), Code::kUnavailable);
    EXPECT_EQ(refused.message(), "data directory '" + options.data_dir +
                                     "' is in use by another blz serve: '" + options.data_dir +
                                     "/blz.lock' is locked by process " +
                                     std::to_string(::getpid()));
    // Refused before opening anything: no database, no admin token consumed.
    EXPECT_FALSE(std::filesystem::exists(options.data_dir + "/blz.db"));
  }
  Status result = Internal("not run");
  std::string out = RunOnce(options, &result);
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_NE(out.find("listening on"), std::string::npos) << out;
  // Released when RunServer returned.
  EXPECT_TRUE(LockDataDir(options.data_dir).ok());
}

}  // namespace
}  // namespace blz::registry
