#include "formats/model_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

namespace fs = std::filesystem;
using ::blz::testing::ReadFileBytes;
using ::blz::testing::TempDir;
using ::blz::testing::TestModelOptions;
using ::blz::testing::WriteFileBytes;
using ::blz::testing::WriteTestModel;

std::vector<std::string> Paths(const std::vector<ModelFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.path);
  return out;
}

TEST(ModelDir, ListsEveryRegularFileSortedAndRelative) {
  TempDir dir;
  TestModelOptions o;
  o.shards = 2;
  o.with_subdir = true;
  auto info = WriteTestModel(dir.path(), o);
  WriteFileBytes(dir / "a/b/c/deep.txt", "deep");
  WriteFileBytes(dir / ".gitattributes", "*.safetensors lfs");
  auto files = ListModelFiles(dir.path());
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  std::vector<std::string> expected = info.files;
  expected.push_back("a/b/c/deep.txt");
  expected.push_back(".gitattributes");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(Paths(*files), expected);
  for (const auto& f : *files) {
    EXPECT_EQ(f.abs_path, dir.path() + "/" + f.path);
    EXPECT_EQ(f.size, fs::file_size(f.abs_path)) << f.path;
    EXPECT_EQ(f.is_safetensors, f.path.size() > 12 &&
                                    f.path.substr(f.path.size() - 12) == ".safetensors");
  }
  // A trailing slash on the root changes nothing.
  auto again = ListModelFiles(dir.path() + "/");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Paths(*again), expected);
}

TEST(ModelDir, FollowsLinksToRegularFilesOnly) {
  TempDir dir, outside;
  WriteFileBytes(dir / "config.json", "{}");
  WriteFileBytes(outside / "big.bin", std::string(1000, 'x'));
  ASSERT_EQ(::symlink((outside / "big.bin").c_str(), (dir / "weights.bin").c_str()), 0);
  auto files = ListModelFiles(dir.path());
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(Paths(*files), (std::vector<std::string>{"config.json", "weights.bin"}));
  EXPECT_EQ((*files)[1].size, 1000u);  // the target's size, under the link's name

  ASSERT_EQ(::symlink(outside.path().c_str(), (dir / "linkdir").c_str()), 0);
  auto r = ListModelFiles(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("linkdir"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("directory"), std::string::npos) << r.status().ToString();
}

TEST(ModelDir, RefusesDanglingLinksAndSpecialFiles) {
  TempDir a, b;
  WriteFileBytes(a / "config.json", "{}");
  ASSERT_EQ(::symlink((a / "nowhere").c_str(), (a / "dangling").c_str()), 0);
  auto r = ListModelFiles(a.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dangling"), std::string::npos) << r.status().ToString();

  ASSERT_EQ(::mkfifo((b / "pipe").c_str(), 0600), 0);
  r = ListModelFiles(b.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("pipe"), std::string::npos) << r.status().ToString();
}

TEST(ModelDir, RefusesMissingRootAndFiles) {
  TempDir dir;
  EXPECT_EQ(ListModelFiles(dir / "missing").status().code(), Code::kNotFound);
  WriteFileBytes(dir / "f", "x");
  EXPECT_EQ(ListModelFiles(dir / "f").status().code(), Code::kInvalidArgument);
}

TEST(ModelDir, RefusesNonUtf8Names) {
  TempDir dir;
  WriteFileBytes(dir / "bad\xff.txt", "x");
  auto r = ListModelFiles(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("UTF-8"), std::string::npos) << r.status().ToString();
}

TEST(ShardIndex, ParsesAndChecksAGeneratedModel) {
  TempDir dir;
  TestModelOptions o;
  o.shards = 3;
  auto info = WriteTestModel(dir.path(), o);
  auto idx = ParseShardIndex(ReadFileBytes(dir / "model.safetensors.index.json"), "index");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  ASSERT_EQ(idx->weight_map.size(), info.tensors.size());
  for (const auto& t : info.tensors) EXPECT_EQ(idx->weight_map.at(t.name), t.file);
  auto files = ListModelFiles(dir.path());
  ASSERT_TRUE(files.ok());
  Status s = CheckShardIndexes(*files);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ShardIndex, RejectsBadIndexes) {
  EXPECT_EQ(ParseShardIndex("[]", "i").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseShardIndex("{\"metadata\":{}}", "i").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseShardIndex("{\"weight_map\":{\"a\":1}}", "i").status().code(),
            Code::kCorruption);
  EXPECT_EQ(ParseShardIndex("{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", "i").status().code(),
            Code::kCorruption);
}

TEST(ShardIndex, RejectsAMissingShardOrTensor) {
  TempDir dir;
  WriteTestModel(dir.path());
  WriteFileBytes(dir / "model.safetensors.index.json",
                 "{\"weight_map\":{\"model.norm.weight\":\"other.safetensors\"}}");
  auto files = ListModelFiles(dir.path());
  ASSERT_TRUE(files.ok());
  Status s = CheckShardIndexes(*files);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("other.safetensors"), std::string::npos) << s.ToString();

  fs::remove(dir / "model.safetensors.index.json");
  WriteFileBytes(dir / "model.safetensors.index.json",
                 "{\"weight_map\":{\"model.nothing\":\"model.safetensors\"}}");
  s = CheckShardIndexes(*files);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("model.nothing"), std::string::npos) << s.ToString();

  fs::remove(dir / "model.safetensors.index.json");
  WriteFileBytes(dir / "model.safetensors.index.json",
                 "{\"weight_map\":{\"model.norm.weight\":\"../model.safetensors\"}}");
  s = CheckShardIndexes(*files);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
}

}  // namespace
}  // namespace blz::formats
