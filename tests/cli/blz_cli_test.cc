// Runs the `blz` binary: exit codes, one-line errors, offline commands on real files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace blz::cli {
namespace {

using blz::testing::ReadFileBytes;
using blz::testing::TempDir;

struct BlzRun {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `blz <args>` through the shell (args are trusted test strings).
BlzRun Blz(const std::string& args, const TempDir& tmp, const std::string& env = "") {
  const std::string err_path = tmp / "stderr.txt";
  std::string cmd = env + " " + BLZ_BINARY + " " + args + " 2>" + err_path;
  BlzRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadFileBytes(err_path);
  return r;
}

TEST(BlzCliTest, HelpDocumentsExitCodes) {
  TempDir tmp;
  BlzRun r = Blz("--help", tmp);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Exit codes:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4  corrupt data"), std::string::npos);
  EXPECT_NE(r.out.find("pull"), std::string::npos);
  // Every environment variable blz reads (issue 24).
  for (const char* var : {"BLZ_REGISTRY", "BLZ_CA_BUNDLE", "BLZ_TOKEN", "BLZ_CACHE_DIR",
                          "BLZ_CONFIG_DIR", "HTTPS_PROXY", "NO_PROXY"}) {
    EXPECT_NE(r.out.find(var), std::string::npos) << var << "\n" << r.out;
  }
  BlzRun apply = Blz("apply --help", tmp);
  EXPECT_EQ(apply.code, 0);
  EXPECT_NE(apply.out.find("ends in .blz"), std::string::npos) << apply.out;
}

TEST(BlzCliTest, UsageErrorsExit2WithOneLine) {
  TempDir tmp;
  BlzRun none = Blz("", tmp);
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err.rfind("blz: error: ", 0), 0u) << none.err;
  BlzRun unknown = Blz("frobnicate", tmp);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown command 'frobnicate'"), std::string::npos) << unknown.err;
  BlzRun missing_arg = Blz("pull", tmp);
  EXPECT_EQ(missing_arg.code, 2);
  BlzRun bad_ref = Blz("pull 127.0.0.1:5000/Bad/Name:v1 --cache " + tmp / "c", tmp);
  EXPECT_EQ(bad_ref.code, 2);
  EXPECT_EQ(bad_ref.err.rfind("blz: error: invalid argument: reference", 0), 0u) << bad_ref.err;
  EXPECT_EQ(std::count(bad_ref.err.begin(), bad_ref.err.end(), '\n'), 1) << bad_ref.err;
}

// `blz serve` refuses a bad --log-format before creating anything.
TEST(BlzCliTest, ServeRefusesAnUnknownLogFormat) {
  TempDir tmp;
  BlzRun r = Blz("serve --data " + tmp / "data" + " --log-format xml", tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("blz: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("--log-format"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "data"));
}

// `blz serve --job-lease` outside 3 s .. 1 day (above it, a killed replica would block the
// others' shared work longer than that) is a usage error, before anything is created.
TEST(BlzCliTest, ServeRefusesAJobLeaseOutOfRange) {
  TempDir tmp;
  for (const std::string lease : {"1s", "2", "2d"}) {
    BlzRun r = Blz("serve --data " + tmp / "data" + " --job-lease " + lease, tmp);
    EXPECT_EQ(r.code, 2) << lease << ": " << r.err;
    EXPECT_EQ(r.err.rfind("blz: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("--job-lease"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not in range"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(tmp / "data")) << lease;
  }
}

// `blz serve --config FILE`: an unknown key, an unknown section, a bad value or a missing file
// is a usage error naming the file and the key, before anything is created.
TEST(BlzCliTest, ServeConfigFileErrorsAreClear) {
  TempDir tmp;
  const std::string data = tmp / "data";
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"data = \"" + data + "\"\nlisten = \"127.0.0.1:0\"\nlisten-port = 5\n",
       "unknown option 'listen-port' (see blz serve --help)"},
      {"data = \"" + data + "\"\n[server]\nlisten = \"127.0.0.1:0\"\n",
       "unknown section [server]"},
      {"data = \"" + data + "\"\ncache-size = \"lots\"\n", "cache-size: --cache-size: lots"},
      {"data = \"" + data + "\"\nlog_format = \"xml\"\n",
       "log_format: --log-format: xml not in {text,json}"},
      {"data = \"" + data + "\"\nprivate = maybe\n", "private: Could not convert"},
      {"data = \"" + data + "\"\nthreads = -1\n", "threads: --threads: Value -1 not in range"},
      {"data = \"" + data + "\"\njob-lease = \"1s\"\n",
       "job-lease: --job-lease: Value 1 not in range"},
  };
  for (const Case& c : cases) {
    const std::string config = tmp / "serve.toml";
    blz::testing::WriteFileBytes(config, c.text);
    BlzRun r = Blz("serve --config " + config, tmp);
    EXPECT_EQ(r.code, 2) << c.text;
    EXPECT_EQ(r.err.rfind("blz: error: config file " + config + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(data)) << c.text;
  }
  BlzRun missing = Blz("serve --config " + tmp / "none.toml", tmp);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--config: File does not exist: " + tmp / "none.toml"),
            std::string::npos)
      << missing.err;
}

// Every option of `blz serve --help` has a real description, --config included.
TEST(BlzCliTest, ServeHelpDescribesEveryOption) {
  TempDir tmp;
  BlzRun r = Blz("serve --help", tmp);
  EXPECT_EQ(r.code, 0);
  for (const char* option : {"--data", "--listen", "--threads", "--private", "--cache-size",
                             "--keep-raw-archives", "--verify-storage", "--max-chain-depth", "--metrics",
                             "--metadata",
                             "--migrate-only",
                             "--log-format", "--config"}) {
    const size_t at = r.out.find(std::string("  ") + option);
    ASSERT_NE(at, std::string::npos) << option << "\n" << r.out;
    // The description follows on the same line or the next one; it is at least a few words.
    const size_t end = r.out.find("\n  -", at + 3);
    const std::string entry = r.out.substr(at, end == std::string::npos ? end : end - at);
    EXPECT_GT(entry.size(), std::string(option).size() + 30) << entry;
  }
}

// `blz ls` and `blz cache prune --budget` on a store written by hand: a corrupt usage.json is
// a note (uses count as one at the last pull), never an error, and a dry run removes nothing.
TEST(BlzCliTest, LsAndBudgetedPruneSurviveACorruptUsageRecord) {
  TempDir tmp;
  const std::string hex(64, 'a');
  const std::string digest = "sha256:" + hex;
  // The blob's bytes need not hash to its name for ls and prune (neither re-hashes).
  blz::testing::WriteFileBytes(tmp / ("c/blobs/sha256/aa/" + hex), std::string(1000, 'x'));
  blz::testing::WriteFileBytes(
      tmp / "c/repos/127.0.0.1:5000/org/m/index.json",
      R"({"registry":"127.0.0.1:5000","repository":"org/m","versions":[{"digest":")" + digest +
          R"(","size":1000,"tags":["v1"],"seq":1,"pulled_at":1800000000}]})");
  blz::testing::WriteFileBytes(tmp / "c/usage.json", "{broken");
  const std::string env = "BLZ_CONFIG_DIR=" + tmp / "cfg" + " BLZ_NOW=1800604800";

  BlzRun ls = Blz("ls --json --cache " + tmp / "c", tmp, env);
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_NE(ls.err.find("usage.json"), std::string::npos) << ls.err;
  nlohmann::json j = nlohmann::json::parse(ls.out);
  ASSERT_EQ(j["versions"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["versions"][0]["score"].get<double>(), 0.5);  // one use, 7 days ago
  EXPECT_EQ(j["versions"][0]["gain"], 1000u);                      // nothing recorded: its size
  EXPECT_DOUBLE_EQ(j["versions"][0]["utility"].get<double>(), 0.5);
  BlzRun text = Blz("ls --cache " + tmp / "c", tmp, env);
  EXPECT_NE(text.out.find("UTILITY"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("0.5"), std::string::npos) << text.out;

  BlzRun dry = Blz("cache prune --budget 0 --dry-run --cache " + tmp / "c", tmp, env);
  EXPECT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.out.find("would evict"), std::string::npos) << dry.out;
  EXPECT_TRUE(std::filesystem::exists(tmp / ("c/blobs/sha256/aa/" + hex)));
  EXPECT_EQ(ReadFileBytes(tmp / "c/usage.json"), "{broken");

  BlzRun bad = Blz("cache prune --budget 12XB --cache " + tmp / "c", tmp, env);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--budget '12XB'"), std::string::npos) << bad.err;
  BlzRun half = Blz("cache prune --older-than 1d --half-life 2d --cache " + tmp / "c", tmp, env);
  EXPECT_NE(half.code, 0);
  EXPECT_NE(half.err.find("--budget only"), std::string::npos) << half.err;

  BlzRun pruned = Blz("cache prune --budget 0 --cache " + tmp / "c", tmp, env);
  EXPECT_EQ(pruned.code, 0) << pruned.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / ("c/blobs/sha256/aa/" + hex)));
}

