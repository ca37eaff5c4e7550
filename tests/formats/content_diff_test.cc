#include "formats/content_diff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "formats/blz_archive.h"
#include "formats/identify.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using blz::testing::TempDir;
using blz::testing::TestModelOptions;
using blz::testing::WriteFileBytes;
using blz::testing::WriteTestModel;

StructuralDiff StructureOf(const std::string& a, const std::string& b) {
  Result<StructuralInput> sa = StructuralInputFromPath(a);
  Result<StructuralInput> sb = StructuralInputFromPath(b);
  EXPECT_TRUE(sa.ok() && sb.ok());
  return DiffStructures(*sa, *sb);
}

// A fine-tune with frozen embeddings: every other float tensor changed, found the same way
// from directories (bytes) and from their archives (header digests).
TEST(ContentDiffTest, FineTuneValuesByBytesAndByDigest) {
  TempDir tmp;
  TestModelOptions ft;
  ft.perturb_scale = 0.01;
  ft.frozen_prefix = "model.embed_tokens";
  WriteTestModel(tmp / "base");
  WriteTestModel(tmp / "ft", ft);
  PackStats stats;
  ASSERT_TRUE(Pack(tmp / "base", tmp / "base.blz", &stats).ok());
  ASSERT_TRUE(Pack(tmp / "ft", tmp / "ft.blz", &stats).ok());
  const std::vector<std::string> want = {
      "model.layers.0.attn.qkv.weight", "model.layers.0.attn.qkv.bias",
      "model.layers.0.mlp.up.weight",   "model.layers.0.mlp.down.weight",
      "model.layers.1.attn.qkv.weight", "model.layers.1.attn.qkv.bias",
      "model.layers.1.mlp.up.weight",   "model.layers.1.mlp.down.weight",
      "model.norm.weight"};
  for (bool archives : {false, true}) {
    const std::string a = tmp / (archives ? "base.blz" : "base");
    const std::string b = tmp / (archives ? "ft.blz" : "ft");
    const StructuralDiff s = StructureOf(a, b);
    EXPECT_TRUE(s.identical());
    Result<ContentDiff> c = DiffContent(a, b, StructurallyChangedTensors(s));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->by_digest, archives);
    EXPECT_EQ(c->tensors_compared, 10u);
    std::vector<std::string> got = c->tensors_changed;
    std::vector<std::string> sorted_want = want;
    std::sort(got.begin(), got.end());
    std::sort(sorted_want.begin(), sorted_want.end());
    EXPECT_EQ(got, sorted_want);
    EXPECT_FALSE(c->FilesDiffer());
    EXPECT_EQ(DiffVerdictLine(s, *c), "DIFFERENT: values of 9 of 10 tensors");
  }
  // A directory against its own archive: nothing differs.
  Result<ContentDiff> same = DiffContent(tmp / "base", tmp / "base.blz");
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(same->identical());
  EXPECT_EQ(same->files_compared, 1u);  // config.json
  EXPECT_EQ(DiffVerdictLine(StructureOf(tmp / "base", tmp / "base.blz"), *same),
            "IDENTICAL: same structure, tensor values (10 tensors) and files (1)");
}

TEST(ContentDiffTest, NonTensorFilesAddedRemovedChanged) {
  TempDir tmp;
  TestModelOptions with_notes;
  with_notes.with_subdir = true;
  WriteTestModel(tmp / "a");
  WriteTestModel(tmp / "b", with_notes);
  WriteFileBytes(tmp / "b/config.json", "{}\n");
  Result<ContentDiff> c = DiffContent(tmp / "a", tmp / "b");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->tensors_changed.empty());
  EXPECT_EQ(c->files_changed, std::vector<std::string>{"config.json"});
  EXPECT_EQ(c->files_added, std::vector<std::string>{"extra/notes.txt"});
  EXPECT_TRUE(c->files_removed.empty());
  EXPECT_EQ(DiffVerdictLine(StructureOf(tmp / "a", tmp / "b"), *c),
            "DIFFERENT: files config.json, extra/notes.txt");
  Result<ContentDiff> back = DiffContent(tmp / "b", tmp / "a");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->files_removed, std::vector<std::string>{"extra/notes.txt"});
  const nlohmann::ordered_json j = ContentDiffJson(*back);
  EXPECT_EQ(j["compared_by"], "bytes");
  EXPECT_EQ(j["files_removed"][0], "extra/notes.txt");
}

}  // namespace
}  // namespace blz::formats
