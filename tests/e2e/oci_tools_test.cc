// End-to-end with standard OCI tools and the maintenance commands: skopeo (Debian's) copies an
// OCI image layout into a running `blz serve` with Basic credentials, lists its tags, copies it
// back byte-exact and deletes it; `blz rm` removes a version and `blz gc` frees its bytes while
// the other version still pulls byte-identical.
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

#include "core/digest.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char kSkopeo[] = "/usr/bin/skopeo";

// A `blz serve` on 127.0.0.1:<free port> with a temporary data directory, for one test.
class OciToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServe(BLZ_BINARY, work_ / "data", {"--gc-grace", "0s", "--max-chain-depth", "0"},
                         work_ / "serve");  // whole versions: no full patch becomes garbage
    ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "serve.err");
    addr_ = server_.addr;
    token_ = server_.token;
  }
  void TearDown() override { StopServe(&server_); }

  ProcessResult Run(std::vector<std::string> argv,
                    const std::map<std::string, std::string>& env = {}) {
    return RunProcess(argv, env, work_.path());
  }
  ProcessResult Blz(std::vector<std::string> args) {
    args.insert(args.begin(), BLZ_BINARY);
    return Run(args, {{"BLZ_CONFIG_DIR", work_ / "config"}, {"BLZ_CACHE_DIR", work_ / "cache"},
                      {"BLZ_TOKEN", token_}});
  }

  TempDir work_;
  ServeProcess server_;
  std::string addr_;
  std::string token_;
};