TEST(BlzCliTest, MissingFileExit3) {
  TempDir tmp;
  BlzRun r = Blz("verify " + tmp / "nope.blz", tmp);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.err.rfind("blz: error: not found: ", 0), 0u) << r.err;
}

TEST(BlzCliTest, UnreachableRegistryExit6) {
  TempDir tmp;
  // Connection errors are retried (--retries, default 5), each retry shown with --verbose;
  // then the pull gives up.
  BlzRun r = Blz("pull 127.0.0.1:1/org/m:v1 --timeout 5 --retries 2 --verbose --cache " +
                     tmp / "c",
                 tmp);
  EXPECT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("retry 1/2 after"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("retry 2/2 after"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("retry 3/"), std::string::npos) << r.err;
}

// A dead registry is not minutes of silence: the first retry is said on stderr without
// --verbose, and -q leaves only the error (issue 24).
TEST(BlzCliTest, UnreachableRegistrySaysItIsRetrying) {
  TempDir tmp;
  BlzRun r = Blz("pull 127.0.0.1:1/org/m:v1 --timeout 5 --retries 2 --cache " + tmp / "c", tmp);
  EXPECT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.err.find("cannot connect to http://127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("retrying 1/2"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("retrying 2/2"), std::string::npos) << r.err;  // once, not every retry
  BlzRun quiet =
      Blz("pull 127.0.0.1:1/org/m:v1 -q --timeout 5 --retries 1 --cache " + tmp / "c", tmp);
  EXPECT_EQ(quiet.code, 6) << quiet.err;
  EXPECT_EQ(quiet.err.find("retrying"), std::string::npos) << quiet.err;
  EXPECT_EQ(std::count(quiet.err.begin(), quiet.err.end(), '\n'), 1) << quiet.err;
}

// A CA bundle that does not exist is a missing input file (exit 3, "no such file"), from
// --ca-cert or $BLZ_CA_BUNDLE, for every command that contacts a registry, export included
// (issue 24); nothing is contacted.
TEST(BlzCliTest, MissingCaBundleIsNoSuchFile) {
  TempDir tmp;
  const std::string env = "BLZ_TOKEN= BLZ_CA_BUNDLE= BLZ_CONFIG_DIR=" + tmp / "cfg";
  const std::string missing = tmp / "nope.pem";
  for (const std::string& cmd :
       {"pull https://127.0.0.1:1/org/m:v1 --cache " + tmp / "c" + " --ca-cert " + missing,
        "tags https://127.0.0.1:1/org/m --ca-cert " + missing,
        "login https://127.0.0.1:1 --token abc --ca-cert " + missing,
        "export https://127.0.0.1:1/org/m:v1 --format safetensors -o " + tmp / "out" +
            " --cache " + tmp / "c" + " --ca-cert " + missing}) {
    BlzRun r = Blz(cmd, tmp, env);
    EXPECT_EQ(r.code, 3) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("no such file: " + missing), std::string::npos) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("--ca-cert"), std::string::npos) << r.err;
  }
  for (const std::string& cmd :
       {"pull https://127.0.0.1:1/org/m:v1 --cache " + tmp / "c",
        "export https://127.0.0.1:1/org/m:v1 --format safetensors -o " + tmp / "out" +
            " --cache " + tmp / "c"}) {
    BlzRun r = Blz(cmd, tmp, "BLZ_TOKEN= BLZ_CONFIG_DIR=" + tmp / "cfg" + " BLZ_CA_BUNDLE=" +
                                 missing);
    EXPECT_EQ(r.code, 3) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("no such file: " + missing + " (the CA bundle given by BLZ_CA_BUNDLE)"),
              std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "cfg"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "out"));
}

