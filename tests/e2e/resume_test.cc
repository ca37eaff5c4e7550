// Transfers that survive, end to end: a real `blz serve`, the `blz` binary, and a FaultProxy
// (tests/client/fault_proxy.h) between them that cuts connections or stalls. Bytes are measured
// at the proxy (what the server sent / received) and from `--json` (what the client counted).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/client/fault_proxy.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1 << 20;

// A safetensors file holding one F32 tensor of `floats` pseudo-random finite values.
std::string RandomSafetensors(size_t floats, uint32_t seed) {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(floats) +
                       "],\"data_offsets\":[0," + std::to_string(floats * 4) + "]}}";
  while (header.size() % 8 != 0) header += " ";
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  std::string data(floats * 4, '\0');
  uint32_t x = seed * 2654435761u + 12345;
  for (size_t i = 0; i < floats; ++i) {
    x = x * 1664525u + 1013904223u;
    float f = float(int32_t(x >> 8) - (1 << 23)) / float(1 << 23);
    std::memcpy(&data[i * 4], &f, 4);
  }
  return out + data;
}

class ResumeE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string out = work_ / "serve.out";
    server_pid_ = StartServeProcess(
        {BLZ_BINARY, "serve", "--data", work_ / "registry", "--listen", "127.0.0.1:0"}, {}, out,
        work_ / "serve.err");
    ASSERT_GT(server_pid_, 0);
    for (int i = 0; i < 300 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::string text = ReadFileBytes(out);
      auto l = text.find("listening on http://");
      auto t = text.find("admin token: ");
      if (l == std::string::npos || t == std::string::npos ||
          text.find('\n', l) == std::string::npos || text.find('\n', t) == std::string::npos) {
        continue;
      }
      std::string addr = text.substr(l + 20, text.find('\n', l) - l - 20);
      token_ = text.substr(t + 13, text.find('\n', t) - t - 13);
      port_ = uint16_t(std::stoi(addr.substr(addr.rfind(':') + 1)));
    }
    ASSERT_NE(port_, 0) << ReadFileBytes(work_ / "serve.err");
    // ~24 MiB of incompressible tensor data.
    fs::create_directories(work_ / "model");
    WriteFileBytes(work_ / "model/model.safetensors", RandomSafetensors(6 * kMiB, 1));
    WriteFileBytes(work_ / "model/config.json", "{\"model_type\":\"test\"}\n");
  }

  void TearDown() override {
    if (server_pid_ > 0) {
      ::kill(server_pid_, SIGTERM);
      int status = 0;
      ::waitpid(server_pid_, &status, 0);
    }
  }

  std::map<std::string, std::string> Env(const std::string& cache) {
    return {{"BLZ_CONFIG_DIR", work_ / "config"}, {"BLZ_CACHE_DIR", work_ / cache},
            {"BLZ_TOKEN", token_}};
  }

  ProcessResult Blz(std::vector<std::string> args, const std::string& cache) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, Env(cache), work_.path());
  }

  std::string Ref(uint16_t port) { return "127.0.0.1:" + std::to_string(port) + "/org/m:v1"; }

  nlohmann::json Json(const ProcessResult& r) {
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }

  // Pushes the model directly (no faults); returns {digest, archive_size}.
  std::pair<std::string, uint64_t> PushDirect() {
    ProcessResult r = Blz({"push", work_ / "model", Ref(port_), "--json"}, "push-cache");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = Json(r);
    return {j.value("digest", ""), j.value("archive_size", uint64_t{0})};
  }

  TempDir work_;
  pid_t server_pid_ = -1;
  uint16_t port_ = 0;
  std::string token_;
};

TEST_F(ResumeE2ETest, PullThroughCutsCompletesAndCostsOnlyTheBlob) {
  auto [digest, size] = PushDirect();
  ASSERT_GT(size, 20 * kMiB);
  FaultProxy::Options po;
  po.cut_after = 5 * kMiB;  // every connection dies after 5 MiB
  FaultProxy proxy(port_, po);
  ProcessResult r = Blz({"pull", Ref(proxy.port()), "--no-patch", "--json", "--verbose",
                         "--retries", "3", "-o", work_ / "out"},
                        "pull-cache");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(proxy.cuts(), 4);
  EXPECT_NE(r.err.find("retry 1/3 after"), std::string::npos) << r.err;
  EXPECT_EQ(ReadFileBytes(work_ / "out/model.safetensors"),
            ReadFileBytes(work_ / "model/model.safetensors"));
  nlohmann::json j = Json(r);
  EXPECT_EQ(j.value("digest", ""), digest);
  EXPECT_GE(j.value("retries", 0), 4);
  // The server sent the blob once, plus per cut at most what was in flight (the proxy's last
  // 64 KiB read, the client's last 256 KiB read buffer), plus headers and the manifest.
  EXPECT_LE(proxy.upstream_bytes_read(), size + uint64_t(proxy.cuts()) * 320 * 1024 + 64 * 1024)
      << "cuts " << proxy.cuts();
  EXPECT_LE(j.value("bytes_downloaded", uint64_t{0}), size);
}

