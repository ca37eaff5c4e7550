// End-to-end: the client's local store is keyed by digest (client/base_choice.h). A base held
// from one repository serves a pull from another repository and from another name of the same
// registry; `@sha256:` takes the archive digest push prints; `blz ls`, `blz cache rm|prune` and
// `blz catalog` work on what was pulled.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// relative path -> bytes of every file below `dir`.
std::map<std::string, std::string> TreeOf(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file()) {
      out[fs::relative(it->path(), dir).string()] = ReadFileBytes(it->path().string());
    }
  }
  return out;
}

class LocalStoreE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
    ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "serve.err");
    addr_ = server_.addr;
    token_ = server_.token;
    alias_ = "localhost:" + addr_.substr(addr_.rfind(':') + 1);
  }
  void TearDown() override { StopServe(&server_); }

  ProcessResult Blz(std::vector<std::string> args) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args,
                      {{"BLZ_CONFIG_DIR", work_ / "config"}, {"BLZ_CACHE_DIR", work_ / "cache"},
                       {"BLZ_TOKEN", token_}},
                      work_.path());
  }
  json BlzJson(std::vector<std::string> args) {
    args.push_back("--json");
    ProcessResult r = Blz(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    json j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }

  TempDir work_;
  ServeProcess server_;
  std::string addr_;
  std::string alias_;  // the same server as "localhost:<port>"
  std::string token_;
};

TEST_F(LocalStoreE2ETest, AHeldBaseServesOtherRepositoriesAndRegistryAliases) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  json pushed_base = BlzJson({"push", base, addr_ + "/org/a:base"});
  json pushed_ft = BlzJson({"push", ft, addr_ + "/org/team/tg:ft"});
  const std::string base_digest = pushed_base.value("digest", "");
  const std::string ft_digest = pushed_ft.value("digest", "");
  ASSERT_FALSE(base_digest.empty()) << pushed_base.dump();

  json first = BlzJson({"pull", addr_ + "/org/a:base"});
  EXPECT_EQ(first.value("transfer", ""), "full-patch");

  // Another repository, through another name of the registry: a patch from the held base.
  json second = BlzJson({"pull", alias_ + "/org/team/tg:ft", "-o", work_ / "out-ft"});
  EXPECT_EQ(second.value("transfer", ""), "patch") << second.dump();
  EXPECT_EQ(second.value("patch_from", ""), base_digest);
  EXPECT_LT(second.value("bytes_downloaded", uint64_t(0)),
            second.value("full_bytes", uint64_t(0)) * 3 / 4);
  EXPECT_EQ(TreeOf(work_ / "out-ft"), TreeOf(ft));

  // The base under the other name: held already, nothing downloaded.
  json third = BlzJson({"pull", alias_ + "/org/a:base"});
  EXPECT_EQ(third.value("transfer", ""), "local");
  EXPECT_EQ(third.value("bytes_downloaded", uint64_t(1)), 0u);

  // @sha256: with the archive digest push printed (not the manifest's).
  json by_archive = BlzJson({"pull", addr_ + "/org/team/tg@" + ft_digest, "-o", work_ / "by"});
  EXPECT_EQ(by_archive.value("digest", ""), ft_digest);
  EXPECT_EQ(by_archive.value("transfer", ""), "local");
  EXPECT_EQ(TreeOf(work_ / "by"), TreeOf(ft));
  // A digest that is neither fails clearly and writes nothing.
  ProcessResult wrong =
      Blz({"pull", addr_ + "/org/team/tg@" + base_digest, "-o", work_ / "wrong"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_FALSE(fs::exists(work_ / "wrong"));

  // ls: two archives; the base named under both registry names.
  json ls = BlzJson({"ls"});
  ASSERT_EQ(ls["versions"].size(), 2u) << ls.dump();
  for (const json& v : ls["versions"]) {
    if (v["digest"] == base_digest) {
      EXPECT_EQ(v["names"].size(), 2u) << v.dump();
    } else {
      EXPECT_EQ(v["digest"], ft_digest);
    }
  }
  ProcessResult ls_text = Blz({"ls"});
  EXPECT_NE(ls_text.out.find("2 versions"), std::string::npos) << ls_text.out;
  EXPECT_NE(ls_text.out.find(alias_ + "/org/team/tg:ft"), std::string::npos) << ls_text.out;

  // catalog
  json catalog = BlzJson({"catalog", addr_});
  EXPECT_EQ(catalog["repositories"], json({"org/a", "org/team/tg"}));

  // cache rm, then prune to a budget: versions go, a pull fetches them again.
  ProcessResult rm = Blz({"cache", "rm", ft_digest});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(BlzJson({"ls"})["versions"].size(), 1u);
  ProcessResult rm_again = Blz({"cache", "rm", ft_digest});
  EXPECT_NE(rm_again.exit_code, 0);
  EXPECT_NE(rm_again.err.find("not held"), std::string::npos) << rm_again.err;
  json dry = BlzJson({"cache", "prune", "--max-size", "1", "--dry-run"});
  EXPECT_EQ(dry["evicted"].size(), 1u);
  EXPECT_EQ(BlzJson({"ls"})["versions"].size(), 1u);
  json pruned = BlzJson({"cache", "prune", "--max-size", "1"});
  EXPECT_EQ(pruned["bytes_after"], 0u);
  EXPECT_EQ(BlzJson({"ls"})["versions"].size(), 0u);
  ProcessResult no_rule = Blz({"cache", "prune"});
  EXPECT_NE(no_rule.exit_code, 0);
  json again = BlzJson({"pull", alias_ + "/org/a:base"});
  EXPECT_NE(again.value("transfer", ""), "local");
}

}  // namespace
}  // namespace blz::testing