// "already exists" says how to replace the output where the command has --force (issue 24):
// single-file outputs (squizd, gguf) as well as directories. (A guard: export already said so;
// the CLI now adds it to any kAlreadyExists of an export that does not.)
TEST(BlzCliTest, ExportOntoAnExistingOutputMentionsForce) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  for (const char* format : {"squizd", "gguf", "safetensors"}) {
    const std::string out = tmp / (std::string("existing.") + format);
    blz::testing::WriteFileBytes(out, "keep me");
    BlzRun r = Blz("export " + corpus + "/tiny-gpt2/base --format " + format + " -o " + out, tmp);
    EXPECT_EQ(r.code, 7) << format << ": " << r.err;
    EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("use --force to replace it"), std::string::npos) << format << ": "
                                                                          << r.err;
    EXPECT_EQ(ReadFileBytes(out), "keep me");
  }
}

// `blz login` checks the token against the registry first (tests/e2e has the successful
// logins against a real server): an unreachable registry stores nothing.
TEST(BlzCliTest, LoginToAnUnreachableRegistryStoresNothing) {
  TempDir tmp;
  const std::string env = "BLZ_TOKEN= BLZ_CONFIG_DIR=" + tmp / "cfg";
  BlzRun r = Blz("login 127.0.0.1:1 --timeout 5 --token abc123", tmp, env);
  EXPECT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.err.find("cannot reach the registry (nothing stored)"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "cfg/auth.json"));
  blz::testing::WriteFileBytes(tmp / "token.txt", "tok-from-stdin\n");
  BlzRun piped = Blz("login 127.0.0.1:1 --timeout 5 < " + tmp / "token.txt", tmp, env);
  EXPECT_EQ(piped.code, 6) << piped.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "cfg/auth.json"));
  // (A bare host is an address now: https://HOST:443.) A bad scheme or host is a usage error.
  BlzRun bad = Blz("login ftp://nohost --token x", tmp, env);
  EXPECT_EQ(bad.code, 2) << bad.err;
  BlzRun bad_host = Blz("login 'no host' --token x", tmp, env);
  EXPECT_EQ(bad_host.code, 2) << bad_host.err;
  BlzRun spaces = Blz("login 127.0.0.1:1 --token 'a b'", tmp, env);
  EXPECT_EQ(spaces.code, 2) << spaces.err;
}

