// End-to-end (issue 24, item 11): `blz inspect REF` and `blz diff REF REF` (and a local path
// against a REF) work on registry references, through a real `blz serve`. Inspect fetches only
// the manifest and the archive's headers (the client store stays empty); diff pulls into the
// client's store and compares from there.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Regular files below `dir` (0 when it does not exist).
size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file()) ++n;
  }
  return n;
}

class RemoteModelE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
    ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "serve.err");
    models_ = work_ / "models";
    ProcessResult g = RunProcess({"/usr/bin/python3",
                                  std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py",
                                  models_},
                                 {}, work_.path());
    ASSERT_EQ(g.exit_code, 0) << g.err;
  }
  void TearDown() override { StopServe(&server_); }

  // `blz ARGS` as a client whose store is <work>/cache-<client>.
  ProcessResult Blz(std::vector<std::string> args, const std::string& client = "c") {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args,
                      {{"BLZ_CONFIG_DIR", work_ / "config"},
                       {"BLZ_CACHE_DIR", work_ / ("cache-" + client)},
                       {"BLZ_TOKEN", server_.token}},
                      work_.path());
  }

  TempDir work_;
  ServeProcess server_;
  std::string models_;
};

TEST_F(RemoteModelE2ETest, InspectAndDiffTakeRegistryReferences) {
  const std::string repo = server_.addr + "/e2e/remote";
  ASSERT_EQ(Blz({"push", models_ + "/base", repo + ":base", "-q"}, "pusher").exit_code, 0);
  ASSERT_EQ(Blz({"push", models_ + "/ft", repo + ":ft", "-q"}, "pusher").exit_code, 0);

  // inspect REF: the same description as of the local directory, from the headers only.
  ProcessResult local = Blz({"inspect", "--json", models_ + "/base"});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  ProcessResult remote = Blz({"inspect", "--json", repo + ":base"}, "inspector");
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  const json l = json::parse(local.out), r = json::parse(remote.out);
  EXPECT_EQ(r["path"], repo + ":base");
  EXPECT_EQ(r["format"], "blz");
  EXPECT_EQ(r["structural_hash"], l["structural_hash"]);
  EXPECT_EQ(r["tensors"], l["tensors"]);
  EXPECT_EQ(r["parameters"], l["parameters"]);
  EXPECT_EQ(CountFiles(work_ / "cache-inspector"), 0u) << "inspect downloaded the archive";
  ProcessResult text = Blz({"inspect", "http://" + repo + ":base"}, "inspector");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("h.0.attn.c_attn.weight"), std::string::npos) << text.out;
  // --stats needs every value: the version is pulled into the store.
  ProcessResult stats = Blz({"inspect", "--fail-on-nan", repo + ":base"}, "inspector");
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_GT(CountFiles(work_ / "cache-inspector"), 0u);

  // diff REF REF: a fine-tune differs (exit 1); a local directory and the version pushed from
  // it are identical (exit 0).
  ProcessResult d = Blz({"diff", repo + ":base", repo + ":ft"}, "differ");
  EXPECT_EQ(d.exit_code, 1) << d.out << d.err;
  EXPECT_EQ(d.out.rfind("DIFFERENT: structure (1 tensor added), values of ", 0), 0u) << d.out;
  EXPECT_NE(d.out.find(", file config.json\n"), std::string::npos) << d.out;
  ProcessResult values = Blz({"diff", "--values", "--json", repo + ":base", repo + ":ft"},
                             "differ");
  EXPECT_EQ(values.exit_code, 1) << values.err;
  const json v = json::parse(values.out);
  EXPECT_EQ(v["identical"], false);
  EXPECT_EQ(v["values"]["inputs"]["a"]["path"], repo + ":base");
  EXPECT_GT(v["values"]["model"]["changed"].get<uint64_t>(), 0u);
  ProcessResult same = Blz({"diff", models_ + "/base", repo + ":base"}, "differ");
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_EQ(same.out.rfind("IDENTICAL", 0), 0u) << same.out;

  // A missing file is still "no such file" (exit 3), not a registry error.
  ProcessResult missing = Blz({"inspect", models_ + "/nope.safetensors"});
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;
  ProcessResult no_tag = Blz({"inspect", repo + ":nope"});
  EXPECT_EQ(no_tag.exit_code, 3) << no_tag.err;
}

}  // namespace
}  // namespace blz::testing
