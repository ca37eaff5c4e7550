// End-to-end: a push stays all-or-nothing under SIGKILL (issue 28, client/push.h). A `blz push`
// killed at any moment (packing, copying a .blz into the store while hashing it, uploading
// whole or as a patch, putting the manifest), or a `blz serve` killed under a push, leaves:
// the tag absent or pulling back byte-identical, the user's files unchanged, every blob of the
// client's store named by the SHA-256 of its bytes; and the same push run again completes.
// Kills during the upload are placed by the bytes a FaultProxy between client and registry has
// forwarded (tests/client/fault_proxy.h), the others by time. A corrupted .blz is refused by
// the registry's own check (or by the client's, with --verify-locally) before its tag is set.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "tests/client/fault_proxy.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kFloats = 4 << 20;  // 16 MiB of F32 per version

class PushKillE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
    ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "serve.err");
    token_ = server_.token;
  }
  void TearDown() override { StopServe(&server_); }

  // Version `v` of the model as a directory "v<v>" (and, with `archive`, packed to v<v>.blz).
  void MakeVersion(int v, bool archive) {
    const std::string dir = work_ / ("v" + std::to_string(v));
    fs::create_directories(dir);
    WriteFileBytes(dir + "/model.safetensors", FineTuneSafetensors(kFloats, v));
    WriteFileBytes(dir + "/config.json", "{\"model_type\":\"test\",\"v\":" + std::to_string(v) +
                                             "}\n");
    if (archive) {
      ProcessResult r = Blz({"pack", dir, "-o", dir + ".blz"}, "pack-cache");
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  std::string Ref(int v) { return server_.addr + "/org/m:v" + std::to_string(v); }
  std::map<std::string, std::string> Env(const std::string& cache) {
    return {{"BLZ_CONFIG_DIR", work_ / "config"}, {"BLZ_CACHE_DIR", work_ / cache},
            {"BLZ_TOKEN", token_}};
  }
  ProcessResult Blz(std::vector<std::string> args, const std::string& cache) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, Env(cache), work_.path());
  }
  // Where a kill lands: `delay_ms` after the start, or once the client has sent `bytes` to the
  // registry (through a proxy that then holds everything else it sends; at most 30 s).
  struct KillAt {
    int delay_ms = 0;
    uint64_t bytes = 0;
  };
  // Starts `blz push SOURCE <registry>/org/m:v<v>` with `extra` arguments, through a proxy when
  // kill.bytes is set, and waits for the kill moment. Returns the running push and the proxy.
  pid_t StartPushAndWait(const std::string& source, int v, const std::string& cache, KillAt kill,
                         std::unique_ptr<FaultProxy>* proxy,
                         std::vector<std::string> extra = {}) {
    std::string registry = server_.addr;
    if (kill.bytes > 0) {
      FaultProxy::Options options;
      options.stall_up_after_total = kill.bytes;
      *proxy = std::make_unique<FaultProxy>(Port(), options);
      registry = "127.0.0.1:" + std::to_string((*proxy)->port());
    }
    std::vector<std::string> argv = {BLZ_BINARY, "push", source,
                                     registry + "/org/m:v" + std::to_string(v)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_t pid = StartProcess(argv, Env(cache), work_ / "push.out", work_ / "push.err");
    EXPECT_GT(pid, 0);
    if (kill.bytes == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kill.delay_ms));
      return pid;
    }
    for (int i = 0; i < 3000 && !(*proxy)->stalled(); ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return -1;  // it ended first (reaped)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pid;
  }
  // SIGKILLs `pid` and reaps it; true when the kill landed before it exited (else it must have
  // succeeded). -1 = already reaped by StartPushAndWait.
  bool KillPush(pid_t pid) {
    if (pid < 0) return false;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return true;
    EXPECT_EQ(WEXITSTATUS(status), 0) << ReadFileBytes(work_ / "push.err");
    return false;
  }
  uint16_t Port() { return uint16_t(std::stoi(server_.addr.substr(server_.addr.rfind(':') + 1))); }
  // The tag is absent (exit 3, not found) or pulls back exactly version v's files.
  void ExpectTagAbsentOrWhole(int v) {
    const std::string out = work_ / ("check-v" + std::to_string(v));
    fs::remove_all(out);
    fs::remove_all(work_ / "check-cache");
    ProcessResult r = Blz({"pull", Ref(v), "-o", out, "--no-patch"}, "check-cache");
    if (r.exit_code == 3) {
      EXPECT_FALSE(fs::exists(out));
      return;
    }
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(ReadTree(out), ReadTree(work_ / ("v" + std::to_string(v))));
  }
  // Every published blob of the client store `cache` is named by its SHA-256.
  void ExpectStoreWhole(const std::string& cache) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(work_ / (cache + "/blobs"), ec), end;
         !ec && it != end; it.increment(ec)) {
      if (!it->is_regular_file() ||
          it->path().filename().string().find(".tmp-") != std::string::npos) {
        continue;
      }
      EXPECT_EQ(Sha256Hex(ReadFileBytes(it->path().string())), it->path().filename().string())
          << it->path();
    }
  }

  TempDir work_;
  ServeProcess server_;
  std::string token_;
};

