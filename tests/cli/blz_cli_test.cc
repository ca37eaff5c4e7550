// Runs the `blz` binary: exit codes, one-line errors, offline commands on real files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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

TEST(BlzCliTest, MissingFileExit3) {
  TempDir tmp;
  BlzRun r = Blz("verify " + tmp / "nope.blz", tmp);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.err.rfind("blz: error: not found: ", 0), 0u) << r.err;
}

TEST(BlzCliTest, UnreachableRegistryExit6) {
  TempDir tmp;
  BlzRun r = Blz("pull 127.0.0.1:1/org/m:v1 --timeout 5 --cache " + tmp / "c", tmp);
  EXPECT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
}

TEST(BlzCliTest, LoginStoresTokenWithMode0600) {
  TempDir tmp;
  const std::string env = "BLZ_CONFIG_DIR=" + tmp / "cfg";
  BlzRun r = Blz("login 127.0.0.1:5000 --token abc123", tmp, env);
  ASSERT_EQ(r.code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat((tmp / "cfg/auth.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(ReadFileBytes(tmp / "cfg/auth.json").find("abc123"), std::string::npos);
  // From stdin.
  blz::testing::WriteFileBytes(tmp / "token.txt", "tok-from-stdin\n");
  BlzRun piped = Blz("login 127.0.0.1:5001 < " + tmp / "token.txt", tmp, env);
  ASSERT_EQ(piped.code, 0) << piped.err;
  EXPECT_NE(ReadFileBytes(tmp / "cfg/auth.json").find("tok-from-stdin"), std::string::npos);
  BlzRun bad = Blz("login nohost --token x", tmp, env);
  EXPECT_EQ(bad.code, 2);
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
}

}  // namespace
}  // namespace blz::cli