TEST_F(ResumeE2ETest, KilledPullResumesAndDownloadsOnlyTheRest) {
  auto [digest, size] = PushDirect();
  ASSERT_EQ(digest.rfind("sha256:", 0), 0u);
  const std::string hex = digest.substr(7);
  const std::string sidecar = work_ / ("pull-cache/partial/sha256/" + hex + ".json");
  uint64_t kept = 0;
  {
    // The proxy stops forwarding at half the blob; the client's 1 s stall timeout makes it
    // record what it holds (then retry into the same stall) while we wait, then kill -9.
    FaultProxy::Options po;
    po.stall_after_total = size / 2;
    FaultProxy proxy(port_, po);
    pid_t pid = StartProcess({BLZ_BINARY, "pull", Ref(proxy.port()), "--no-patch",
                              "--parallel", "1", "--stall-timeout", "1", "--retries", "50"},
                             Env("pull-cache"), work_ / "pull1.out", work_ / "pull1.err");
    ASSERT_GT(pid, 0);
    for (int i = 0; i < 600 && kept + 16 * 1024 < size / 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto j = nlohmann::json::parse(ReadFileBytes(sidecar), nullptr, false);
      if (j.is_object() && j.contains("parts")) {
        kept = 0;
        for (const auto& p : j["parts"]) kept += p.value("done", uint64_t{0});
      }
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << ReadFileBytes(work_ / "pull1.err");
    ASSERT_GE(kept + 16 * 1024, size / 2) << ReadFileBytes(work_ / "pull1.err");
    EXPECT_LE(kept, size / 2);
  }
  // The partial survived the kill (and a later store open); the re-run continues it.
  FaultProxy clean(port_, FaultProxy::Options{});
  ProcessResult r = Blz({"pull", Ref(clean.port()), "--no-patch", "--json", "-o", work_ / "out"},
                        "pull-cache");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = Json(r);
  EXPECT_EQ(j.value("bytes_resumed", uint64_t{0}), kept);
  EXPECT_EQ(j.value("bytes_downloaded", uint64_t{0}), size - kept);
  EXPECT_LE(clean.upstream_bytes_read(), size - kept + 64 * 1024);
  EXPECT_NE(r.err.find("resuming blob"), std::string::npos) << r.err;
  EXPECT_EQ(ReadFileBytes(work_ / "out/model.safetensors"),
            ReadFileBytes(work_ / "model/model.safetensors"));
  EXPECT_FALSE(fs::exists(sidecar));
}

TEST_F(ResumeE2ETest, PullSurvivesARegistryRestart) {
  auto [digest, size] = PushDirect();
  // Hold the pull at 40% with a stall, kill the registry, start it again on the same port and
  // data, then end the stalled connection as a dead server's would end: cut, with nothing more
  // forwarded (a plain Release() would first forward what the kernel had buffered from the old
  // server, which under load was sometimes the whole rest of the blob, so the pull finished
  // without a retry). The pull retries into the new server process and continues with Range.
  FaultProxy::Options po;
  po.stall_after_total = size * 2 / 5;
  FaultProxy proxy(port_, po);
  pid_t pull = StartProcess({BLZ_BINARY, "pull", Ref(proxy.port()), "--no-patch", "--json",
                             "--parallel", "1", "--retries", "8", "--verbose", "-o",
                             work_ / "out"},
                            Env("pull-cache"), work_ / "pull.out", work_ / "pull.err");
  ASSERT_GT(pull, 0);
  for (int i = 0; i < 600 && !proxy.stalled(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(proxy.stalled());
  ::kill(server_pid_, SIGKILL);
  int status = 0;
  ::waitpid(server_pid_, &status, 0);
  const std::string out = work_ / "serve2.out";
  server_pid_ = StartServeProcess({BLZ_BINARY, "serve", "--data", work_ / "registry", "--listen",
                                   "127.0.0.1:" + std::to_string(port_)},
                                  {}, out, work_ / "serve2.err");
  for (int i = 0; i < 300 && ReadFileBytes(out).find("listening on") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(ReadFileBytes(out).find("listening on"), std::string::npos)
      << ReadFileBytes(work_ / "serve2.err");
  proxy.ReleaseByCutting();
  int pull_status = 0;
  ::waitpid(pull, &pull_status, 0);
  const std::string err = ReadFileBytes(work_ / "pull.err");
  ASSERT_TRUE(WIFEXITED(pull_status) && WEXITSTATUS(pull_status) == 0) << err;
  EXPECT_NE(err.find("retry 1/8"), std::string::npos) << err;
  nlohmann::json j = nlohmann::json::parse(ReadFileBytes(work_ / "pull.out"), nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.value("digest", ""), digest);
  EXPECT_LE(j.value("bytes_downloaded", uint64_t{0}), size);
  // The old server sent ~40% (and whatever sat in socket buffers); the new one only the rest.
  EXPECT_LE(proxy.upstream_bytes_read(), size + 4 * kMiB);
  EXPECT_EQ(ReadFileBytes(work_ / "out/model.safetensors"),
            ReadFileBytes(work_ / "model/model.safetensors"));
}

TEST_F(ResumeE2ETest, ChunkedPushSurvivesCutsAndAnInterruptedPushContinues) {
  // 1. A push whose connections are cut every 3 MiB upstream completes in 1 MiB chunks.
  {
    FaultProxy::Options po;
    po.cut_up_after = 3 * kMiB + 100 * 1024;
    FaultProxy proxy(port_, po);
    ProcessResult r = Blz({"push", work_ / "model", Ref(proxy.port()), "--json", "--chunk-size",
                           "1048576", "--retries", "4", "--verbose"},
                          "push-cache");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = Json(r);
    const uint64_t size = j.value("archive_size", uint64_t{0});
    // (HttpClient itself resends a request once when a kept-alive connection dies under it,
    // so not every cut shows as a retry.)
    EXPECT_GE(proxy.cuts(), 4);
    // The server received the archive, plus per cut at most one chunk (1 MiB) cut short.
    EXPECT_LE(proxy.upstream_bytes_sent(), size + uint64_t(proxy.cuts()) * kMiB + 256 * 1024);
    ProcessResult pulled = Blz({"pull", Ref(port_), "-o", work_ / "out1"}, "pull-cache-1");
    ASSERT_EQ(pulled.exit_code, 0) << pulled.err;
    EXPECT_EQ(ReadFileBytes(work_ / "out1/model.safetensors"),
              ReadFileBytes(work_ / "model/model.safetensors"));
  }
  // 2. Another version: a push that gives up half way (no retries), then a re-run that
  //    neither packs again nor re-sends what the registry holds (v2 may go as a patch from v1:
  //    a cut patch upload fails the push the same way and is continued the same way).
  WriteFileBytes(work_ / "model/model.safetensors", RandomSafetensors(6 * kMiB, 2));
  const std::string ref2 = "127.0.0.1:" + std::to_string(port_) + "/org/m:v2";
  uint64_t size = 0;
  uint16_t proxy_port = 0;  // the re-run goes to the same address (sessions are per registry)
  {
    FaultProxy::Options po;
    po.cut_up_after = 12 * kMiB + 100 * 1024;
    po.refuse_after_cut = true;
    FaultProxy proxy(port_, po);
    proxy_port = proxy.port();
    ProcessResult r = Blz({"push", work_ / "model",
                           "127.0.0.1:" + std::to_string(proxy.port()) + "/org/m:v2",
                           "--chunk-size", "1048576", "--retries", "0"},
                          "push-cache");
    ASSERT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find("run the same push again"), std::string::npos) << r.err;
  }
  FaultProxy clean(port_, FaultProxy::Options{}, proxy_port);
  ProcessResult r = Blz({"push", work_ / "model",
                         "127.0.0.1:" + std::to_string(clean.port()) + "/org/m:v2", "--json",
                         "--chunk-size", "1048576"},
                        "push-cache");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = Json(r);
  size = j.value("archive_size", uint64_t{0});
  EXPECT_TRUE(j.value("reused_pack", false)) << r.out;
  EXPECT_FALSE(j.value("packed", true));
  const uint64_t resumed = j.value("bytes_resumed", uint64_t{0});
  EXPECT_GE(resumed, 10 * kMiB);
  EXPECT_LE(j.value("bytes_uploaded", uint64_t{0}), size - resumed + 4096);  // + the config
  EXPECT_LE(clean.upstream_bytes_sent(), size - resumed + 256 * 1024);
  ProcessResult pulled = Blz({"pull", ref2, "-o", work_ / "out2"}, "pull-cache-2");
  ASSERT_EQ(pulled.exit_code, 0) << pulled.err;
  EXPECT_EQ(ReadFileBytes(work_ / "out2/model.safetensors"),
            ReadFileBytes(work_ / "model/model.safetensors"));
}

}  // namespace
}  // namespace blz::testing
