// End-to-end: the client's local store is keyed by digest (client/base_choice.h). A base held
// from one repository serves a pull from another repository and from another name of the same
// registry; `@sha256:` takes the archive digest push prints; `blz ls`, `blz cache rm|prune` and
// `blz catalog` work on what was pulled; many `blz push` processes share one store at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
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

  ProcessResult Blz(std::vector<std::string> args,
                    const std::map<std::string, std::string>& extra_env = {}) {
    args.insert(args.begin(), BLZ_BINARY);
    std::map<std::string, std::string> env = {{"BLZ_CONFIG_DIR", work_ / "config"},
                                              {"BLZ_CACHE_DIR", work_ / "cache"},
                                              {"BLZ_TOKEN", token_}};
    for (const auto& [k, v] : extra_env) env[k] = v;
    if (now_ > 0) env["BLZ_NOW"] = std::to_string(now_);
    return RunProcess(args, env, work_.path());
  }
  json BlzJson(std::vector<std::string> args) {
    args.push_back("--json");
    ProcessResult r = Blz(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    json j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }

  // A push from another store (as from another machine): the pulls into "cache" then download.
  // (A push keeps the version in its own store: issue 24 item 10.)
  json PushElsewhere(const std::string& input, const std::string& ref) {
    return BlzJson({"push", "--cache", work_ / "push-cache", input, ref});
  }

  TempDir work_;
  ServeProcess server_;
  std::string addr_;
  std::string alias_;  // the same server as "localhost:<port>"
  std::string token_;
  int64_t now_ = 0;  // BLZ_NOW for the blz runs (client/usage.h ClientNow); 0 = the clock
};

TEST_F(LocalStoreE2ETest, AHeldBaseServesOtherRepositoriesAndRegistryAliases) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  json pushed_base = PushElsewhere(base, addr_ + "/org/a:base");
  json pushed_ft = PushElsewhere(ft, addr_ + "/org/team/tg:ft");
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

