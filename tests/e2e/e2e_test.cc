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

#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;

// Every regular file below `dir`, relative path -> bytes.
std::map<std::string, std::string> ReadTree(const std::string& dir) {
  std::map<std::string, std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = ReadFileBytes(e.path().string());
  }
  return out;
}

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
    server_pid_ = StartProcess({BLZ_BINARY, "serve", "--data", data, "--listen", "127.0.0.1:0"}, {},
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

  std::map<std::string, uintmax_t> RegistryFiles() { return ListTree(*work_ / "registry/blobs"); }

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
  EXPECT_NE(r.err.find("MANIFEST_UNKNOWN"), std::string::npos) << r.err;
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

}  // namespace
}  // namespace blz::testing