// Without a server: the commands' shapes and their usage errors.
TEST(BlzCliTest, TokenCommandsNeedARegistryAndAToken) {
  TempDir tmp;
  const std::string env = "BLZ_TOKEN= BLZ_CONFIG_DIR=" + tmp / "cfg";
  BlzRun help = Blz("token --help", tmp, env);
  EXPECT_EQ(help.code, 0);
  for (const char* sub : {"create", "list", "revoke"}) {
    EXPECT_NE(help.out.find(sub), std::string::npos) << help.out;
  }
  EXPECT_NE(help.out.find("org/*:pull,push"), std::string::npos) << help.out;
  EXPECT_EQ(Blz("token", tmp, env).code, 2);
  EXPECT_EQ(Blz("token create ci --scope '*:pull'", tmp, env).code, 2);  // no --registry
  BlzRun no_scope = Blz("token create ci --registry 127.0.0.1:1", tmp, env);
  EXPECT_EQ(no_scope.code, 2);
  EXPECT_EQ(no_scope.err.find("unknown command"), std::string::npos) << no_scope.err;
  BlzRun expires = Blz("token create ci --scope '*:pull' --expires soon --registry 127.0.0.1:1",
                       tmp, env);
  EXPECT_EQ(expires.code, 2) << expires.err;
  EXPECT_NE(expires.err.find("--expires 'soon' is not a duration"), std::string::npos)
      << expires.err;
  BlzRun anon = Blz("token list --registry 127.0.0.1:1", tmp, env);
  EXPECT_EQ(anon.code, 5) << anon.err;
  EXPECT_NE(anon.err.find("blz login 127.0.0.1:1"), std::string::npos) << anon.err;
  BlzRun logout = Blz("logout 127.0.0.1:1", tmp, env);
  EXPECT_EQ(logout.code, 0) << logout.err;
  EXPECT_NE(logout.err.find("no token stored for 127.0.0.1:1"), std::string::npos) << logout.err;
}

TEST(BlzCliTest, PackVerifyDetectsCorruptionAndRefusesOverwrite) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string archive = tmp / "m.blz";
  BlzRun pack = Blz("pack " + corpus + "/tiny-gpt2/base -o " + archive + " --json", tmp);
  ASSERT_EQ(pack.code, 0) << pack.err;
  EXPECT_NE(pack.out.find("\"digest\": \"sha256:"), std::string::npos) << pack.out;
  EXPECT_EQ(Blz("verify " + archive, tmp).code, 0);
  BlzRun again = Blz("pack " + corpus + "/tiny-gpt2/base -o " + archive, tmp);
  EXPECT_EQ(again.code, 7) << again.err;

  // Flip one byte near the end of the archive (inside tensor data).
  std::string bytes = ReadFileBytes(archive);
  bytes[bytes.size() - 100] ^= 0x01;
  blz::testing::WriteFileBytes(tmp / "bad.blz", bytes);
  BlzRun bad = Blz("verify " + tmp / "bad.blz", tmp);
  EXPECT_EQ(bad.code, 4) << bad.err;
  EXPECT_NE(bad.err.find("tensor '"), std::string::npos) << bad.err;
}

// issue 12: progress options of pack/unpack, offline. "--progress plain" works before a
// positional argument, as "--progress=plain" does; plain output has no '\r'; -q prints nothing;
// the default on a non-terminal prints no line for phases this short.
TEST(BlzCliTest, ProgressOptionsOfPackAndUnpack) {
  TempDir tmp;
  const std::string models = tmp / "models";
  const std::string gen = std::string("/usr/bin/python3 ") + BLZ_SOURCE_DIR +
                          "/scripts/make_demo_model.py " + models + " >/dev/null";
  ASSERT_EQ(std::system(gen.c_str()), 0);
  BlzRun plain = Blz("pack --progress plain " + models + "/base -o " + tmp / "a.blz", tmp);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.err.rfind("packing " + models + "/base  100%  in ", 0), 0u) << plain.err;
  EXPECT_NE(plain.err.find("100%"), std::string::npos) << plain.err;
  EXPECT_EQ(plain.err.find('\r'), std::string::npos) << plain.err;
  EXPECT_EQ(std::count(plain.err.begin(), plain.err.end(), '\n'), 1) << plain.err;

  BlzRun eq = Blz("unpack " + tmp / "a.blz" + " --progress=plain -o " + tmp / "out1", tmp);
  ASSERT_EQ(eq.code, 0) << eq.err;
  EXPECT_EQ(eq.err.rfind("unpacking  ", 0), 0u) << eq.err;

  BlzRun quiet = Blz("unpack -q " + tmp / "a.blz" + " -o " + tmp / "out2", tmp);
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  BlzRun dflt = Blz("pack " + models + "/ft -o " + tmp / "b.blz", tmp);
  ASSERT_EQ(dflt.code, 0) << dflt.err;
  EXPECT_EQ(dflt.err, "");

  BlzRun bad = Blz("pack --progress=fancy " + models + "/ft -o " + tmp / "c.blz", tmp);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--progress"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "c.blz"));
}

