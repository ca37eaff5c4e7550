// End-to-end: a patch pull writes the model's files while it applies (issue 28,
// client/pull_stream.h), and stays all-or-nothing: a `blz pull` process killed with SIGKILL at
// any moment, or one that runs out of room (RLIMIT_FSIZE: EFBIG), leaves no half-written file
// visible (the output directory, the store's blobs/, files/ and snapshots/) and the held base
// untouched; the next pull completes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/pack_layout.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class PullStreamE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
    ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "serve.err");
    for (int v : {0, 1}) {
      const std::string dir = work_ / (v == 0 ? "base" : "ft");
      fs::create_directories(dir);
      WriteFileBytes(dir + "/model.safetensors", FineTuneSafetensors(4 << 20, v));  // 16 MiB
      WriteFileBytes(dir + "/config.json", "{\"model_type\":\"test\",\"v\":" +
                                               std::to_string(v) + "}\n");
      ProcessResult r = Blz({"push", "--cache", work_ / "push-cache", dir,
                             server_.addr + "/org/m:" + (v == 0 ? "base" : "ft"), "--json"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      json j = json::parse(r.out, nullptr, false);
      (v == 0 ? base_digest_ : ft_digest_) = j.value("digest", "");
      if (v == 1) archive_size_ = j.value("archive_size", uint64_t{0});
    }
    // The client holds the base; the registry has the patch ready (a first pull computed it).
    ProcessResult r = Blz({"pull", Ref("base")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = Blz({"pull", Ref("base")}, "warm-cache");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = Blz({"pull", Ref("ft"), "--json"}, "warm-cache");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(json::parse(r.out, nullptr, false).value("transfer", ""), "patch") << r.out;
    fs::remove_all(work_ / "warm-cache");
    base_blob_ = HeldArchive("cache", base_digest_);
    ASSERT_EQ(MakeDigest(Sha256Hex(base_blob_)), base_digest_);
  }
  void TearDown() override { StopServe(&server_); }

  std::string Ref(const std::string& tag) { return server_.addr + "/org/m:" + tag; }
  std::string BlobPath(const std::string& cache, const std::string& digest) {
    const std::string hex = digest.substr(7);
    return work_ / (cache + "/blobs/sha256/" + hex.substr(0, 2) + "/" + hex);
  }
  // The bytes of the archive `cache` holds for `digest`: its blob, or, for a version kept as its
  // files (a default pull, client/local_store.h), the archive those files and the kept prefix
  // rebuild. "" when neither is there or the kept form does not lay out.
  std::string HeldArchive(const std::string& cache, const std::string& digest) {
    if (fs::exists(BlobPath(cache, digest))) return ReadFileBytes(BlobPath(cache, digest));
    const std::string hex = digest.substr(7);
    const std::string kept = work_ / (cache + "/unpacked/sha256/" + hex.substr(0, 2) + "/" + hex);
    if (!fs::exists(kept + "/prefix")) return "";
    const std::string prefix = ReadFileBytes(kept + "/prefix");
    const uint64_t size = std::stoull(ReadFileBytes(kept + "/size"));
    Result<formats::ArchiveHeader> h = formats::ParseArchivePrefix(AsBytes(prefix), size);
    if (!h.ok()) return "";
    std::vector<std::string> files;
    for (size_t i = 0; i < h->files.size(); ++i) files.push_back(kept + "/" + std::to_string(i));
    Result<formats::PackLayout> layout =
        formats::PackLayout::FromArchivePrefix(AsBytes(prefix), size, files);
    if (!layout.ok()) return "";
    std::string bytes(size, '\0');
    if (!layout->ReadInto(0, size, reinterpret_cast<uint8_t*>(bytes.data())).ok()) return "";
    return bytes;
  }
  std::map<std::string, std::string> Env(const std::string& cache) {
    return {{"BLZ_CONFIG_DIR", work_ / "config"}, {"BLZ_CACHE_DIR", work_ / cache},
            {"BLZ_TOKEN", server_.token}};
  }
  ProcessResult Blz(std::vector<std::string> args, const std::string& cache = "cache") {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, Env(cache), work_.path());
  }

  // Everything a reader of `cache` and of `out` can see is whole: `out` is absent or the
  // fine-tune; every blob and files/ entry is named by the SHA-256 of its bytes; the base is
  // unchanged; a snapshot of ft, if present, is the fine-tune.
  void ExpectNothingHalfWritten(const std::string& cache, const std::string& out) {
    if (fs::exists(out)) {
      EXPECT_EQ(ReadTree(out), ReadTree(work_ / "ft"));
    }
    for (const char* sub : {"/blobs", "/files"}) {
      std::error_code ec;
      for (fs::recursive_directory_iterator it(work_ / (cache + sub), ec), end;
           !ec && it != end; it.increment(ec)) {
        // A writer's temporary ("<name>.tmp-*") is not a published name.
        if (!it->is_regular_file() ||
            it->path().filename().string().find(".tmp-") != std::string::npos) {
          continue;
        }
        EXPECT_EQ(Sha256Hex(ReadFileBytes(it->path().string())), it->path().filename().string())
            << it->path();
      }
    }
    EXPECT_EQ(HeldArchive(cache, base_digest_), base_blob_);
    // Every version kept as files rebuilds the archive its name says.
    std::error_code ec;
    for (fs::recursive_directory_iterator it(work_ / (cache + "/unpacked/sha256"), ec), end;
         !ec && it != end; it.increment(ec)) {
      if (it.depth() != 1) continue;
      const std::string digest = "sha256:" + it->path().filename().string();
      EXPECT_EQ(MakeDigest(Sha256Hex(HeldArchive(cache, digest))), digest) << it->path();
    }
    const std::string snap = work_ / (cache + "/snapshots/" + server_.addr + "/org/m:ft");
    if (fs::exists(snap)) {
      EXPECT_EQ(ReadTree(snap), ReadTree(work_ / "ft"));
    }
    for (const auto& e : fs::directory_iterator(work_.path())) {
      const std::string name = e.path().filename().string();
      if (name.rfind(".blz-pull-", 0) == 0) {
        // A killed pull's private build directory: never the output's name, removed by the
        // next pull.
        EXPECT_NE(e.path().string(), out);
      }
    }
  }

  TempDir work_;
  ServeProcess server_;
  std::string base_digest_, ft_digest_;
  uint64_t archive_size_ = 0;
  std::string base_blob_;
};

// SIGKILL at a spread of moments (downloading, applying and writing files, publishing): what
// is visible is always whole, and a last pull completes and cleans up.
TEST_F(PullStreamE2ETest, KilledPatchPullLeavesNothingHalfWritten) {
  int killed = 0;
  for (int i = 0; i < 12; ++i) {
    const bool snapshot = i % 2 == 1;
    const std::string cache = "kill-cache";
    if (i == 0 || !fs::exists(work_ / cache)) {
      fs::remove_all(work_ / cache);
      ASSERT_EQ(Blz({"pull", Ref("base")}, cache).exit_code, 0);
      base_blob_ = HeldArchive(cache, base_digest_);
    }
    const std::string out = work_ / ("out" + std::to_string(i));
    std::vector<std::string> argv = {BLZ_BINARY, "pull", Ref("ft")};
    if (!snapshot) argv.insert(argv.end(), {"-o", out});
    pid_t pid = StartProcess(argv, Env(cache), work_ / "kill.out", work_ / "kill.err");
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + 60 * i));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
      ++killed;
    } else {
      EXPECT_EQ(WEXITSTATUS(status), 0) << ReadFileBytes(work_ / "kill.err");
    }
    SCOPED_TRACE("kill " + std::to_string(i) + (snapshot ? " (snapshot)" : " (-o)"));
    ExpectNothingHalfWritten(cache, out);
    if (!WIFSIGNALED(status)) fs::remove_all(work_ / cache);  // completed: start over
  }
  EXPECT_GT(killed, 0);
  // The next pull completes; stale private directories are gone.
  fs::remove_all(work_ / "kill-cache");
  ASSERT_EQ(Blz({"pull", Ref("base")}, "kill-cache").exit_code, 0);
  ProcessResult r = Blz({"pull", Ref("ft"), "--json", "-o", work_ / "final"}, "kill-cache");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out, nullptr, false).value("transfer", ""), "patch") << r.out;
  EXPECT_EQ(ReadTree(work_ / "final"), ReadTree(work_ / "ft"));
  for (const auto& e : fs::directory_iterator(work_.path())) {
    EXPECT_NE(e.path().filename().string().rfind(".blz-pull-", 0), 0u) << e.path();
  }
}