// `blz cache prune --budget` on a real store: uses recorded by pulls over (simulated) days,
// utilities in `blz ls`, a plan that never leaves a version without the base its gain assumes,
// and the automatic budget of client.json after a pull.
TEST_F(LocalStoreE2ETest, BudgetedPruneByUtility) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string base_digest =
      PushElsewhere(corpus + "/tiny-gpt2/base", addr_ + "/org/a:base").value("digest", "");
  const std::string ft_digest =
      PushElsewhere(corpus + "/tiny-gpt2/ft-v1", addr_ + "/org/a:ft").value("digest", "");
  const std::string llama_digest =
      PushElsewhere(corpus + "/llama-tiny-random", addr_ + "/org/l:v1").value("digest", "");
  ASSERT_FALSE(llama_digest.empty());

  const int64_t day = 86400, t0 = 1'800'000'000;
  now_ = t0;
  json base_pull = BlzJson({"pull", addr_ + "/org/a:base"});
  json ft_pull = BlzJson({"pull", addr_ + "/org/a:ft"});
  ASSERT_EQ(ft_pull.value("transfer", ""), "patch") << ft_pull.dump();
  // (--no-patch: the registry may offer a tiny-gpt2 version as its base; here it arrives whole.)
  json llama_pull = BlzJson({"pull", addr_ + "/org/l:v1", "--no-patch"});
  EXPECT_EQ(llama_pull.value("transfer", ""), "archive");
  now_ = t0 + day;
  EXPECT_EQ(BlzJson({"pull", addr_ + "/org/a:ft"}).value("transfer", ""), "local");
  now_ = t0 + 3 * day;
  EXPECT_EQ(BlzJson({"pull", addr_ + "/org/a:ft"}).value("transfer", ""), "local");
  now_ = t0 + 4 * day;

  // ls: uses, score, gain and utility by the formula (half-life 7 days by default).
  json ls = BlzJson({"ls"});
  EXPECT_EQ(ls["half_life"], 7 * day);
  std::map<std::string, json> by_digest;
  for (const json& v : ls["versions"]) by_digest[v["digest"]] = v;
  ASSERT_EQ(by_digest.size(), 3u) << ls.dump();
  const json& ft = by_digest[ft_digest];
  EXPECT_EQ(ft["uses"], 3u);
  EXPECT_EQ(ft["base"], base_digest);
  EXPECT_EQ(ft["base_held"], true);
  const uint64_t ft_patch = ft_pull.value("bytes_downloaded", uint64_t(0));
  EXPECT_EQ(ft["gain"], ft_patch);
  const double ft_score = std::exp2(-4.0 / 7) + std::exp2(-3.0 / 7) + std::exp2(-1.0 / 7);
  EXPECT_NEAR(ft["score"].get<double>(), ft_score, 1e-9);
  EXPECT_NEAR(ft["utility"].get<double>(),
              ft_score * double(ft_patch) / ft["size"].get<double>(), 1e-9);
  const json& base = by_digest[base_digest];
  EXPECT_EQ(base["uses"], 2u);  // its pull, and its use as the base of ft's patch
  EXPECT_EQ(base["gain"], base_pull.value("bytes_downloaded", uint64_t(0)));
  EXPECT_EQ(by_digest[llama_digest]["uses"], 1u);
  ProcessResult ls_text = Blz({"ls"});
  EXPECT_NE(ls_text.out.find("UTILITY"), std::string::npos) << ls_text.out;
  EXPECT_NE(ls_text.out.find("3 versions"), std::string::npos) << ls_text.out;

  // The plan for a budget of about one tiny-gpt2 archive: the dry run shows every version's
  // utility and reason, and removes nothing.
  const uint64_t budget = base["size"].get<uint64_t>() + 1000;
  json dry = BlzJson({"cache", "prune", "--budget", std::to_string(budget), "--dry-run"});
  EXPECT_EQ(dry["budget_met"], true) << dry.dump();
  EXPECT_LE(dry["bytes_after"].get<uint64_t>(), budget);
  std::set<std::string> evicted;
  for (const json& v : dry["evicted"]) {
    evicted.insert(v["digest"].get<std::string>());
    EXPECT_FALSE(v.value("reason", "").empty());
  }
  for (const json& v : dry["kept"]) {
    EXPECT_FALSE(v.value("reason", "").empty());
    if (v["base_held"] == true) {
      EXPECT_EQ(evicted.count(v["base"]), 0u) << dry.dump();
    }
  }
  EXPECT_FALSE(evicted.empty());
  EXPECT_EQ(evicted.size() + dry["kept"].size(), 3u);
  EXPECT_EQ(BlzJson({"ls"})["versions"].size(), 3u);
  ProcessResult dry_text = Blz({"cache", "prune", "--budget", std::to_string(budget), "--dry-run"});
  EXPECT_NE(dry_text.out.find("would evict"), std::string::npos) << dry_text.out;
  EXPECT_NE(dry_text.out.find("keep"), std::string::npos) << dry_text.out;

  // Bad values are usage errors naming the option; --budget excludes --max-size.
  EXPECT_NE(Blz({"cache", "prune", "--budget", "lots"}).err.find("--budget"), std::string::npos);
  EXPECT_NE(Blz({"cache", "prune", "--budget", "1", "--half-life", "soon"}).err.find("--half-life"),
            std::string::npos);
  EXPECT_NE(Blz({"cache", "prune", "--budget", "1", "--max-size", "1"}).exit_code, 0);

  // The real prune does what the dry run said.
  json pruned = BlzJson({"cache", "prune", "--budget", std::to_string(budget)});
  std::set<std::string> really;
  for (const json& v : pruned["evicted"]) really.insert(v["digest"].get<std::string>());
  EXPECT_EQ(really, evicted);
  std::set<std::string> left;
  json ls_after = BlzJson({"ls"});
  for (const json& v : ls_after["versions"]) left.insert(v["digest"].get<std::string>());
  for (const json& v : pruned["kept"]) EXPECT_EQ(left.count(v["digest"]), 1u);
  EXPECT_EQ(left.size(), pruned["kept"].size()) << pruned.dump() << ls_after.dump();

  // Automatic budget: 1 byte in client.json. With ft, its base and llama held, a pull of ft
  // evicts llama only: ft is protected, and so is the base its gain assumes.
  // (llama goes first, so that ft patches from its base, not from llama.)
  if (left.count(llama_digest)) {
    EXPECT_EQ(Blz({"cache", "rm", llama_digest}).exit_code, 0);
  }
  for (const char* ref : {"/org/a:base", "/org/a:ft"}) BlzJson({"pull", addr_ + ref});
  BlzJson({"pull", addr_ + "/org/l:v1", "--no-patch"});
  WriteFileBytes(work_ / "config/client.json", R"({"cache": {"budget": 1, "half_life": "7d"}})");
  ProcessResult auto_pull = Blz({"pull", addr_ + "/org/a:ft", "--json"});
  ASSERT_EQ(auto_pull.exit_code, 0) << auto_pull.err;
  json auto_json = json::parse(auto_pull.out);
  EXPECT_NE(auto_pull.err.find("evicted " + llama_digest), std::string::npos) << auto_pull.err;
  EXPECT_NE(auto_pull.err.find("not reached"), std::string::npos) << auto_pull.err;
  EXPECT_EQ(auto_json["auto_pruned"], json::array({llama_digest})) << auto_json.dump();
  std::set<std::string> after;
  ProcessResult ls_final = Blz({"ls", "--json"});
  const json final_versions = json::parse(ls_final.out, nullptr, false)["versions"];
  for (const json& v : final_versions) {
    after.insert(v["digest"].get<std::string>());
  }
  EXPECT_EQ(after.count(ft_digest), 1u) << ls_final.out << ls_final.err;
  EXPECT_EQ(after.count(llama_digest), 0u);
  if (!auto_json["patch_from"].is_null()) {
    EXPECT_EQ(after.count(auto_json["patch_from"]), 1u);
  }
  // A corrupt client.json does not fail a pull.
  WriteFileBytes(work_ / "config/client.json", "{oops");
  ProcessResult with_bad_config = Blz({"pull", addr_ + "/org/a:ft"});
  EXPECT_EQ(with_bad_config.exit_code, 0) << with_bad_config.err;
  EXPECT_NE(with_bad_config.err.find("client.json"), std::string::npos) << with_bad_config.err;
}

}  // namespace
}  // namespace blz::testing