TEST(BlzCliTest, DiffApplyRoundTripOnDirectories) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  BlzRun diff = Blz("diff " + base + " " + ft + " -o " + tmp / "p.blzpatch --json", tmp);
  ASSERT_EQ(diff.code, 0) << diff.err;
  EXPECT_NE(diff.out.find("\"pieces\""), std::string::npos);
  BlzRun apply = Blz("apply " + base + " " + tmp / "p.blzpatch -o " + tmp / "out", tmp);
  ASSERT_EQ(apply.code, 0) << apply.err;
  EXPECT_EQ(ReadFileBytes(tmp / "out/model.safetensors"), ReadFileBytes(ft + "/model.safetensors"));
  EXPECT_EQ(ReadFileBytes(tmp / "out/config.json"), ReadFileBytes(ft + "/config.json"));
  // No temporary archives are left next to the outputs.
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
    EXPECT_EQ(e.path().filename().string().rfind(".blz-tmp-", 0), std::string::npos) << e.path();
  }
  BlzRun to_archive = Blz("apply " + base + " " + tmp / "p.blzpatch -o " + tmp / "ft.blz", tmp);
  ASSERT_EQ(to_archive.code, 0) << to_archive.err;
  EXPECT_EQ(Blz("verify " + tmp / "ft.blz", tmp).code, 0);
  // Issue 28: the base directory is read in place; given the wrong one, the error names the
  // digest it packs to, and nothing is written.
  BlzRun wrong = Blz("apply " + ft + " " + tmp / "p.blzpatch -o " + tmp / "wrong", tmp);
  EXPECT_NE(wrong.code, 0);
  EXPECT_NE(wrong.err.find("packs to digest"), std::string::npos) << wrong.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "wrong"));
}

// Issue 28: apply to a directory writes the files as it decodes. A corrupted patch byte fails
// with kCorruption (exit 5 or the like, not 0), and nothing is visible: no output directory,
// no temporary directory or archive beside it.
TEST(BlzCliTest, ApplyToDirectoryWithACorruptPatchLeavesNothing) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  ASSERT_EQ(Blz("diff " + base + " " + ft + " -o " + tmp / "p.blzpatch", tmp).code, 0);
  std::string patch = ReadFileBytes(tmp / "p.blzpatch");
  patch[patch.size() - 16] ^= 0x40;  // inside the last chunk's payload
  blz::testing::WriteFileBytes(tmp / "bad.blzpatch", patch);
  BlzRun apply = Blz("apply " + base + " " + tmp / "bad.blzpatch -o " + tmp / "out", tmp);
  EXPECT_NE(apply.code, 0) << apply.out;
  EXPECT_NE(apply.err.find("corrupt"), std::string::npos) << apply.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "out"));
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "p.blzpatch" || name == "bad.blzpatch" || name == "stdout.txt" ||
                name == "stderr.txt")
        << e.path();
  }
}

// --- Issue 4: id, diff (structural / values), inspect --stats ------------------------------

// The "structural_hash: <hex>" line of a weight-inspect text output ("" when absent).
std::string HashLine(const std::string& text) {
  const std::string key = "structural_hash: ";
  auto pos = text.find(key);
  if (pos == std::string::npos) return "";
  auto end = text.find('\n', pos);
  return text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

TEST(BlzCliTest, IdOfTruncatedGgufMatchesWeightInspectGolden) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string golden = ReadFileBytes(corpus + "/weight-inspect/golden/id_tiny_gguf.txt");
  ASSERT_FALSE(HashLine(golden).empty()) << golden;
  BlzRun r = Blz("id " + corpus + "/weight-inspect/fixtures/tiny.gguf", tmp);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(HashLine(r.out), HashLine(golden)) << r.out;
  EXPECT_EQ(r.out, golden);

  BlzRun j = Blz("id --json " + corpus + "/weight-inspect/fixtures/tiny.gguf", tmp);
  ASSERT_EQ(j.code, 0) << j.err;
  nlohmann::json parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed["schema"], 1) << j.out;
  EXPECT_EQ("structural_hash: " + parsed["structural_hash"].get<std::string>(),
            HashLine(golden));
}