// A file system that fills (RLIMIT_FSIZE below the archive: writes fail with EFBIG): the pull
// fails with a clear error, shows no output, keeps the base, and the next pull completes.
TEST_F(PullStreamE2ETest, FullDiskFailsClearlyAndLosesNothing) {
  ASSERT_GT(archive_size_, 0u);
  const uint64_t limit_kib = archive_size_ / 2 / 1024;  // the patch fits, the archive does not
  const std::string out = work_ / "out";
  std::string cmd = "trap '' XFSZ; ulimit -f " + std::to_string(limit_kib) + "; exec '" +
                    std::string(BLZ_BINARY) + "' pull '" + Ref("ft") + "' -o '" + out + "'";
  ProcessResult r = RunProcess({"/bin/sh", "-c", cmd}, Env("cache"), work_.path());
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(HeldArchive("cache", ft_digest_), "");
  ExpectNothingHalfWritten("cache", out);

  // The same in snapshot mode.
  cmd = "trap '' XFSZ; ulimit -f " + std::to_string(limit_kib) + "; exec '" +
        std::string(BLZ_BINARY) + "' pull '" + Ref("ft") + "'";
  r = RunProcess({"/bin/sh", "-c", cmd}, Env("cache"), work_.path());
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(work_ / ("cache/snapshots/" + server_.addr + "/org/m:ft")));
  ExpectNothingHalfWritten("cache", out);

  r = Blz({"pull", Ref("ft"), "--json", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadTree(out), ReadTree(work_ / "ft"));
}

}  // namespace
}  // namespace blz::testing