// Versions 0..7 of one repository, each pushed by a client killed at a different moment (even
// versions from the directory, odd ones from a .blz archive; from version 1 on a push may go as
// a patch from the one before). After every kill: the tag is absent or whole, the .blz given is
// unchanged, the client's store holds only whole blobs. Then the same pushes, run again with the
// same store, complete, leave its staging area empty, and every version pulls back identical.
TEST_F(PushKillE2ETest, KilledPushLeavesNothingHalfWritten) {
  const std::string cache = "push-cache";
  constexpr int kVersions = 8;
  int killed = 0;
  for (int v = 0; v < kVersions; ++v) {
    const bool archive = v % 2 == 1;
    MakeVersion(v, archive);
    const std::string source = work_ / ("v" + std::to_string(v) + (archive ? ".blz" : ""));
    const std::string before = archive ? ReadFileBytes(source) : "";
    // By time (from start-up through packing or copying) and by upload progress, alternately.
    const KillAt at = v % 2 == (v / 2) % 2 ? KillAt{100 + 100 * v, 0}
                                           : KillAt{0, 4096 + uint64_t(v % 4) * 64 * 1024};
    SCOPED_TRACE("version " + std::to_string(v) + (archive ? " (.blz)" : " (directory)") +
                 ", killed after " +
                 (at.bytes ? std::to_string(at.bytes) + " bytes sent"
                           : std::to_string(at.delay_ms) + " ms"));
    std::unique_ptr<FaultProxy> proxy;
    if (KillPush(StartPushAndWait(source, v, cache, at, &proxy))) ++killed;
    proxy.reset();
    ExpectTagAbsentOrWhole(v);
    if (archive) {
      EXPECT_EQ(ReadFileBytes(source), before);
    }
    ExpectStoreWhole(cache);
  }
  EXPECT_GT(killed, 0);
  for (int v = 0; v < kVersions; ++v) {
    const bool archive = v % 2 == 1;
    const std::string source = work_ / ("v" + std::to_string(v) + (archive ? ".blz" : ""));
    ProcessResult r = Blz({"push", source, Ref(v)}, cache);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // The store's operations have ended: nothing staged is left behind by the killed runs.
  EXPECT_TRUE(fs::is_empty(work_ / (cache + "/tmp")));
  ExpectStoreWhole(cache);
  for (int v = 0; v < kVersions; ++v) {
    const std::string out = work_ / ("final-v" + std::to_string(v));
    ProcessResult r = Blz({"pull", Ref(v), "-o", out}, "final-cache");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(ReadTree(out), ReadTree(work_ / ("v" + std::to_string(v))));
  }
}

// The registry killed (SIGKILL) under a push of a new version, at several moments, and
// restarted on its data directory: the push fails with a clear error or completed, the tag is
// absent or whole, and the same push run again completes.
TEST_F(PushKillE2ETest, ServerKilledUnderAPushLosesNothing) {
  const std::string cache = "push-cache";
  MakeVersion(0, false);
  ASSERT_EQ(Blz({"push", work_ / "v0", Ref(0)}, cache).exit_code, 0);
  int failed_pushes = 0;
  for (int round = 1; round <= 3; ++round) {
    MakeVersion(round, round % 2 == 1);
    const std::string source =
        work_ / ("v" + std::to_string(round) + (round % 2 == 1 ? ".blz" : ""));
    // At the first request, and at two points in the upload.
    const uint64_t bytes = round == 1 ? 1 : uint64_t(round - 1) * 128 * 1024;
    SCOPED_TRACE("round " + std::to_string(round) + ": killed after " + std::to_string(bytes) +
                 " bytes sent");
    std::unique_ptr<FaultProxy> proxy;
    pid_t push = StartPushAndWait(source, round, cache, KillAt{0, bytes}, &proxy,
                                  {"--retries", "0"});
    ::kill(server_.pid, SIGKILL);
    int status = 0;
    ::waitpid(server_.pid, &status, 0);
    server_.pid = -1;
    // What the client sees of a crashed server: the held connection closes.
    if (proxy) proxy->ReleaseByCutting();
    if (push > 0) {
      ::waitpid(push, &status, 0);
      ASSERT_TRUE(WIFEXITED(status));
      if (WEXITSTATUS(status) != 0) {
        ++failed_pushes;
        // The error names what could not be reached.
        EXPECT_NE(ReadFileBytes(work_ / "push.err").find("127.0.0.1:"), std::string::npos)
            << ReadFileBytes(work_ / "push.err");
      }
    }
    proxy.reset();
    server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
    ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "serve.err");
    ExpectTagAbsentOrWhole(round);
    ExpectStoreWhole(cache);
    ProcessResult r = Blz({"push", source, Ref(round)}, cache);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ExpectTagAbsentOrWhole(round);
    ASSERT_TRUE(fs::exists(work_ / ("check-v" + std::to_string(round))));
  }
  EXPECT_GT(failed_pushes, 0);
  for (int v = 0; v <= 3; ++v) ExpectTagAbsentOrWhole(v);
}