TEST(BlzCliTest, IdOfDirectoryEqualsItsArchiveAndMissingFileExit3) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string dir = corpus + "/tiny-gpt2/base";
  ASSERT_EQ(Blz("pack " + dir + " -o " + tmp / "m.blz", tmp).code, 0);
  BlzRun a = Blz("id " + dir, tmp), b = Blz("id " + tmp / "m.blz", tmp);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_FALSE(HashLine(a.out).empty()) << a.out;
  EXPECT_EQ(HashLine(a.out), HashLine(b.out));
  BlzRun missing = Blz("id " + tmp / "nope.gguf", tmp);
  EXPECT_EQ(missing.code, 3) << missing.err;
}

TEST(BlzCliTest, DiffOfAFileWithItselfIsIdentical) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string f = corpus + "/tiny-gpt2/base/model.safetensors";
  BlzRun r = Blz("diff " + f + " " + f + " --fail-on-diff", tmp);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("IDENTICAL"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("DIFFERENT"), std::string::npos) << r.out;
  BlzRun j = Blz("diff --json " + f + " " + f, tmp);
  ASSERT_EQ(j.code, 0) << j.err;
  nlohmann::json parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed["schema"], 1);
  EXPECT_EQ(parsed["identical"], true);
  EXPECT_EQ(parsed["structure"]["hash_equal"], true);
  // --structure-only --json: weight-inspect's document.
  BlzRun s = Blz("diff --json --structure-only " + f + " " + f, tmp);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out)["hash_equal"], true);
}

TEST(BlzCliTest, DiffBaseVsFineTuneStructureAndValues) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  // A fine-tune keeps the architecture: same structure, different values.
  BlzRun s = Blz("diff " + base + " " + ft + " --verbose --structure-only", tmp);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("IDENTICAL"), std::string::npos) << s.out;
  // ... so the models differ (issue 24: this was IDENTICAL with exit 0).
  BlzRun d = Blz("diff " + base + " " + ft + " --fail-on-diff", tmp);
  EXPECT_EQ(d.code, 1) << d.err;
  EXPECT_EQ(d.out.rfind("DIFFERENT: values of ", 0), 0u) << d.out;

  BlzRun j = Blz("diff " + base + " " + ft + " --values --json", tmp);
  ASSERT_EQ(j.code, 1) << j.err;
  nlohmann::json parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed["schema"], 1);
  ASSERT_TRUE(parsed.contains("structure")) << j.out;
  EXPECT_EQ(parsed["structure"]["schema"], 1);
  ASSERT_TRUE(parsed.contains("values")) << j.out;
  const nlohmann::json& model = parsed["values"]["model"];
  EXPECT_GT(model["elements"].get<uint64_t>(), 0u) << model.dump();
  EXPECT_GT(model["changed"].get<uint64_t>(), 0u) << model.dump();
  EXPECT_LE(model["changed"].get<uint64_t>(), model["elements"].get<uint64_t>());
  EXPECT_FALSE(parsed["values"]["tensors"].empty());

  BlzRun t = Blz("diff " + base + "/model.safetensors " + ft + "/model.safetensors --values", tmp);
  ASSERT_EQ(t.code, 1) << t.err;
  EXPECT_EQ(t.out.rfind("DIFFERENT: values of ", 0), 0u) << t.out;
  EXPECT_NE(t.out.find("REL_L2"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("CHANGED%"), std::string::npos) << t.out;
}

TEST(BlzCliTest, DiffExits1ForDifferentStructures) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string st = corpus + "/tiny-gpt2/base/model.safetensors";
  const std::string gguf = corpus + "/gguf/llama-2-tiny-random.gguf";
  BlzRun plain = Blz("diff " + st + " " + gguf, tmp);
  EXPECT_EQ(plain.code, 1) << plain.err;
  EXPECT_EQ(plain.out.rfind("DIFFERENT: structure (format safetensors -> gguf", 0), 0u)
      << plain.out;
  EXPECT_NE(plain.out.find("DIFFERENT"), std::string::npos) << plain.out;
  BlzRun fail = Blz("diff " + st + " " + gguf + " --fail-on-diff", tmp);
  EXPECT_EQ(fail.code, 1) << fail.err;
  EXPECT_NE(fail.out.find("DIFFERENT"), std::string::npos) << fail.out;
  EXPECT_TRUE(fail.err.empty()) << fail.err;
  BlzRun help = Blz("diff --help", tmp);
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--fail-on-diff"), std::string::npos) << help.out;
  // Comparison flags make no sense when writing a patch.
  BlzRun usage = Blz("diff " + st + " " + st + " --values -o " + tmp / "p.blzpatch", tmp);
  EXPECT_EQ(usage.code, 2) << usage.err;
}

