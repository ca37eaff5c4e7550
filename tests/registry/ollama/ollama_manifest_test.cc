// The pure parts of Ollama's view (registry/ollama/ollama_manifest.h).
#include "registry/ollama/ollama_manifest.h"

#include <gtest/gtest.h>

#include <string>

#include "core/bytes.h"
#include "tests/test_util.h"

namespace blz::registry::ollama {
namespace {

TEST(WantsOllamaManifest, OnlyTheDockerSchema2TypeWithoutOci) {
  // What Ollama's pullModelManifest sends (server/images.go).
  EXPECT_TRUE(WantsOllamaManifest("application/vnd.docker.distribution.manifest.v2+json"));
  EXPECT_TRUE(WantsOllamaManifest(" Application/VND.docker.distribution.manifest.v2+json ;q=1"));
  EXPECT_TRUE(WantsOllamaManifest("application/vnd.docker.distribution.manifest.v2+json, "
                                  "application/vnd.docker.distribution.manifest.list.v2+json"));
  // OCI clients, and docker (which lists both): the stored manifest.
  EXPECT_FALSE(WantsOllamaManifest("application/vnd.oci.image.manifest.v1+json"));
  EXPECT_FALSE(WantsOllamaManifest(
      "application/vnd.docker.distribution.manifest.v2+json, "
      "application/vnd.docker.distribution.manifest.list.v2+json, "
      "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"));
  EXPECT_FALSE(WantsOllamaManifest("*/*"));
  EXPECT_FALSE(WantsOllamaManifest(std::nullopt));
  EXPECT_FALSE(WantsOllamaManifest(""));
}

TEST(HumanNumber, AsOllamasFormatPackage) {
  EXPECT_EQ(HumanNumber(7'000'000'000), "7B");
  EXPECT_EQ(HumanNumber(1'500'000'000), "1.5B");
  EXPECT_EQ(HumanNumber(3'000'000), "3M");
  EXPECT_EQ(HumanNumber(1'234'567), "1.23M");
  EXPECT_EQ(HumanNumber(102'714), "103K");
  EXPECT_EQ(HumanNumber(1'000), "1K");
  EXPECT_EQ(HumanNumber(999), "999");
  EXPECT_EQ(HumanNumber(0), "0");
}

TEST(FileTypeName, LlamaCppNames) {
  EXPECT_EQ(FileTypeName(0), "F32");
  EXPECT_EQ(FileTypeName(1), "F16");
  EXPECT_EQ(FileTypeName(2), "Q4_0");
  EXPECT_EQ(FileTypeName(4), "unknown");  // removed from llama.cpp
  EXPECT_EQ(FileTypeName(15), "Q4_K_M");
  EXPECT_EQ(FileTypeName(32), "BF16");
  EXPECT_EQ(FileTypeName(33), "unknown");
  EXPECT_EQ(FileTypeName(UINT32_MAX), "unknown");
}

TEST(ConfigJson, ShapedAsOllamasConfigV2AndDeterministic) {
  GgufModelInfo info{"llama", "7B", "Q4_0"};
  const std::string d = "sha256:" + std::string(64, 'a');
  const std::string config = ConfigJson(info, d);
  EXPECT_EQ(config,
            "{\"model_format\":\"gguf\",\"model_family\":\"llama\",\"model_families\":[\"llama\"],"
            "\"model_type\":\"7B\",\"file_type\":\"Q4_0\",\"architecture\":\"amd64\","
            "\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" +
                d + "\"]}}\n");
  EXPECT_EQ(ConfigJson(info, d), config);
}

TEST(ManifestJson, DockerSchema2WithTheOllamaModelLayer) {
  const std::string c = "sha256:" + std::string(64, 'c');
  const std::string g = "sha256:" + std::string(64, 'g');
  EXPECT_EQ(ManifestJson(c, 123, g, 4567),
            "{\"schemaVersion\":2,\"mediaType\":"
            "\"application/vnd.docker.distribution.manifest.v2+json\",\"config\":{\"mediaType\":"
            "\"application/vnd.docker.container.image.v1+json\",\"digest\":\"" +
                c +
                "\",\"size\":123},\"layers\":[{\"mediaType\":"
                "\"application/vnd.ollama.image.model\",\"digest\":\"" +
                g + "\",\"size\":4567}]}");
}

TEST(ReadGgufModelInfo, RealGgufFromOllamasOwnTestData) {
  BLZ_REQUIRE_CORPUS(corpus);
  // ollama/ollama api/data/llama-2-tiny-random.gguf (corpus PROVENANCE.md).
  const std::string bytes = blz::testing::ReadFileBytes(corpus + "/gguf/llama-2-tiny-random.gguf");
  ASSERT_EQ(bytes.size(), 1750560u);
  Result<GgufModelInfo> info = ReadGgufModelInfo(AsBytes(bytes), "llama-2-tiny-random.gguf");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->architecture, "llama");
  EXPECT_FALSE(info->parameters.empty());
  EXPECT_NE(info->parameters, "0");
  // Only the header is needed: a prefix that holds it parses the same.
  Result<GgufModelInfo> again =
      ReadGgufModelInfo(AsBytes(std::string_view(bytes).substr(0, 1 << 20)), "prefix");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->architecture, info->architecture);
  EXPECT_EQ(again->parameters, info->parameters);
  EXPECT_EQ(again->file_type, info->file_type);
  // A truncated header: kCorruption naming the source (the handler then reads more).
  Result<GgufModelInfo> cut = ReadGgufModelInfo(AsBytes(std::string_view(bytes).substr(0, 64)),
                                                "cut.gguf");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), Code::kCorruption);
  EXPECT_NE(cut.status().message().find("cut.gguf"), std::string::npos);
}

}  // namespace
}  // namespace blz::registry::ollama
