#include "client/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "tests/client/env_guard.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::EnvGuard;
using blz::testing::TempDir;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(AuthTest, PathPrecedence) {
  EnvGuard env;
  env.Set("BLZ_CONFIG_DIR", "/cfg/blz");
  env.Set("XDG_CONFIG_HOME", "/cfg/xdg");
  env.Set("HOME", "/cfg/home");
  EXPECT_EQ(*AuthFilePath(), "/cfg/blz/auth.json");
  env.Unset("BLZ_CONFIG_DIR");
  EXPECT_EQ(*AuthFilePath(), "/cfg/xdg/blz/auth.json");
  env.Unset("XDG_CONFIG_HOME");
  EXPECT_EQ(*AuthFilePath(), "/cfg/home/.config/blz/auth.json");
  env.Unset("HOME");
  EXPECT_EQ(AuthFilePath().status().code(), Code::kNotFound);
}

TEST(AuthTest, StoreAndLookupRoundTripWithMode0600) {
  TempDir tmp;
  const std::string path = tmp / "config/blz/auth.json";
  ASSERT_TRUE(StoreToken(path, "127.0.0.1:5000", "tok-one").ok());
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_EQ(ModeOf(tmp / "config/blz"), 0700u);
  ASSERT_TRUE(StoreToken(path, "[::1]:6000", "tok-two").ok());
  EXPECT_EQ(*LookupToken(path, "127.0.0.1:5000"), "tok-one");
  EXPECT_EQ(*LookupToken(path, "[::1]:6000"), "tok-two");
  EXPECT_EQ(*LookupToken(path, "127.0.0.1:5001"), "");
  // Replacing one entry keeps the other, and the mode.
  ASSERT_TRUE(StoreToken(path, "127.0.0.1:5000", "tok-three").ok());
  EXPECT_EQ(*LookupToken(path, "127.0.0.1:5000"), "tok-three");
  EXPECT_EQ(*LookupToken(path, "[::1]:6000"), "tok-two");
  EXPECT_EQ(ModeOf(path), 0600u);
}

TEST(AuthTest, RemoveTokenKeepsTheOtherEntries) {
  TempDir tmp;
  const std::string path = tmp / "auth.json";
  EXPECT_FALSE(*RemoveToken(path, "h:1"));  // no file: nothing to remove
  ASSERT_TRUE(StoreToken(path, "h:1", "one").ok());
  ASSERT_TRUE(StoreToken(path, "h:2", "two").ok());
  auto removed = RemoveToken(path, "h:1");
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_TRUE(*removed);
  EXPECT_EQ(*LookupToken(path, "h:1"), "");
  EXPECT_EQ(*LookupToken(path, "h:2"), "two");
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_FALSE(*RemoveToken(path, "h:1"));
  // A corrupt file is an error, and stays as it was.
  blz::testing::WriteFileBytes(path, "not json");
  EXPECT_EQ(RemoveToken(path, "h:2").status().code(), Code::kCorruption);
  EXPECT_EQ(blz::testing::ReadFileBytes(path), "not json");
}

TEST(AuthTest, ModeIs0600EvenWithPermissiveUmask) {
  TempDir tmp;
  mode_t old = ::umask(0);
  Status s = StoreToken(tmp / "auth.json", "h:1", "t");
  ::umask(old);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(ModeOf(tmp / "auth.json"), 0600u);
}

TEST(AuthTest, MissingFileMeansNoToken) {
  TempDir tmp;
  Result<std::string> t = LookupToken(tmp / "none.json", "h:1");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "");
}

TEST(AuthTest, RejectsBadTokensAndCorruptFiles) {
  TempDir tmp;
  const std::string path = tmp / "auth.json";
  EXPECT_EQ(StoreToken(path, "h:1", "").code(), Code::kInvalidArgument);
  EXPECT_EQ(StoreToken(path, "h:1", "two words").code(), Code::kInvalidArgument);
  EXPECT_EQ(StoreToken(path, "h:1", "inject\r\nX: y").code(), Code::kInvalidArgument);
  blz::testing::WriteFileBytes(path, "[1,2]");
  EXPECT_EQ(LookupToken(path, "h:1").status().code(), Code::kCorruption);
  EXPECT_EQ(StoreToken(path, "h:1", "t").code(), Code::kCorruption);
  blz::testing::WriteFileBytes(path, R"({"registries":{"h:1":{"token":42}}})");
  EXPECT_EQ(LookupToken(path, "h:1").status().code(), Code::kCorruption);
}

TEST(AuthTest, EnvironmentTokenOverridesFile) {
  TempDir tmp;
  EnvGuard env;
  env.Set("BLZ_CONFIG_DIR", tmp.path());
  ASSERT_TRUE(StoreToken(tmp / "auth.json", "h:1", "from-file").ok());
  env.Unset("BLZ_TOKEN");
  EXPECT_EQ(*ResolveToken("h:1"), "from-file");
  EXPECT_EQ(*ResolveToken("h:2"), "");
  env.Set("BLZ_TOKEN", "from-env");
  EXPECT_EQ(*ResolveToken("h:1"), "from-env");
  EXPECT_EQ(*ResolveToken("h:2"), "from-env");
}

}  // namespace
}  // namespace blz::client