TEST(BlzCliTest, InspectStatsWarnsOnAllNaNAdapter) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string f = corpus + "/adapters/gemma2b-lora-f16/adapter_model.safetensors";
  BlzRun r = Blz("inspect " + f + " --stats", tmp);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("is all NaN/Inf"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: "), std::string::npos) << r.out;
  BlzRun j = Blz("inspect " + f + " --stats --json", tmp);
  ASSERT_EQ(j.code, 0) << j.err;
  nlohmann::json parsed = nlohmann::json::parse(j.out);
  ASSERT_TRUE(parsed.contains("stats")) << j.out.substr(0, 2000);
  EXPECT_GT(parsed["stats"]["summary"]["all_non_finite"].get<uint64_t>(), 0u);
  EXPECT_FALSE(parsed["stats"]["warnings"].empty());
  // A healthy model has no such warning.
  BlzRun ok = Blz("inspect " + corpus + "/tiny-gpt2/base/model.safetensors --stats", tmp);
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out.find("is all NaN/Inf"), std::string::npos) << ok.out;
}

// A one-tensor safetensors file whose tensor is called `name` (JSON-escaped by the caller).
std::string SafetensorsNamed(const std::string& json_name) {
  std::string header = "{\"" + json_name +
                       "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((header.size() >> (8 * i)) & 0xFF);
  return out + header + std::string(4, '\0');
}

TEST(BlzCliTest, InspectEscapesControlCharactersInNames) {
  TempDir tmp;
  const std::string file = tmp / "evil.safetensors";
  blz::testing::WriteFileBytes(file, SafetensorsNamed("a\\u001b[2Jb\\u009b1m\\nc"));
  BlzRun r = Blz("inspect " + file, tmp);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\xC2\x9B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a\\x1b[2Jb\\u{009B}1m\\nc"), std::string::npos) << r.out;
  BlzRun id = Blz("id " + file, tmp);
  EXPECT_EQ(id.out.find('\x1b'), std::string::npos) << id.out;
  BlzRun diff = Blz("diff -v " + file + " " + file, tmp);
  EXPECT_EQ(diff.out.find('\x1b'), std::string::npos) << diff.out;
  // JSON keeps the exact name (JSON's own escaping).
  BlzRun json = Blz("inspect --json " + file, tmp);
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["tensors"][0]["name"], "a\x1b[2Jb\xC2\x9B" "1m\nc");
}

TEST(BlzCliTest, ErrorForAPathWithNewlineAndEscIsOneLine) {
  TempDir tmp;
  // The shell passes the quoted newline and ESC through as part of one argument.
  BlzRun r = Blz("verify '" + (tmp / "bad\nname\x1b[2J.blz") + "'", tmp);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad\\nname\\x1b[2J.blz"), std::string::npos) << r.err;
  BlzRun unknown = Blz("'frob\x1b[2J'", tmp);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_EQ(unknown.err.find('\x1b'), std::string::npos) << unknown.err;
}

TEST(BlzCliTest, LoginWarnsAboutTokenOnTheCommandLine) {
  TempDir tmp;
  const std::string env = "BLZ_TOKEN= BLZ_CONFIG_DIR=" + (tmp / "cfg");
  // The warning comes before the check (the registry is unreachable here: nothing is stored).
  BlzRun argv = Blz("login 127.0.0.1:1 --timeout 5 --token tok-argv", tmp, env);
  EXPECT_EQ(argv.code, 6) << argv.err;
  EXPECT_NE(argv.err.find("blz: warning: a token given with --token is visible"),
            std::string::npos) << argv.err;
  EXPECT_NE(argv.err.find("--token-stdin"), std::string::npos) << argv.err;

  // The documented way: the token on stdin, with --token-stdin or without any flag.
  blz::testing::WriteFileBytes(tmp / "tok.txt", "tok-stdin\n");
  BlzRun piped =
      Blz("login 127.0.0.1:1 --timeout 5 --token-stdin < " + (tmp / "tok.txt"), tmp, env);
  EXPECT_EQ(piped.code, 6) << piped.err;
  EXPECT_EQ(piped.err.find("warning"), std::string::npos) << piped.err;
  BlzRun both = Blz("login 127.0.0.1:1 --token x --token-stdin < " + (tmp / "tok.txt"), tmp,
                    env);
  EXPECT_EQ(both.code, 2) << both.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "cfg/auth.json"));
}

// A hand-built SQUIZD v1 file (docs/squizd.md): one NPCL F32 layer "w" = [1.5, -2], no flags,
// with its BLZN name table.
std::string TinySquizd() {
  auto le = [](std::string* s, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s->push_back(char(v >> (8 * i)));
  };
  std::string f = "SQZD";
  le(&f, 1, 2);                 // version
  le(&f, 0, 4);                 // flags
  le(&f, 1, 2);                 // layer_count
  f.resize(256, '\0');
  le(&f, 0, 4);                 // layer_idx
  le(&f, 288, 8);               // weight_offset
  le(&f, 24, 8);                // weight_length
  le(&f, 0, 8);                 // scale_offset
  le(&f, 0, 4);                 // reserved
  f += "NPCL";
  le(&f, 0, 4);                 // f32
  le(&f, 1, 4);                 // ndim
  le(&f, 2, 4);                 // shape
  le(&f, 0x3FC00000, 4);        // 1.5f
  le(&f, 0xC0000000, 4);        // -2.0f
  f += "BLZN";
  le(&f, 1, 4);
  le(&f, 1, 4);
  f += "w";
  return f;
}

