#include "formats/value_diff_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/identify.h"
#include "formats/safetensors.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::blz::testing::TempDir;

void WriteF32Model(const std::string& path, const std::vector<std::string>& names,
                   const std::vector<float>& values) {
  std::vector<SafetensorsTensorView> views;
  const ByteSpan bytes{reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4};
  for (const std::string& n : names) views.push_back({n, DType::kF32, {values.size()}, bytes});
  Status s = WriteSafetensors(path, views);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(ValueDiffJsonTest, DocumentIsSchemaStructureValues) {
  TempDir tmp;
  WriteF32Model(tmp / "a.safetensors", {"model.layers.0.w", "x"}, {1, 2, 3});
  WriteF32Model(tmp / "b.safetensors", {"model.layers.0.w", "y"}, {1, 2, 4});
  auto sa = StructuralInputFromPath(tmp / "a.safetensors");
  auto sb = StructuralInputFromPath(tmp / "b.safetensors");
  ASSERT_TRUE(sa.ok() && sb.ok());
  const StructuralDiff structure = DiffStructures(*sa, *sb);
  auto values = DiffModels(tmp / "a.safetensors", tmp / "b.safetensors");
  ASSERT_TRUE(values.ok()) << values.status().ToString();

  auto text = ValueDiffJson(structure, *values);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // The parts, in order, each exactly its own builder's output.
  nlohmann::ordered_json want;
  want["schema"] = 1;
  want["structure"] = nlohmann::ordered_json::parse(DiffJson(structure));
  want["values"] = ModelDiffJson(*values);
  EXPECT_EQ(*text, want.dump(2) + "\n");
  EXPECT_EQ(text->rfind("{\n  \"schema\": 1,\n  \"structure\": {", 0), 0u) << *text;

  auto doc = ValueDiffDocument(structure, *values);
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(*doc, want);
  EXPECT_EQ((*doc)["structure"]["tensors_added"], nlohmann::ordered_json::array({"y"}));
  EXPECT_EQ((*doc)["values"]["added"][0]["name"], "y");
  EXPECT_EQ((*doc)["values"]["removed"][0]["name"], "x");
  EXPECT_EQ((*doc)["values"]["model"]["changed"], 1);

  // ComputeValueDiffJson does the same from the paths; labels replace only the input paths.
  auto computed = ComputeValueDiffJson(tmp / "a.safetensors", tmp / "b.safetensors");
  ASSERT_TRUE(computed.ok()) << computed.status().ToString();
  EXPECT_EQ(*computed, *text);
  ValueDiffJsonOptions o;
  o.a_label = "sha256:aa";
  o.b_label = "sha256:bb";
  o.threads = 1;
  auto labelled = ComputeValueDiffJson(tmp / "a.safetensors", tmp / "b.safetensors", o);
  ASSERT_TRUE(labelled.ok());
  auto parsed = nlohmann::ordered_json::parse(*labelled);
  EXPECT_EQ(parsed["values"]["inputs"]["a"]["path"], "sha256:aa");
  EXPECT_EQ(parsed["values"]["inputs"]["b"]["path"], "sha256:bb");
  parsed["values"]["inputs"] = want["values"]["inputs"];
  EXPECT_EQ(parsed, want);
}

TEST(ValueDiffJsonTest, InvalidUtf8IsReplacedNotThrown) {
  ModelDiff values;
  values.a_path = "a\xff.gguf";
  values.added.push_back({"blk.0.\xfe", "F32", {2}, "a\xff.gguf"});
  StructuralDiff structure;
  auto text = ValueDiffJson(structure, values);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("blk.0.\xef\xbf\xbd"), std::string::npos) << *text;  // U+FFFD
  EXPECT_FALSE(nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false).is_discarded());
}

TEST(ValueDiffJsonTest, ErrorsNameThePath) {
  TempDir tmp;
  WriteF32Model(tmp / "a.safetensors", {"w"}, {1});
  auto missing = ComputeValueDiffJson(tmp / "a.safetensors", tmp / "missing.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.safetensors"), std::string::npos);
  ::blz::testing::WriteFileBytes(tmp / "junk.safetensors", "junk");
  auto junk = ComputeValueDiffJson(tmp / "junk.safetensors", tmp / "a.safetensors");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace blz::formats
