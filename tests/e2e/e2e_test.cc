// End-to-end: the main job on real model files. Starts a real `blz serve` on a free loopback
// port with a temporary data directory, pushes two versions of a model as two tags of one
// repository, pulls the first into a fresh client store, then pulls the second and checks that
// (a) the client downloaded the patch, not the full model, and (b) the unpacked files are
// byte-identical to the originals. Also: failing pushes and pulls leave the registry unchanged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/e2e/e2e_backends.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;

// Every regular file below `dir`, relative path -> bytes.
// Relative path -> size of every file below `dir` (a cheap fingerprint of the registry's data).
std::map<std::string, uintmax_t> ListTree(const std::string& dir) {
  std::map<std::string, uintmax_t> out;
  if (!fs::is_directory(dir)) return out;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = e.file_size();
  }
  return out;
}

uint64_t TreeBytes(const std::string& dir) {
  uint64_t n = 0;
  for (auto& [p, size] : ListTree(dir)) n += size;
  return n;
}

class RegistryE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = new TempDir();
    std::string data = *work_ / "registry";
    server_pid_ = StartServeProcess({BLZ_BINARY, "serve", "--data", data, "--listen", "127.0.0.1:0"}, {},
                               *work_ / "serve.out", *work_ / "serve.err");
    ASSERT_GT(server_pid_, 0);
    for (int i = 0; i < 300 && addr_.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::string out = ReadFileBytes(*work_ / "serve.out");
      auto l = out.find("listening on http://");
      auto t = out.find("admin token: ");
      if (l != std::string::npos && out.find('\n', l) != std::string::npos && t != std::string::npos) {
        auto s = l + std::string("listening on http://").size();
        addr_ = out.substr(s, out.find('\n', l) - s);
        auto ts = t + std::string("admin token: ").size();
        token_ = out.substr(ts, out.find('\n', t) - ts);
      }
    }
    ASSERT_FALSE(addr_.empty()) << "server did not start: " << ReadFileBytes(*work_ / "serve.err");
  }

  static void TearDownTestSuite() {
    if (server_pid_ > 0) {
      ::kill(server_pid_, SIGTERM);
      int status = 0;
      ::waitpid(server_pid_, &status, 0);
    }
    delete work_;
    work_ = nullptr;
  }

  // A client with its own config dir (logged in unless `anonymous`) and cache dir.
  std::map<std::string, std::string> ClientEnv(const std::string& name, bool anonymous = false) {
    std::map<std::string, std::string> env = {{"BLZ_CONFIG_DIR", *work_ / ("config-" + name)},
                                              {"BLZ_CACHE_DIR", *work_ / ("cache-" + name)}};
    if (!anonymous) {
      ProcessResult r = Blz({"login", addr_, "--token", token_}, env);
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    return env;
  }

  ProcessResult Blz(std::vector<std::string> args, const std::map<std::string, std::string>& env) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, env, work_->path());
  }

  ProcessResult Curl(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/curl", "-sS"});
    return RunProcess(args, {}, work_->path());
  }

  // Starts another `blz serve` on data directory `data` with `extra` flags; its stdout goes to
  // <work>/<name>.out. Sets *addr (empty if it did not start within 15 s) and, on its first
  // start, *token.
  pid_t StartExtraServer(const std::string& data, const std::vector<std::string>& extra,
                         const std::string& name, std::string* addr, std::string* token) {
    const std::string out = *work_ / (name + ".out");
    fs::remove(out);
    std::vector<std::string> argv = {BLZ_BINARY, "serve", "--data", data, "--listen",
                                     "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_t pid = StartServeProcess(argv, {}, out, *work_ / (name + ".err"));
    addr->clear();
    for (int i = 0; i < 300 && addr->empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::string text = ReadFileBytes(out);
      auto l = text.find("listening on http://");
      if (l == std::string::npos || text.find('\n', l) == std::string::npos) continue;
      auto t = text.find("admin token: ");
      if (t != std::string::npos) *token = text.substr(t + 13, 64);
      *addr = text.substr(l + 20, text.find('\n', l) - l - 20);
    }
    return pid;
  }

  // GET /v2/_blz/storage (docs/registry-api.md, "Storage") of the shared server, or of `addr`
  // with its admin `token` (the endpoint is for the admin).
  nlohmann::json StorageStatus(const std::string& addr = "", const std::string& token = "") {
    ProcessResult r = Curl({"--fail-with-body", "-H",
                            "Authorization: Bearer " + (addr.empty() ? token_ : token),
                            "http://" + (addr.empty() ? addr_ : addr) + "/v2/_blz/storage"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }

  // Waits until the server has no archive queued for compression (pushes store archives raw
  // and compress them in the background, which changes the blob store).
  void WaitForStorageIdle() {
    for (int i = 0; i < 1200; ++i) {  // at most ~2 min
      nlohmann::json st = StorageStatus();
      if (st.value("pending", uint64_t(1)) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the registry's storage thread did not become idle: "
                  << StorageStatus().dump();
  }

  std::map<std::string, uintmax_t> RegistryFiles() {
    WaitForStorageIdle();
    return ListTree(*work_ / "registry/blobs");
  }

  // Pushes `base_dir` and `ft_dir` as two tags of `repo`, pulls base then ft into a fresh client
  // store, and checks the fine-tune pull used a patch and reproduced every file.
  void PushPullPair(const std::string& repo, const std::string& base_dir, const std::string& ft_dir) {
    std::string slug = repo;
    std::replace(slug.begin(), slug.end(), '/', '-');
    auto pusher = ClientEnv(slug + "-pusher");
    for (auto [dir, tag] : {std::pair{base_dir, "base"}, std::pair{ft_dir, "ft"}}) {
      ProcessResult r = Blz({"push", dir, addr_ + "/" + repo + ":" + tag}, pusher);
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    }
    auto puller = ClientEnv(slug + "-puller", /*anonymous=*/true);
    std::string out_base = *work_ / (slug + "-out-base");
    ProcessResult r1 = Blz({"pull", addr_ + "/" + repo + ":base", "-o", out_base, "--json"}, puller);
    ASSERT_EQ(r1.exit_code, 0) << r1.out << r1.err;
    auto j1 = nlohmann::json::parse(r1.out);
    EXPECT_FALSE(j1.at("used_patch").get<bool>()) << "the first pull has no base to patch from";
    EXPECT_EQ(ReadTree(out_base), ReadTree(base_dir));

    std::string out_ft = *work_ / (slug + "-out-ft");
    ProcessResult r2 = Blz({"pull", addr_ + "/" + repo + ":ft", "-o", out_ft, "--json"}, puller);
    ASSERT_EQ(r2.exit_code, 0) << r2.out << r2.err;
    auto j2 = nlohmann::json::parse(r2.out);
    // (a) the client downloaded the patch, not the full model.
    EXPECT_TRUE(j2.at("used_patch").get<bool>());
    EXPECT_EQ(j2.at("patch_from").get<std::string>(), j1.at("digest").get<std::string>());
    uint64_t downloaded = j2.at("bytes_downloaded").get<uint64_t>();
    uint64_t full = j2.at("full_bytes").get<uint64_t>();
    EXPECT_GT(downloaded, 0u);
    EXPECT_LT(downloaded, full);
    EXPECT_LT(downloaded, TreeBytes(ft_dir));
    // (b) byte-identical files.
    EXPECT_EQ(ReadTree(out_ft), ReadTree(ft_dir));
    std::cout << "[ e2e      ] " << repo << ": full " << full << " bytes, downloaded " << downloaded
              << " bytes (" << (100.0 * double(downloaded) / double(full)) << "%)\n";
  }

  static TempDir* work_;
  static pid_t server_pid_;
  static std::string addr_;
  static std::string token_;
};

TempDir* RegistryE2ETest::work_ = nullptr;
pid_t RegistryE2ETest::server_pid_ = -1;
std::string RegistryE2ETest::addr_;
std::string RegistryE2ETest::token_;

TEST_F(RegistryE2ETest, TinyGpt2FineTunePullsOnlyAPatch) {
  BLZ_REQUIRE_CORPUS(corpus);
  PushPullPair("e2e/tiny-gpt2", corpus + "/tiny-gpt2/base", corpus + "/tiny-gpt2/ft-v1");
}

TEST_F(RegistryE2ETest, RobertaLoraCheckpointPullsOnlyAPatch) {
  BLZ_REQUIRE_CORPUS(corpus);
  PushPullPair("e2e/roberta-lora", corpus + "/roberta-lora/checkpoint-2000",
               corpus + "/roberta-lora/checkpoint-2400");
}

TEST_F(RegistryE2ETest, GeneratedModelPairPullsOnlyAPatch) {
  // Runs everywhere, corpus or not: the demo's generated pair.
  std::string models = *work_ / "generated";
  ProcessResult g = RunProcess({"/usr/bin/python3", std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py", models},
                               {}, work_->path());
  ASSERT_EQ(g.exit_code, 0) << g.err;
  PushPullPair("e2e/generated", models + "/base", models + "/ft");
}

// issue 12: `--progress plain` (for CI logs) names every phase of a push and of a patch pull on
// stderr, one line each, and never writes '\r'; `--quiet` writes none of them; the default on a
// non-terminal (these pipes) writes no '\r' either.
TEST_F(RegistryE2ETest, PlainProgressNamesEveryPhaseWithoutCarriageReturns) {
  std::string models = *work_ / "progress-generated";
  ProcessResult g = RunProcess(
      {"/usr/bin/python3", std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py", models},
      {}, work_->path());
  ASSERT_EQ(g.exit_code, 0) << g.err;
  // A file of its own, so that the registry (which holds the generated pair from another
  // test) lacks this base and it is really uploaded, not mounted.
  WriteFileBytes(models + "/base/progress-test.txt", "issue 12");
  auto pusher = ClientEnv("progress-pusher");
  const std::string repo = addr_ + "/e2e/progress";
  ProcessResult pb = Blz({"push", "--progress", "plain", models + "/base", repo + ":base"}, pusher);
  ASSERT_EQ(pb.exit_code, 0) << pb.err;
  EXPECT_NE(pb.err.find("packing "), std::string::npos) << pb.err;
  EXPECT_NE(pb.err.find("pushing e2e/progress:base"), std::string::npos) << pb.err;
  EXPECT_EQ(pb.err.find('\r'), std::string::npos) << pb.err;
  ProcessResult pf = Blz({"push", models + "/ft", repo + ":ft", "--progress=plain"}, pusher);
  ASSERT_EQ(pf.exit_code, 0) << pf.err;

  auto puller = ClientEnv("progress-puller", /*anonymous=*/true);
  ProcessResult r1 = Blz({"pull", "--progress", "plain", repo + ":base"}, puller);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_NE(r1.err.find("\napplying full patch  "), std::string::npos) << r1.err;
  ProcessResult r2 = Blz({"pull", repo + ":ft", "--progress", "plain", "-o",
                          *work_ / "progress-out-ft", "--json"}, puller);
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_TRUE(nlohmann::json::parse(r2.out).at("used_patch").get<bool>()) << r2.out;
  EXPECT_EQ(r2.err.find('\r'), std::string::npos) << r2.err;
  // One line per phase, in order, each ending at 100%.
  size_t at = 0;
  // (A patch pull verifies and writes the files while it applies: no separate phases.)
  for (const std::string_view phase : {"pulling e2e/progress:ft (patch)  ", "applying patch  "}) {
    size_t pos = r2.err.find(phase, at);
    ASSERT_NE(pos, std::string::npos) << phase << " missing or out of order in:\n" << r2.err;
    const std::string line = r2.err.substr(pos, r2.err.find('\n', pos) - pos);
    EXPECT_NE(line.find("100%"), std::string::npos) << line;
    at = pos + phase.size();
  }
  EXPECT_EQ(ReadTree(*work_ / "progress-out-ft"), ReadTree(models + "/ft"));

  // --quiet: no phase lines; the default off a terminal: no frames.
  auto quiet_env = ClientEnv("progress-quiet", /*anonymous=*/true);
  ProcessResult q = Blz({"pull", "-q", repo + ":ft", "-o", *work_ / "progress-out-q"}, quiet_env);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  for (const char* phase : {"pulling ", "applying", "verifying", "unpacking"}) {
    EXPECT_EQ(q.err.find(phase), std::string::npos) << q.err;
  }
  auto default_env = ClientEnv("progress-default", /*anonymous=*/true);
  ProcessResult d = Blz({"pull", repo + ":ft", "--progress", "-o", *work_ / "progress-out-d"},
                        default_env);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.err.find("applying full patch  "), std::string::npos)
      << "a bare --progress draws: " << d.err;
  EXPECT_EQ(d.err.find('\r'), std::string::npos) << d.err;
  ProcessResult bad = Blz({"pull", repo + ":ft", "--progress=fancy"}, default_env);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--progress"), std::string::npos) << bad.err;
}

TEST_F(RegistryE2ETest, FreshPullDownloadsTheFullPatchAndTheRegistryKeepsOnlyIt) {
  // issue 3: with no base held, a pull fetches the archive's full patch (compressed per
  // tensor), not the raw archive; the registry stores that full patch instead of the archive.
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string src = corpus + "/roberta-lora/checkpoint-2400";
  auto pusher = ClientEnv("full-pusher");
  ProcessResult p = Blz({"push", src, addr_ + "/e2e/full:v1", "--json"}, pusher);
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  const std::string digest = nlohmann::json::parse(p.out).at("digest").get<std::string>();
  const std::string hex = digest.substr(7);

  // The push returned at once; the archive is compressed in the background, verified, and then
  // its raw blob is deleted.
  WaitForStorageIdle();
  nlohmann::json st = StorageStatus();
  EXPECT_GE(st.at("compressed").get<uint64_t>(), 1u) << st.dump();
  EXPECT_EQ(st.at("failed").get<uint64_t>(), 0u) << st.dump();
  EXPECT_FALSE(E2EBlobStored(*work_ / "registry", digest));  // raw archive gone (fs or bucket)

  auto puller = ClientEnv("full-puller", /*anonymous=*/true);
  const std::string out = *work_ / "full-out";
  ProcessResult r = Blz({"pull", addr_ + "/e2e/full:v1", "-o", out, "--json"}, puller);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("transfer").get<std::string>(), "full-patch") << r.out << r.err;
  EXPECT_TRUE(j.at("used_full_patch").get<bool>());
  EXPECT_FALSE(j.at("used_patch").get<bool>());
  const uint64_t downloaded = j.at("bytes_downloaded").get<uint64_t>();
  const uint64_t full = j.at("full_bytes").get<uint64_t>();
  EXPECT_GT(downloaded, 0u);
  EXPECT_LT(downloaded, full);
  EXPECT_EQ(ReadTree(out), ReadTree(src));
  std::cout << "[ e2e      ] fresh pull of roberta checkpoint-2400: archive " << full
            << " bytes, full patch downloaded " << downloaded << " bytes ("
            << (100.0 * double(downloaded) / double(full)) << "%)\n";

  // --no-patch still gets the raw archive: rebuilt by the registry from the full patch.
  auto raw_puller = ClientEnv("full-raw-puller", /*anonymous=*/true);
  const std::string raw_out = *work_ / "full-raw-out";
  ProcessResult rr = Blz({"pull", addr_ + "/e2e/full:v1", "-o", raw_out, "--json", "--no-patch"},
                         raw_puller);
  ASSERT_EQ(rr.exit_code, 0) << rr.out << rr.err;
  auto jr = nlohmann::json::parse(rr.out);
  EXPECT_EQ(jr.at("transfer").get<std::string>(), "archive");
  EXPECT_EQ(jr.at("bytes_downloaded").get<uint64_t>(), full);
  EXPECT_EQ(ReadTree(raw_out), ReadTree(src));
  // A range of the rebuilt blob.
  const std::string archive = ReadFileBytes(jr.at("archive_path").get<std::string>());
  ProcessResult range = Curl({"--fail-with-body", "-r", "1000-1999",
                              "http://" + addr_ + "/v2/e2e/full/blobs/" + digest});
  ASSERT_EQ(range.exit_code, 0) << range.err;
  EXPECT_TRUE(range.out == archive.substr(1000, 1000));
  EXPECT_FALSE(E2EBlobStored(*work_ / "registry", digest));  // raw archive gone (fs or bucket)
}

TEST_F(RegistryE2ETest, ServerKilledWhileCompressingLosesNothing) {
  // A second server on its own data directory, killed with SIGKILL at several moments after a
  // push (while it compresses the archive in the background) and restarted each time: every
  // restart serves the version byte for byte, and in the end only the full patch is stored.
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string src = corpus + "/roberta-lora/checkpoint-1000";
  const std::string data = *work_ / "kill-registry";
  std::string token;
  auto start = [&](std::string* addr) -> pid_t {
    return StartExtraServer(data, {}, "kill-serve", addr, &token);
  };
  auto kill9 = [](pid_t pid) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  };
  std::string addr;
  pid_t pid = start(&addr);
  ASSERT_FALSE(addr.empty()) << ReadFileBytes(*work_ / "kill-serve.err");
  std::map<std::string, std::string> env = {{"BLZ_CONFIG_DIR", *work_ / "config-kill"},
                                            {"BLZ_CACHE_DIR", *work_ / "cache-kill-pusher"}};
  ASSERT_EQ(Blz({"login", addr, "--token", token}, env).exit_code, 0);
  ProcessResult p = Blz({"push", src, addr + "/e2e/killed-server:v1", "--json"}, env);
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  const std::string hex = nlohmann::json::parse(p.out).at("digest").get<std::string>().substr(7);
  const auto want = ReadTree(src);
  int round = 0;
  for (int delay_ms : {0, 20, 60, 150}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill9(pid);
    addr.clear();
    pid = start(&addr);
    ASSERT_FALSE(addr.empty()) << ReadFileBytes(*work_ / "kill-serve.err");
    // Whatever state the kill left, the version is served exactly (raw or rebuilt).
    std::map<std::string, std::string> puller = {
        {"BLZ_CONFIG_DIR", *work_ / "config-kill-anon"},
        {"BLZ_CACHE_DIR", *work_ / ("cache-kill-" + std::to_string(++round))}};
    const std::string out = *work_ / ("kill-out-" + std::to_string(round));
    ProcessResult r =
        Blz({"pull", addr + "/e2e/killed-server:v1", "-o", out, "--no-patch"}, puller);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(ReadTree(out), want);
  }
  // Left alone, the restarted server finishes: the raw archive is gone, a fresh pull gets the
  // full patch, nothing temporary is left.
  bool raw_gone = false;
  for (int i = 0; i < 600 && !raw_gone; ++i) {
    raw_gone = !E2EBlobStored(data, "sha256:" + hex);
    if (!raw_gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(raw_gone);
  std::map<std::string, std::string> puller = {{"BLZ_CONFIG_DIR", *work_ / "config-kill-anon"},
                                               {"BLZ_CACHE_DIR", *work_ / "cache-kill-final"}};
  ProcessResult r = Blz({"pull", addr + "/e2e/killed-server:v1", "-o", *work_ / "kill-out-final",
                         "--json"}, puller);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("transfer").get<std::string>(), "full-patch");
  EXPECT_EQ(ReadTree(*work_ / "kill-out-final"), want);
  kill9(pid);
  for (const auto& e : fs::directory_iterator(data + "/cache/sha256")) {
    EXPECT_EQ(e.path().filename().string().size(), 64u) << "temporary file left: " << e.path();
  }
}

// `blz serve --keep-raw-archives --cache-size 1MB`: the storage endpoint reports both
// settings, a pushed archive gets its verified full patch but its raw blob stays, and a fresh
// pull still downloads the (smaller) full patch. A malformed size is refused before anything
// starts.
TEST_F(RegistryE2ETest, ServeStorageFlagsKeepRawArchivesAndBoundTheCache) {
  BLZ_REQUIRE_CORPUS(corpus);
  ProcessResult bad =
      Blz({"serve", "--data", *work_ / "flags-bad", "--cache-size", "lots"}, {});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--cache-size"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(*work_ / "flags-bad"));

  const std::string data = *work_ / "flags-registry";
  std::string addr, token;
  pid_t pid = StartExtraServer(data, {"--keep-raw-archives", "--cache-size", "1MB"},
                               "flags-serve", &addr, &token);
  ASSERT_FALSE(addr.empty()) << ReadFileBytes(*work_ / "flags-serve.err");
  nlohmann::json st = StorageStatus(addr, token);
  EXPECT_EQ(st.value("drop_raw_archives", true), false) << st.dump();
  EXPECT_EQ(st["cache"].value("limit", uint64_t(0)), 1000000u) << st.dump();

  std::map<std::string, std::string> env = {{"BLZ_CONFIG_DIR", *work_ / "config-flags"},
                                            {"BLZ_CACHE_DIR", *work_ / "cache-flags-pusher"}};
  ASSERT_EQ(Blz({"login", addr, "--token", token}, env).exit_code, 0);
  const std::string src = corpus + "/tiny-gpt2/base";
  ProcessResult p = Blz({"push", src, addr + "/e2e/flags:v1", "--json"}, env);
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  const std::string hex = nlohmann::json::parse(p.out).at("digest").get<std::string>().substr(7);
  for (int i = 0; i < 1200 && StorageStatus(addr, token).value("pending", uint64_t(1)) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  st = StorageStatus(addr, token);
  EXPECT_EQ(st.value("pending", uint64_t(1)), 0u) << st.dump();
  EXPECT_EQ(st.value("full_patches_computed", uint64_t(0)), 1u) << st.dump();
  EXPECT_TRUE(E2EBlobStored(data, "sha256:" + hex));  // the raw archive stays (fs or bucket)

  std::map<std::string, std::string> puller = {{"BLZ_CONFIG_DIR", *work_ / "config-flags-anon"},
                                               {"BLZ_CACHE_DIR", *work_ / "cache-flags-puller"}};
  ProcessResult r = Blz({"pull", addr + "/e2e/flags:v1", "-o", *work_ / "flags-out", "--json"},
                        puller);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("transfer").get<std::string>(), "full-patch");
  EXPECT_EQ(ReadTree(*work_ / "flags-out"), ReadTree(src));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// A second `blz serve` on the shared server's data directory refuses to start (exit code 6, a
// one-line error naming the directory and the running server's PID) and leaves it alone.
TEST_F(RegistryE2ETest, SecondServerOnTheSameDataDirectoryRefusesToStart) {
  const std::string data = *work_ / "registry";
  ProcessResult r = Blz({"serve", "--data", data, "--listen", "127.0.0.1:0"}, {});
  EXPECT_EQ(r.exit_code, 6) << r.out << r.err;
  EXPECT_EQ(r.out.find("listening on"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "blz: error: unavailable: data directory '" + data +
                       "' is in use by another blz serve: '" + data +
                       "/blz.lock' is locked by process " + std::to_string(server_pid_) + "\n");
  // The running server still answers.
  ProcessResult ping = Curl({"--fail", "http://" + addr_ + "/v2/_catalog"});
  EXPECT_EQ(ping.exit_code, 0) << ping.err;
}

// `blz serve --config FILE`: the file sets the data directory, the address and the log format;
// a flag on the command line (--metrics) overrides the file's `metrics = false`. The access log
// is JSON, one object per request; /metrics answers.
TEST_F(RegistryE2ETest, ServeReadsItsOptionsFromAConfigFile) {
  const std::string data = *work_ / "config-registry";
  const std::string config = *work_ / "serve.toml";
  WriteFileBytes(config, "# blz serve\ndata = \"" + data +
                             "\"\nlisten = \"127.0.0.1:0\"\nlog-format = \"json\"\n"
                             "metrics = false\ncache_size = \"1MB\"\n");
  const std::string out = *work_ / "config-serve.out";
  const std::string err = *work_ / "config-serve.err";
  pid_t pid = StartServeProcess({BLZ_BINARY, "serve", "--config", config, "--metrics"}, {}, out, err);
  ASSERT_GT(pid, 0);
  std::string addr, token;
  for (int i = 0; i < 300 && addr.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string text = ReadFileBytes(out);
    auto l = text.find("listening on http://");
    if (l == std::string::npos || text.find('\n', l) == std::string::npos) continue;
    addr = text.substr(l + 20, text.find('\n', l) - l - 20);
    if (auto t = text.find("admin token: "); t != std::string::npos) {
      token = text.substr(t + 13, text.find('\n', t) - t - 13);
    }
  }
  ASSERT_FALSE(addr.empty()) << ReadFileBytes(err);
  EXPECT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;
  EXPECT_EQ(fs::exists(data + "/blz.db"), !E2EMetadataIsPostgres());
  EXPECT_TRUE(fs::exists(data + "/blz.lock"));
  EXPECT_EQ(StorageStatus(addr, token)["cache"].value("limit", uint64_t(0)), 1000000u);
  ProcessResult metrics = Curl({"--fail", "http://" + addr + "/metrics"});
  EXPECT_EQ(metrics.exit_code, 0) << metrics.err;
  EXPECT_NE(metrics.out.find("# TYPE blz_http_requests_total counter"), std::string::npos)
      << metrics.out;
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  // The access log: one JSON object per line, the storage request first.
  std::string log = ReadFileBytes(err);
  std::vector<nlohmann::json> lines;
  for (size_t pos = 0, nl; (nl = log.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    auto j = nlohmann::json::parse(log.substr(pos, nl - pos), nullptr, false);
    if (j.is_object() && j.contains("path")) lines.push_back(j);
  }
  ASSERT_EQ(lines.size(), 2u) << log;
  EXPECT_EQ(lines[0]["path"], "/v2/_blz/storage");
  EXPECT_EQ(lines[0]["status"], 200);
  EXPECT_EQ(lines[0]["user"], "admin");  // the token that authenticated it
  EXPECT_EQ(lines[1]["user"], "-");      // /metrics: anonymous
  EXPECT_EQ(lines[0]["client"].get<std::string>().rfind("127.0.0.1:", 0), 0u);
  EXPECT_EQ(lines[1]["path"], "/metrics");
  EXPECT_EQ(lines[1]["aborted"], false);
}

TEST_F(RegistryE2ETest, PushWithoutTokenFailsAndChangesNothing) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto before = RegistryFiles();
  auto anon = ClientEnv("anonymous-pusher", /*anonymous=*/true);
  ProcessResult r = Blz({"push", corpus + "/tiny-gpt2/base", addr_ + "/e2e/no-token:v1"}, anon);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("UNAUTHORIZED"), std::string::npos) << r.err;
  EXPECT_EQ(RegistryFiles(), before);
  ProcessResult tags = Curl({"http://" + addr_ + "/v2/e2e/no-token/tags/list"});
  EXPECT_EQ(tags.out.find("v1"), std::string::npos) << tags.out;
}

// Auth as OCI registries do it (docs/registry-api.md, "Authentication and authorization"):
// `blz login` checks the token, the admin makes a scoped token with `blz token create`, the
// scope holds for pushes, Basic credentials and the token endpoint work with curl, `blz token
// revoke` takes effect at once, and `blz logout` forgets the stored token.
TEST_F(RegistryE2ETest, ScopedTokensLoginAndLogoutThroughTheCli) {
  const std::string cfg = *work_ / "config-auth";
  std::map<std::string, std::string> env = {{"BLZ_TOKEN", ""},
                                            {"BLZ_CONFIG_DIR", cfg},
                                            {"BLZ_CACHE_DIR", *work_ / "cache-auth"}};
  // A wrong token is refused and nothing is stored.
  ProcessResult bad = Blz({"login", addr_, "--token", std::string(64, 'a')}, env);
  EXPECT_EQ(bad.exit_code, 5) << bad.err;
  EXPECT_NE(bad.err.find("rejected the token (nothing stored)"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(cfg + "/auth.json"));
  ProcessResult admin_login = Blz({"login", addr_, "--token", token_}, env);
  ASSERT_EQ(admin_login.exit_code, 0) << admin_login.err;
  EXPECT_EQ(fs::status(cfg + "/auth.json").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  // The admin creates a token for one namespace; it is printed once, on stdout.
  ProcessResult created = Blz({"token", "create", "e2e-ci", "--scope", "e2e/scoped/*:pull,push",
                               "--expires", "1d", "--registry", addr_},
                              env);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string ci = created.out;
  while (!ci.empty() && ci.back() == '\n') ci.pop_back();
  ASSERT_EQ(ci.size(), 64u) << created.out;
  ProcessResult listed = Blz({"token", "list", "--registry", addr_, "--json"}, env);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  nlohmann::json tokens = nlohmann::json::parse(listed.out).at("tokens");
  std::vector<std::string> names;
  for (const auto& t : tokens) names.push_back(t.at("name"));
  EXPECT_NE(std::find(names.begin(), names.end(), "admin"), names.end()) << listed.out;
  EXPECT_NE(std::find(names.begin(), names.end(), "e2e-ci"), names.end()) << listed.out;
  EXPECT_EQ(listed.out.find(ci), std::string::npos);
  ProcessResult dup = Blz({"token", "create", "e2e-ci", "--scope", "*:pull", "--registry", addr_},
                          env);
  EXPECT_NE(dup.exit_code, 0);
  EXPECT_NE(dup.err.find("already exists"), std::string::npos) << dup.err;
  ProcessResult bad_scope =
      Blz({"token", "create", "x", "--scope", "e2e/*:pul", "--registry", addr_}, env);
  EXPECT_EQ(bad_scope.exit_code, 2) << bad_scope.err;
  EXPECT_NE(bad_scope.err.find("unknown action 'pul'"), std::string::npos) << bad_scope.err;

  // The scoped token pushes inside its namespace only.
  const std::string models = *work_ / "generated-auth";
  ProcessResult g = RunProcess({"/usr/bin/python3",
                                std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py", models},
                               {}, work_->path());
  ASSERT_EQ(g.exit_code, 0) << g.err;
  std::map<std::string, std::string> ci_env = env;
  ci_env["BLZ_TOKEN"] = ci;
  ProcessResult inside = Blz({"push", models + "/base", addr_ + "/e2e/scoped/m:v1"}, ci_env);
  EXPECT_EQ(inside.exit_code, 0) << inside.err;
  ProcessResult outside = Blz({"push", models + "/base", addr_ + "/e2e/unscoped:v1"}, ci_env);
  EXPECT_EQ(outside.exit_code, 5) << outside.err;
  EXPECT_NE(outside.err.find("DENIED"), std::string::npos) << outside.err;

  // Docker-style clients: the challenge names the token endpoint; Basic works everywhere; the
  // token endpoint issues a Bearer access token.
  ProcessResult challenge = Curl({"-D", "-", "-o", "/dev/null", "http://" + addr_ + "/v2/"});
  EXPECT_NE(challenge.out.find("401"), std::string::npos) << challenge.out;
  EXPECT_NE(challenge.out.find("Bearer realm=\"http://" + addr_ + "/v2/_blz/token\""),
            std::string::npos)
      << challenge.out;
  ProcessResult basic = Curl({"-u", "ci:" + ci, "-o", "/dev/null", "-w", "%{http_code}",
                              "http://" + addr_ + "/v2/"});
  EXPECT_EQ(basic.out, "200");
  ProcessResult issued = Curl({"--fail-with-body", "-u", "ci:" + ci,
                               "http://" + addr_ +
                                   "/v2/_blz/token?service=blz&scope=repository:e2e/scoped/m:pull"});
  ASSERT_EQ(issued.exit_code, 0) << issued.out << issued.err;
  const std::string access = nlohmann::json::parse(issued.out).at("token");
  ProcessResult tags = Curl({"--fail-with-body", "-H", "Authorization: Bearer " + access,
                             "http://" + addr_ + "/v2/e2e/scoped/m/tags/list"});
  EXPECT_EQ(tags.exit_code, 0) << tags.out;
  EXPECT_NE(tags.out.find("v1"), std::string::npos) << tags.out;

  // Revocation is immediate, for the token and its access tokens.
  ProcessResult revoked = Blz({"token", "revoke", "e2e-ci", "--registry", addr_}, env);
  ASSERT_EQ(revoked.exit_code, 0) << revoked.err;
  ProcessResult after = Blz({"push", models + "/ft", addr_ + "/e2e/scoped/m:v2"}, ci_env);
  EXPECT_EQ(after.exit_code, 5) << after.err;
  ProcessResult stale = Curl({"-o", "/dev/null", "-w", "%{http_code}", "-H",
                              "Authorization: Bearer " + access,
                              "http://" + addr_ + "/v2/e2e/scoped/m/tags/list"});
  EXPECT_EQ(stale.out, "401");
  EXPECT_EQ(Blz({"token", "revoke", "e2e-ci", "--registry", addr_}, env).exit_code, 3);

  // Logout forgets the stored token (and only it); a second logout has nothing to do.
  ProcessResult out = Blz({"logout", addr_}, env);
  EXPECT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(ReadFileBytes(cfg + "/auth.json").find(token_), std::string::npos);
  EXPECT_EQ(Blz({"token", "list", "--registry", addr_}, env).exit_code, 5);
  ProcessResult again = Blz({"logout", addr_}, env);
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.err.find("no token stored"), std::string::npos) << again.err;
}

TEST_F(RegistryE2ETest, UploadWithWrongDigestIsRejectedAndStoresNothing) {
  auto before = RegistryFiles();
  std::string wrong = "sha256:" + std::string(64, '0');
  std::string body = *work_ / "blob.bin";
  WriteFileBytes(body, "these bytes do not hash to zeros");
  ProcessResult r = Curl({"-X", "POST", "-H", "Authorization: Bearer " + token_, "--data-binary", "@" + body,
                          "-w", "\n%{http_code}", "http://" + addr_ + "/v2/e2e/wrong-digest/blobs/uploads/?digest=" + wrong});
  EXPECT_NE(r.out.find("DIGEST_INVALID"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n400"), std::string::npos) << r.out;
  EXPECT_EQ(RegistryFiles(), before);
  ProcessResult head = Curl({"-I", "-o", "/dev/null", "-w", "%{http_code}",
                             "http://" + addr_ + "/v2/e2e/wrong-digest/blobs/" + wrong});
  EXPECT_EQ(head.out, "404");
}

TEST_F(RegistryE2ETest, PullOfMissingTagFailsClearlyAndWritesNothing) {
  auto before = RegistryFiles();
  auto env = ClientEnv("missing-tag", /*anonymous=*/true);
  std::string out = *work_ / "missing-out";
  ProcessResult r = Blz({"pull", addr_ + "/e2e/nothing-here:v9", "-o", out}, env);
  EXPECT_NE(r.exit_code, 0);
  // The repository itself does not exist: it is named as missing, not the tag (issue 24).
  EXPECT_NE(r.err.find("NAME_UNKNOWN: no repository 'e2e/nothing-here'"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(RegistryFiles(), before);
}

TEST_F(RegistryE2ETest, KilledPullLeavesNoPartialOutputAndRerunCompletes) {
  // A larger generated model so the kill is likely to land mid-transfer; the assertions hold
  // wherever it lands: the output is either absent or complete, and a rerun completes.
  BLZ_REQUIRE_CORPUS(corpus);
  auto pusher = ClientEnv("kill-pusher");
  ProcessResult p = Blz({"push", corpus + "/roberta-lora/checkpoint-500", addr_ + "/e2e/killed:v1"}, pusher);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto env = ClientEnv("kill-puller", /*anonymous=*/true);
  std::string out = *work_ / "killed-out";
  for (int delay_ms : {1, 20, 80}) {
    pid_t pid = StartProcess({BLZ_BINARY, "pull", addr_ + "/e2e/killed:v1", "-o", out}, env,
                             *work_ / "kill.out", *work_ / "kill.err");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (fs::exists(out)) {
      EXPECT_EQ(ReadTree(out), ReadTree(corpus + "/roberta-lora/checkpoint-500"));
      fs::remove_all(out);
    }
  }
  ProcessResult r = Blz({"pull", addr_ + "/e2e/killed:v1", "-o", out}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadTree(out), ReadTree(corpus + "/roberta-lora/checkpoint-500"));
  // No temp files left next to the output.
  for (auto& e : fs::directory_iterator(work_->path())) {
    EXPECT_EQ(e.path().filename().string().find("killed-out."), std::string::npos) << e.path();
  }
}

TEST_F(RegistryE2ETest, StructuresAndValueDiffsThroughTheRealServer) {
  // Two versions of one structure (the generated base, and the base with another config.json:
  // a different archive, the same tensors) and one of another (the fine-tune adds a tensor).
  std::string models = *work_ / "structures-models";
  ProcessResult g = RunProcess({"/usr/bin/python3", std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py", models},
                               {}, work_->path());
  ASSERT_EQ(g.exit_code, 0) << g.err;
  fs::copy(models + "/base", models + "/base-config", fs::copy_options::recursive);
  WriteFileBytes(models + "/base-config/config.json", "{\"model_type\": \"gpt2\", \"edited\": true}\n");
  auto pusher = ClientEnv("structures-pusher");
  std::map<std::string, std::string> digest;
  for (auto [dir, tag] : {std::pair{"base", "v1"}, std::pair{"base-config", "v2"}, std::pair{"ft", "v3"}}) {
    ProcessResult r = Blz({"push", models + "/" + dir, addr_ + "/e2e/structures:" + tag, "--json"}, pusher);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    digest[tag] = nlohmann::json::parse(r.out).at("digest").get<std::string>();
  }
  auto hash_of = [&](const std::string& dir) {
    ProcessResult r = Blz({"id", models + "/" + dir, "--json"}, {});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out).at("structural_hash").get<std::string>();
  };
  const std::string base_hash = hash_of("base");
  ASSERT_EQ(hash_of("base-config"), base_hash);
  const std::string ft_hash = hash_of("ft");
  ASSERT_NE(ft_hash, base_hash);

  // GET /v2/_blz/structures/<hash>, anonymously. Other tests of this suite may have pushed the
  // same generated models to other repositories: those are listed too, before or after ours.
  auto versions_of = [&](const std::string& hash) {
    ProcessResult r = Curl({"--fail-with-body", "http://" + addr_ + "/v2/_blz/structures/" + hash});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("structure"), hash.substr(hash.size() - 64));
    std::vector<std::string> out;
    for (const auto& v : j.at("versions")) {
      if (v.at("repository") != "e2e/structures") continue;
      out.push_back(v.at("tag").get<std::string>() + "@" + v.at("digest").get<std::string>());
    }
    return out;
  };
  EXPECT_EQ(versions_of(base_hash), (std::vector<std::string>{"v1@" + digest["v1"], "v2@" + digest["v2"]}));
  EXPECT_EQ(versions_of("sha256:" + ft_hash), std::vector<std::string>{"v3@" + digest["v3"]});
  ProcessResult bad = Curl({"-w", "\n%{http_code}", "http://" + addr_ + "/v2/_blz/structures/nothex"});
  EXPECT_NE(bad.out.find("BAD_REQUEST"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("\n400"), std::string::npos) << bad.out;

  // GET /v2/<name>/blz/diff: the document `blz diff --values --json` prints (inputs aside),
  // computed once, then served from the cache.
  const std::string diff_url = "http://" + addr_ + "/v2/e2e/structures/blz/diff?from=" + digest["v1"] + "&to=" + digest["v3"];
  ProcessResult cli = Blz({"diff", models + "/base", models + "/ft", "--values", "--json"}, {});
  ASSERT_EQ(cli.exit_code, 1) << cli.err;  // they differ
  auto want = nlohmann::ordered_json::parse(cli.out);
  EXPECT_EQ(want["identical"], false);
  // The verdict and the content comparison are the CLI's own keys (formats/content_diff.h).
  for (const char* key : {"identical", "verdict", "differences", "content"}) want.erase(key);
  for (const char* cache : {"miss", "hit"}) {
    ProcessResult r = Curl({"--fail-with-body", "-D", *work_ / "diff-headers.txt", diff_url});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::string headers = ReadFileBytes(*work_ / "diff-headers.txt");
    EXPECT_NE(headers.find(std::string("Blz-Diff-Cache: ") + cache), std::string::npos) << headers;
    EXPECT_NE(headers.find("Content-Type: application/json"), std::string::npos) << headers;
    auto got = nlohmann::ordered_json::parse(r.out);
    EXPECT_EQ(got["values"]["inputs"]["a"]["path"], digest["v1"]);
    EXPECT_EQ(got["values"]["inputs"]["b"]["path"], digest["v3"]);
    EXPECT_EQ(got["structure"]["hash_equal"], false);
    EXPECT_EQ(got["values"]["added"][0]["name"], "score.weight");
    got["values"]["inputs"] = want["values"]["inputs"];
    EXPECT_EQ(got, want);
  }
  // Same structure: nothing added or removed.
  ProcessResult same = Curl({"--fail-with-body", "http://" + addr_ + "/v2/e2e/structures/blz/diff?from=" + digest["v1"] + "&to=" + digest["v2"]});
  ASSERT_EQ(same.exit_code, 0) << same.out;
  auto same_doc = nlohmann::json::parse(same.out);
  EXPECT_EQ(same_doc["structure"]["hash_equal"], true);
  EXPECT_EQ(same_doc["values"]["model"]["changed"], 0);
  // A version of no repository here.
  ProcessResult unknown = Curl({"-w", "\n%{http_code}", "http://" + addr_ + "/v2/e2e/structures/blz/diff?from=" + digest["v1"] + "&to=sha256:" + std::string(64, '0')});
  EXPECT_NE(unknown.out.find("MANIFEST_UNKNOWN"), std::string::npos) << unknown.out;
  EXPECT_NE(unknown.out.find("\n404"), std::string::npos) << unknown.out;
}

// `blz pull REF --export gguf` (and `blz export REF`) on a client that holds the base: the
// fine-tune arrives as a patch, then is exported; the GGUF equals a local export of the same
// directory byte for byte.
TEST_F(RegistryE2ETest, PullWithExportWritesTheSameGgufAsALocalExport) {
  BLZ_REQUIRE_CORPUS(corpus);
  // tiny-gpt2 base and ft-v1, each with the real gpt2 tokenizer files.
  std::map<std::string, std::string> dirs;
  for (const char* v : {"base", "ft-v1"}) {
    std::string dir = *work_ / (std::string("export-gpt2-") + v);
    fs::create_directories(dir);
    for (std::string from : {corpus + "/tiny-gpt2/" + v, corpus + "/tokenizers/gpt2"}) {
      for (const auto& e : fs::directory_iterator(from)) {
        fs::copy_file(e.path(), dir + "/" + e.path().filename().string(),
                      fs::copy_options::overwrite_existing);
      }
    }
    dirs[v] = dir;
  }
  auto pusher = ClientEnv("export-pusher");
  for (const auto& [v, dir] : dirs) {
    ProcessResult r = Blz({"push", dir, addr_ + "/e2e/gpt2x:" + v}, pusher);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  auto puller = ClientEnv("export-puller", /*anonymous=*/true);
  ProcessResult base = Blz({"pull", addr_ + "/e2e/gpt2x:base", "--json"}, puller);
  ASSERT_EQ(base.exit_code, 0) << base.err;
  std::string pulled = *work_ / "pulled-ft.gguf";
  ProcessResult r = Blz({"pull", addr_ + "/e2e/gpt2x:ft-v1", "--export", "gguf", "--cast", "f16",
                         "-o", pulled, "--json"}, puller);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("pulled"), std::string::npos) << r.err;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["format"], "gguf");
  EXPECT_EQ(report["arch"], "gpt2");
  EXPECT_EQ(report["pull"]["used_patch"], true) << r.out;  // the base was held
  std::string local = *work_ / "local-ft.gguf";
  ProcessResult l = Blz({"export", dirs["ft-v1"], "--format", "gguf", "--cast", "f16", "--name",
                         "gpt2x", "-o", local}, puller);
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(ReadFileBytes(pulled), ReadFileBytes(local));
  // The same through `blz export REF` (already held: no download).
  std::string via_export = *work_ / "export-ref.gguf";
  ProcessResult e = Blz({"export", addr_ + "/e2e/gpt2x:ft-v1", "--format", "gguf", "--cast",
                         "f16", "-o", via_export}, puller);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(ReadFileBytes(via_export), ReadFileBytes(local));
  // Without -o, pull --export is refused before anything is fetched.
  ProcessResult bad = Blz({"pull", addr_ + "/e2e/gpt2x:ft-v1", "--export", "gguf"}, puller);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("-o"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace blz::testing