namespace blz::testing {
namespace {

// A one-tensor safetensors model directory (F32 [n], values from `seed`).
void WriteTinyModel(const std::string& dir, int seed) {
  const int n = 4096;
  std::string data(size_t(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float v = float((i * 31 + seed * 7) % 101) * 0.01f;
    std::memcpy(data.data() + size_t(i) * 4, &v, 4);
  }
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(n) +
                       "],\"data_offsets\":[0," + std::to_string(data.size()) + "]}}";
  while (header.size() % 8 != 0) header += ' ';
  std::string file(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(file.data(), &len, 8);  // little-endian host
  WriteFileBytes(dir + "/model.safetensors", file + header + data);
  WriteFileBytes(dir + "/config.json", "{\"seed\":" + std::to_string(seed) + "}\n");
}

// Issue 23: `blz push` processes run at once from one machine (one store), of one model and of
// two, against a real `blz serve`: every one succeeds and the pulls are byte-identical.
TEST_F(LocalStoreE2ETest, ParallelPushProcessesAllSucceed) {
  WriteTinyModel(work_ / "m1", 1);
  WriteTinyModel(work_ / "m2", 2);
  constexpr int kPushes = 12;
  std::vector<ProcessResult> results(kPushes);
  std::vector<std::thread> pushes;
  for (int i = 0; i < kPushes; ++i) {
    // The first half all push m1; the second half alternate m1 and m2.
    const std::string model = i < kPushes / 2 || i % 2 == 0 ? "m1" : "m2";
    pushes.emplace_back([&, i, model] {
      results[i] = Blz({"push", work_ / model, addr_ + "/org/p:t" + std::to_string(i)});
    });
  }
  for (std::thread& t : pushes) t.join();
  for (int i = 0; i < kPushes; ++i) {
    EXPECT_EQ(results[i].exit_code, 0) << "push " << i << ": " << results[i].out << results[i].err;
  }
  for (int i : {0, 7, 8, 11}) {
    const std::string model = i < kPushes / 2 || i % 2 == 0 ? "m1" : "m2";
    const std::string out = work_ / ("out" + std::to_string(i));
    ProcessResult r = Blz({"pull", addr_ + "/org/p:t" + std::to_string(i), "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(TreeOf(out), TreeOf(work_ / model)) << i;
  }
}


// The last line of a command's stdout.
std::string LastLine(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
}

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Issue 24 item 8: `blz pull REF` without -o gives a loadable directory (the model's files),
// printed as the last line of stdout, deduplicated against the store; --archive-only keeps the
// old answer; cache rm takes the directory with the version; --include/--exclude filter files.
TEST_F(LocalStoreE2ETest, PullWithoutOutputGivesALoadableSnapshotDirectory) {
  WriteTinyModel(work_ / "m1", 1);
  WriteTinyModel(work_ / "m2", 2);
  WriteFileBytes(work_ / "m2/config.json", ReadFileBytes(work_ / "m1/config.json"));
  const std::string d1 = PushElsewhere(work_ / "m1", addr_ + "/org/s:v1").value("digest", "");
  const std::string d2 = PushElsewhere(work_ / "m2", addr_ + "/org/s:v2").value("digest", "");
  ASSERT_FALSE(d2.empty());

  ProcessResult r1 = Blz({"pull", addr_ + "/org/s:v1"});
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  const std::string dir1 = LastLine(r1.out);
  EXPECT_EQ(dir1, work_ / ("cache/snapshots/" + addr_ + "/org/s:v1"));
  EXPECT_EQ(TreeOf(dir1), TreeOf(work_ / "m1"));
  const ino_t weights = InodeOf(dir1 + "/model.safetensors");

  // Again: the same directory, the same files (nothing rewritten).
  ProcessResult again = Blz({"pull", addr_ + "/org/s:v1", "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  json j = json::parse(again.out, nullptr, false);
  EXPECT_EQ(j.value("output", ""), dir1);
  EXPECT_EQ(j.value("snapshot", false), true);
  EXPECT_EQ(InodeOf(dir1 + "/model.safetensors"), weights);

  // Another version: its identical config.json is the same file on disk.
  ProcessResult r2 = Blz({"pull", addr_ + "/org/s:v2"});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const std::string dir2 = LastLine(r2.out);
  EXPECT_EQ(TreeOf(dir2), TreeOf(work_ / "m2"));
  EXPECT_EQ(InodeOf(dir2 + "/config.json"), InodeOf(dir1 + "/config.json"));
  EXPECT_NE(InodeOf(dir2 + "/model.safetensors"), weights);

  // --archive-only: the .blz in the store, as before.
  ProcessResult archive = Blz({"pull", addr_ + "/org/s:v2", "--archive-only"});
  ASSERT_EQ(archive.exit_code, 0) << archive.err;
  EXPECT_EQ(LastLine(archive.out),
            work_ / ("cache/blobs/sha256/" + d2.substr(7, 2) + "/" + d2.substr(7)));

  // Filters choose whole files, for -o and for the snapshot.
  ProcessResult only_json =
      Blz({"pull", addr_ + "/org/s:v2", "--include", "*.json", "-o", work_ / "only-json"});
  ASSERT_EQ(only_json.exit_code, 0) << only_json.err;
  EXPECT_EQ(TreeOf(work_ / "only-json"),
            (std::map<std::string, std::string>{
                {"config.json", ReadFileBytes(work_ / "m2/config.json")}}));
  ProcessResult no_json = Blz({"pull", addr_ + "/org/s:v1", "--exclude", "*.json"});
  ASSERT_EQ(no_json.exit_code, 0) << no_json.err;
  EXPECT_EQ(TreeOf(LastLine(no_json.out)).size(), 1u);

  // Removing a version removes its directory; the other one stays whole.
  ASSERT_EQ(Blz({"cache", "rm", d2}).exit_code, 0);
  EXPECT_FALSE(fs::exists(dir2));
  EXPECT_EQ(TreeOf(dir1).count("model.safetensors"), 1u);
  (void)d1;
}

// Issue 24 item 10: a pushed version is kept in the pusher's store, recorded under the
// reference pushed: a pull of it downloads nothing, a later version patches from it.
TEST_F(LocalStoreE2ETest, PushedVersionIsKeptAsALocalBase) {
  BLZ_REQUIRE_CORPUS(corpus);
  json pushed = BlzJson({"push", corpus + "/tiny-gpt2/base", addr_ + "/org/k:base"});
  const std::string base = pushed.value("digest", "");
  ASSERT_FALSE(base.empty());
  EXPECT_EQ(pushed.value("kept", false), true);
  json ls = BlzJson({"ls"});
  ASSERT_EQ(ls["versions"].size(), 1u) << ls.dump();
  EXPECT_EQ(ls["versions"][0]["digest"], base);
  EXPECT_EQ(ls["versions"][0]["names"], json::array({addr_ + "/org/k:base"}));

  json pulled = BlzJson({"pull", addr_ + "/org/k:base"});
  EXPECT_EQ(pulled.value("transfer", ""), "local");
  EXPECT_EQ(pulled.value("bytes_downloaded", uint64_t(1)), 0u);

  PushElsewhere(corpus + "/tiny-gpt2/ft-v1", addr_ + "/org/k:ft");
  json ft = BlzJson({"pull", addr_ + "/org/k:ft"});
  EXPECT_EQ(ft.value("transfer", ""), "patch") << ft.dump();
  EXPECT_EQ(ft.value("patch_from", ""), base);
}

// Issue 24 item 9: with the registry stopped, versions held locally are pulled by tag with
// --offline or BLZ_OFFLINE=1, and by digest without either; an unknown tag is exit 3 naming it.
TEST_F(LocalStoreE2ETest, OfflinePullServesHeldVersionsWithTheRegistryStopped) {
  WriteTinyModel(work_ / "m1", 1);
  PushElsewhere(work_ / "m1", addr_ + "/org/o:v1");
  json first = BlzJson({"pull", addr_ + "/org/o:v1"});
  const std::string digest = first.value("digest", "");
  const std::string manifest = first.value("manifest_digest", "");
  ASSERT_FALSE(manifest.empty()) << first.dump();
  StopServe(&server_);

  ProcessResult offline = Blz({"pull", "--offline", addr_ + "/org/o:v1"});
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  EXPECT_EQ(TreeOf(LastLine(offline.out)), TreeOf(work_ / "m1"));
  EXPECT_NE(offline.err.find("registry not contacted"), std::string::npos) << offline.err;

  ProcessResult by_env = Blz({"pull", addr_ + "/org/o:v1", "-o", work_ / "env-out"},
                             {{"BLZ_OFFLINE", "1"}});
  ASSERT_EQ(by_env.exit_code, 0) << by_env.err;
  EXPECT_EQ(TreeOf(work_ / "env-out"), TreeOf(work_ / "m1"));

  // By digest (the archive's, or the manifest's): served locally without any flag.
  for (const std::string& d : {digest, manifest}) {
    ProcessResult r = Blz({"pull", addr_ + "/org/o@" + d, "--retries", "0"});
    ASSERT_EQ(r.exit_code, 0) << d << ": " << r.err;
    EXPECT_EQ(TreeOf(LastLine(r.out)), TreeOf(work_ / "m1"));
  }

  ProcessResult unknown = Blz({"pull", "--offline", addr_ + "/org/o:v9"});
  EXPECT_EQ(unknown.exit_code, 3) << unknown.err;
  EXPECT_NE(unknown.err.find("'v9'"), std::string::npos) << unknown.err;
}

// Issue 24 item 11: short digests (as `blz ls` prints them) in pull and cache rm; local retag.
TEST_F(LocalStoreE2ETest, ShortDigestsAndLocalTag) {
  WriteTinyModel(work_ / "m1", 1);
  WriteTinyModel(work_ / "m2", 2);
  const std::string d1 = PushElsewhere(work_ / "m1", addr_ + "/org/d:v1").value("digest", "");
  const std::string d2 = PushElsewhere(work_ / "m2", addr_ + "/org/d:v2").value("digest", "");
  ASSERT_FALSE(d2.empty());

  // Not held: resolved against the registry's tags of org/d.
  json by_short = BlzJson({"pull", addr_ + "/org/d@" + d1.substr(0, 19)});
  EXPECT_EQ(by_short.value("digest", ""), d1) << by_short.dump();
  // Held: resolved locally.
  json held = BlzJson({"pull", addr_ + "/org/d@" + d1.substr(0, 19), "--offline"});
  EXPECT_EQ(held.value("digest", ""), d1);
  EXPECT_NE(Blz({"pull", addr_ + "/org/d@sha256:abc"}).exit_code, 0);

  // blz tag: another name for the held version, pullable offline.
  ProcessResult tag = Blz({"tag", addr_ + "/org/d@" + d1.substr(0, 19), addr_ + "/org/copy:mine"});
  ASSERT_EQ(tag.exit_code, 0) << tag.err;
  json copy = BlzJson({"pull", "--offline", addr_ + "/org/copy:mine"});
  EXPECT_EQ(copy.value("digest", ""), d1);
  EXPECT_NE(Blz({"tag", addr_ + "/org/d:v2", addr_ + "/org/copy:x"}).exit_code, 0);  // not held

  // cache rm by short digest.
  ProcessResult rm = Blz({"cache", "rm", d1.substr(0, 19)});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_TRUE(BlzJson({"ls"})["versions"].empty());
}

}  // namespace
}  // namespace blz::testing