TEST(BlzCliTest, InspectAndVerifySquizd) {
  TempDir tmp;
  const std::string file = tmp / "m.squizd";
  blz::testing::WriteFileBytes(file, TinySquizd());
  BlzRun text = Blz("inspect " + file, tmp);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("SQUIZD v1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("NPCL-F32"), std::string::npos) << text.out;
  BlzRun json = Blz("inspect --json " + file, tmp);
  ASSERT_EQ(json.code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["format"], "squizd");
  EXPECT_EQ(j["layers"][0]["name"], "w");
  EXPECT_EQ(j["layers"][0]["shape"], nlohmann::json::array({2}));
  BlzRun ok = Blz("verify " + file, tmp);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("ok: "), std::string::npos) << ok.out;
  EXPECT_EQ(nlohmann::json::parse(Blz("verify --json " + file, tmp).out)["ok"], true);

  std::string bad = TinySquizd();
  bad[4] = 2;  // version 2
  blz::testing::WriteFileBytes(tmp / "bad.squizd", bad);
  BlzRun v = Blz("verify " + tmp / "bad.squizd", tmp);
  EXPECT_EQ(v.code, 4) << v.err;
  EXPECT_NE(v.err.find("header.version at byte 4"), std::string::npos) << v.err;
}

// `blz delta create|apply` on the corpus pair, and inspect/verify of the .wdelta: the reports
// say LOSSY, apply's measured error is create's, a wrong base or a damaged file is refused
// with the right exit code and nothing is written.
TEST(BlzCliTest, DeltaCreateApplyInspectVerify) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir tmp;
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  const std::string d = tmp / "ft.wdelta";
  BlzRun c = Blz("delta create " + base + " " + ft + " -o " + d + " --strategy bitdelta --json",
                 tmp);
  ASSERT_EQ(c.code, 0) << c.err;
  nlohmann::json created = nlohmann::json::parse(c.out);
  EXPECT_EQ(created["lossy"], true);
  EXPECT_GT(created["lossless_bytes"].get<uint64_t>(), created["file_bytes"].get<uint64_t>());
  const double rel_l2 = created["error"]["rel_l2"].get<double>();
  EXPECT_GT(rel_l2, 0);

  BlzRun a = Blz("delta apply " + base + " " + d + " -o " + tmp / "out" + " --target " + ft +
                     " --json", tmp);
  ASSERT_EQ(a.code, 0) << a.err;
  nlohmann::json applied = nlohmann::json::parse(a.out);
  EXPECT_EQ(applied["error"]["rel_l2"].get<double>(), rel_l2);
  EXPECT_EQ(applied["base_verified"], true);
  EXPECT_EQ(ReadFileBytes(tmp / "out/config.json"), ReadFileBytes(ft + "/config.json"));

  BlzRun text = Blz("delta apply " + base + " " + d + " -o " + tmp / "out2", tmp);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("LOSSY"), std::string::npos) << text.out;

  BlzRun i = Blz("inspect " + d, tmp);
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("strategy bitdelta"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("1-D tensor: stored exact"), std::string::npos) << i.out;
  BlzRun v = Blz("verify " + d + " --base " + base, tmp);
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("base matches parent_hash"), std::string::npos) << v.out;

  // The fine-tune is not the base: digest mismatch (exit 4), no output directory.
  BlzRun wrong = Blz("delta apply " + ft + " " + d + " -o " + tmp / "out3", tmp);
  EXPECT_EQ(wrong.code, 4) << wrong.err;
  EXPECT_NE(wrong.err.find("parent_hash"), std::string::npos) << wrong.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "out3"));
  // One flipped byte in a record's data: the checksum catches it.
  std::string bytes = ReadFileBytes(d);
  bytes[bytes.size() - 40] ^= 1;  // inside the last record's data
  blz::testing::WriteFileBytes(tmp / "bad.wdelta", bytes);
  BlzRun bad = Blz("verify " + tmp / "bad.wdelta", tmp);
  EXPECT_EQ(bad.code, 4) << bad.err;
  EXPECT_NE(bad.err.find("SHA-256"), std::string::npos) << bad.err;
  BlzRun strategy = Blz("delta create " + base + " " + ft + " -o " + tmp / "x.wdelta" +
                            " --strategy zip", tmp);
  EXPECT_EQ(strategy.code, 2) << strategy.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "x.wdelta"));
}

}  // namespace
}  // namespace blz::cli
