#include "formats/inspect.h"

#include <gtest/gtest.h>

#include <string>

#include "formats/blz_archive.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::blz::testing::TempDir;
using ::blz::testing::TestModelOptions;
using ::blz::testing::WriteFileBytes;
using ::blz::testing::WriteTestModel;

TEST(Inspect, DescribesDirectoryArchiveAndFileAlike) {
  TempDir src, work;
  TestModelOptions o;
  o.shards = 2;
  o.with_subdir = true;
  o.with_edge_tensors = true;
  auto info = WriteTestModel(src.path(), o);
  ASSERT_TRUE(Pack(src.path(), work / "m.blz", nullptr).ok());

  auto dir = Describe(src.path());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto blz = Describe(work / "m.blz");
  ASSERT_TRUE(blz.ok()) << blz.status().ToString();
  EXPECT_EQ(dir->format, "hf-dir");
  EXPECT_EQ(blz->format, "blz");
  EXPECT_GT(blz->archive_bytes, blz->total_bytes - 1);

  for (const ModelSummary* s : {&*dir, &*blz}) {
    SCOPED_TRACE(s->format);
    ASSERT_EQ(s->files.size(), info.files.size());
    for (size_t i = 0; i < info.files.size(); ++i) EXPECT_EQ(s->files[i].path, info.files[i]);
    ASSERT_EQ(s->tensors.size(), info.tensors.size());
    uint64_t params = 0, bytes = 0;
    for (const auto& expected : info.tensors) {
      auto it = std::find_if(s->tensors.begin(), s->tensors.end(),
                             [&](const TensorSummary& t) { return t.name == expected.name; });
      ASSERT_NE(it, s->tensors.end()) << expected.name;
      EXPECT_EQ(it->dtype, expected.dtype);
      EXPECT_EQ(it->shape, expected.shape);
      EXPECT_EQ(it->file, expected.file);
      uint64_t n = 1;
      for (uint64_t d : expected.shape) n *= d;
      EXPECT_EQ(it->bytes, n * DTypeSize(expected.dtype));
      params += n;
      bytes += it->bytes;
    }
    EXPECT_EQ(s->parameters, params);
    EXPECT_EQ(s->tensor_bytes, bytes);
  }
  // The directory and its archive list the same tensors in the same order.
  for (size_t i = 0; i < dir->tensors.size(); ++i) {
    EXPECT_EQ(dir->tensors[i].name, blz->tensors[i].name);
  }
  EXPECT_EQ(dir->total_bytes, blz->total_bytes);
  for (const auto& f : blz->files) EXPECT_EQ(f.sha256.size(), 64u);

  auto one = Describe(src / "model-00001-of-00002.safetensors");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->format, "safetensors");
  ASSERT_EQ(one->files.size(), 1u);
  EXPECT_EQ(one->files[0].path, "model-00001-of-00002.safetensors");
  EXPECT_EQ(one->files[0].tensors, one->tensors.size());
}

TEST(Inspect, TextAndJson) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto s = Describe(corpus + "/tiny-gpt2/base");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->parameters, 102714u);  // as PROVENANCE.md states
  EXPECT_EQ(s->tensors.size(), 28u);

  const std::string text = SummaryText(*s);
  EXPECT_NE(text.find("format:   hf-dir"), std::string::npos) << text;
  EXPECT_NE(text.find("102714 parameters"), std::string::npos) << text;
  EXPECT_NE(text.find("F32 x28"), std::string::npos) << text;
  for (const auto& t : s->tensors) EXPECT_NE(text.find(t.name), std::string::npos) << t.name;
  EXPECT_NE(text.find("model.safetensors"), std::string::npos);

  const nlohmann::json j = SummaryJson(*s);
  EXPECT_EQ(j["format"], "hf-dir");
  EXPECT_EQ(j["parameters"], 102714u);
  EXPECT_EQ(j["dtypes"]["F32"], 28u);
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["path"], "config.json");
  EXPECT_EQ(j["files"][1]["tensors"], 28u);
  ASSERT_EQ(j["tensors"].size(), 28u);
  EXPECT_EQ(j["tensors"][0]["name"], s->tensors[0].name);
  EXPECT_EQ(j["tensors"][0]["shape"].get<std::vector<uint64_t>>(), s->tensors[0].shape);
  EXPECT_EQ(j["tensors"][0]["file"], "model.safetensors");
  EXPECT_FALSE(j.contains("archive_bytes"));
}

TEST(Inspect, Errors) {
  TempDir dir;
  EXPECT_EQ(Describe(dir / "missing").status().code(), Code::kNotFound);
  WriteFileBytes(dir / "notes.txt", "hello");
  EXPECT_EQ(Describe(dir / "notes.txt").status().code(), Code::kUnsupported);
  WriteFileBytes(dir / "x.blz", "BLZARCH\nxx");
  EXPECT_EQ(Describe(dir / "x.blz").status().code(), Code::kCorruption);
  WriteFileBytes(dir / "bad.safetensors", std::string(8, '\0') + "{}");
  EXPECT_EQ(Describe(dir / "bad.safetensors").status().code(), Code::kCorruption);
}

}  // namespace
}  // namespace blz::formats