// A .blz with one flipped bit in its last tensor, pushed to a real `blz serve` (which verifies
// every archive it is given a manifest for, Blz-Verifies-Archives): refused with exit code 4,
// the error naming the field, the archive and the tensor; no tag is set, the user's file is
// unchanged, the client's store keeps no copy of it. The same with the client's own check
// (--verify-locally), whose error is its own. The intact archive then pushes to the same tag.
TEST_F(PushKillE2ETest, CorruptedArchiveIsRefusedAndLeavesNoTag) {
  const std::string cache = "push-cache";
  MakeVersion(0, true);
  const std::string good = work_ / "v0.blz";
  std::string corrupt_bytes = ReadFileBytes(good);
  std::string tensor;
  {
    auto opened = formats::BlzArchive::Open(good);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    const auto& h = opened->header();
    ASSERT_FALSE(h.tensors.empty());
    corrupt_bytes[size_t(h.data_start + h.tensors.back().offset + 8)] ^= 0x01;
    tensor = h.tensors.back().name;
  }
  const std::string corrupt = work_ / "corrupt.blz";
  WriteFileBytes(corrupt, corrupt_bytes);
  const std::string corrupt_sha = Sha256Hex(corrupt_bytes);
  auto store_holds_corrupt = [&] {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(work_ / (cache + "/blobs"), ec), end;
         !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().find(corrupt_sha) != std::string::npos) return true;
    }
    return false;
  };

  for (const bool local : {false, true}) {
    SCOPED_TRACE(local ? "verified by the client (--verify-locally)" : "verified by the registry");
    std::vector<std::string> args = {"push", corrupt, Ref(0)};
    if (local) args.push_back("--verify-locally");
    ProcessResult r = Blz(args, cache);
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.err.find(tensor), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no manifest was put"), std::string::npos) << r.err;
    if (local) {
      EXPECT_NE(r.err.find("tensor '" + tensor + "'"), std::string::npos) << r.err;
    } else {
      EXPECT_NE(r.err.find("MANIFEST_INVALID: layers[0] sha256:" + corrupt_sha),
                std::string::npos)
          << r.err;
    }
    ExpectTagAbsentOrWhole(0);
    EXPECT_FALSE(fs::exists(work_ / "check-v0"));  // absent, not whole: it was never set
    EXPECT_EQ(ReadFileBytes(corrupt), corrupt_bytes);
    EXPECT_FALSE(store_holds_corrupt());
    ExpectStoreWhole(cache);
  }

  ProcessResult r = Blz({"push", good, Ref(0)}, cache);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectTagAbsentOrWhole(0);
  EXPECT_TRUE(fs::exists(work_ / "check-v0"));
  ExpectStoreWhole(cache);
}

}  // namespace
}  // namespace blz::testing