// Writes an OCI image layout (image-spec image-layout.md) holding one image tagged `tag`: a gzip
// layer, its config and its manifest. Returns the manifest digest.
std::string WriteImageLayout(const std::string& dir, const std::string& tag) {
  fs::create_directories(dir + "/blobs/sha256");
  auto put = [&](const std::string& bytes) {
    const std::string hex = Sha256Hex(bytes);
    WriteFileBytes(dir + "/blobs/sha256/" + hex, bytes);
    return MakeDigest(hex);
  };
  // A gzip-compressed tar holding hello.txt ("hello from blz\n"): skopeo copies compressed
  // layers as they are (an uncompressed one it would compress on the way to a registry).
  static const char kLayer[] =
    "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xed\xd1\x31\x0a\x02\x31\x10\x05\xd0\xd4\x9e\x22"
    "\x27\x90\x11\x96\xcd\x79\x14\x94\x2d\x22\x0b\x6b\x04\xf1\xf4\xc6\x6d\x04\x7b\x05\xf1\xbd"
    "\xe6\x0f\xbf\xf9\xc5\x4c\xc7\x5a\xe7\x6d\xbb\xb5\xf4\x39\xd1\x8d\xc3\xb0\x66\xf7\x9e\x11"
    "\xbb\xf2\xba\xd7\xbe\x8c\x51\x52\x8e\xf4\x05\xd7\x4b\xdb\x2f\x7d\x32\xfd\xa7\xe9\xf9\xff"
    "\x7c\x5a\xe6\x73\x3e\xd4\xfb\x26\x01\x00\x00\x00\x00\x00\x00\x00\x00\xf0\x1b\x1e\x04\x36"
    "\xb0\xda\x00\x28\x00\x00";
  const std::string layer(kLayer, sizeof(kLayer) - 1);
  const std::string ld = put(layer);
  const std::string config =
      json{{"architecture", "amd64"},
           {"os", "linux"},
           {"rootfs", {{"type", "layers"}, {"diff_ids", json::array({ld})}}}}
          .dump();
  const std::string cd = put(config);
  const std::string manifest =
      json{{"schemaVersion", 2},
           {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
           {"config",
            {{"mediaType", "application/vnd.oci.image.config.v1+json"},
             {"digest", cd},
             {"size", config.size()}}},
           {"layers", json::array({{{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
                                    {"digest", ld},
                                    {"size", layer.size()}}})}}
          .dump();
  const std::string md = put(manifest);
  WriteFileBytes(dir + "/oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
  WriteFileBytes(dir + "/index.json",
                 json{{"schemaVersion", 2},
                      {"manifests",
                       json::array({{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                     {"digest", md},
                                     {"size", manifest.size()},
                                     {"annotations",
                                      {{"org.opencontainers.image.ref.name", tag}}}}})}}
                     .dump());
  return md;
}

std::map<std::string, std::string> Blobs(const std::string& layout) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(layout + "/blobs/sha256")) {
    out[e.path().filename().string()] = ReadFileBytes(e.path().string());
  }
  return out;
}

TEST_F(OciToolsTest, SkopeoCopiesInAndOutByteExactListsTagsAndDeletes) {
  if (!fs::exists(kSkopeo)) GTEST_SKIP() << "skopeo is not installed (scripts/setup.sh installs it)";
  const std::string src = work_ / "src";
  const std::string manifest_digest = WriteImageLayout(src, "v1");
  const std::string ref = "docker://" + addr_ + "/org/img:v1";
  const std::string creds = "admin:" + token_;

  ProcessResult anonymous =
      Run({kSkopeo, "copy", "--dest-tls-verify=false", "oci:" + src + ":v1", ref});
  EXPECT_NE(anonymous.exit_code, 0) << "an anonymous push must be refused";

  ProcessResult copy = Run({kSkopeo, "copy", "--dest-creds", creds, "--dest-tls-verify=false",
                            "oci:" + src + ":v1", ref});
  ASSERT_EQ(copy.exit_code, 0) << copy.out << copy.err;

  ProcessResult tags =
      Run({kSkopeo, "list-tags", "--tls-verify=false", "docker://" + addr_ + "/org/img"});
  ASSERT_EQ(tags.exit_code, 0) << tags.err;
  EXPECT_EQ(json::parse(tags.out)["Tags"], json::array({"v1"}));

  const std::string back = work_ / "back";
  ProcessResult out =
      Run({kSkopeo, "copy", "--src-tls-verify=false", ref, "oci:" + back + ":v1"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(Blobs(back), Blobs(src));  // manifest, config and layer, byte for byte
  EXPECT_EQ(json::parse(ReadFileBytes(back + "/index.json"))["manifests"][0]["digest"],
            manifest_digest);

  ProcessResult del =
      Run({kSkopeo, "delete", "--creds", creds, "--tls-verify=false", ref});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  ProcessResult gone = Run({kSkopeo, "inspect", "--tls-verify=false", ref});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_NE(gone.err.find("manifest unknown"), std::string::npos) << gone.err;
}

TEST_F(OciToolsTest, RmRemovesAVersionAndGcFreesOnlyItsBytes) {
  const std::string models = work_ / "generated";
  ProcessResult g = Run({"/usr/bin/python3",
                         std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py", models});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  ASSERT_EQ(Blz({"push", models + "/base", addr_ + "/org/m:base"}).exit_code, 0);
  ProcessResult ft = Blz({"push", models + "/ft", addr_ + "/org/m:ft"});
  ASSERT_EQ(ft.exit_code, 0) << ft.err;

  ProcessResult dry = Blz({"gc", addr_, "--dry-run", "--json"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(json::parse(dry.out)["blobs_removed"], 0);  // everything is referenced

  ProcessResult rm = Blz({"rm", addr_ + "/org/m:ft", "--json"});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(json::parse(rm.out)["removed"], true);
  ProcessResult tags = Blz({"tags", addr_ + "/org/m"});
  EXPECT_EQ(tags.out, "base\n");
  // The version's blobs stay linked until unlinked: rm of the same reference again fails.
  ProcessResult again = Blz({"rm", addr_ + "/org/m:ft"});
  EXPECT_NE(again.exit_code, 0);

  // The base still pulls byte-identical after a collection.
  ProcessResult gc = Blz({"gc", addr_, "--json"});
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  // (Into another store: the pusher's holds the version, pushes being kept locally.)
  ProcessResult pull = Blz({"pull", addr_ + "/org/m:base", "-o", work_ / "pulled", "--cache",
                            work_ / "pull-cache"});
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  for (const auto& e : fs::recursive_directory_iterator(models + "/base")) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), models + "/base").string();
    EXPECT_EQ(ReadFileBytes(work_ / ("pulled/" + rel)), ReadFileBytes(e.path().string())) << rel;
  }
}

}  // namespace
}  // namespace blz::testing
