#include "client/manifest.h"

#include <gtest/gtest.h>

#include <string>

namespace blz::client {
namespace {

const std::string kA = "sha256:" + std::string(64, 'a');
const std::string kC = "sha256:" + std::string(64, 'c');

ModelManifest Sample() {
  ModelManifest m;
  m.config_digest = kC;
  m.config_size = 123;
  m.archive_digest = kA;
  m.archive_size = 456;
  return m;
}

TEST(ManifestTest, ConfigJsonIsTheDocumentedShape) {
  ModelConfig c;
  c.archive_digest = kA;
  c.archive_size = 10;
  c.files = 2;
  c.tensors = 3;
  c.tensor_bytes = 4;
  EXPECT_EQ(BuildConfigJson(c), R"({"archive_digest":")" + kA +
                                    R"(","archive_size":10,"files":2,"tensors":3,"tensor_bytes":4})");
}

TEST(ManifestTest, ManifestJsonIsTheDocumentedShape) {
  EXPECT_EQ(BuildManifestJson(Sample()),
            R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
            R"("artifactType":"application/vnd.blz.model.v1","config":{"mediaType":)"
            R"("application/vnd.blz.model.config.v1+json","digest":")" + kC +
            R"(","size":123},"layers":[{"mediaType":"application/vnd.blz.archive.v1","digest":")" +
            kA + R"(","size":456,"annotations":{"org.opencontainers.image.title":"model.blz"}}]})");
}

TEST(ManifestTest, RoundTrip) {
  Result<ModelManifest> m = ParseManifest(BuildManifestJson(Sample()));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config_digest, kC);
  EXPECT_EQ(m->config_size, 123u);
  EXPECT_EQ(m->archive_digest, kA);
  EXPECT_EQ(m->archive_size, 456u);
  EXPECT_EQ(m->title, "model.blz");
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

TEST(ManifestTest, RejectsWrongShapes) {
  const std::string good = BuildManifestJson(Sample());
  struct Case {
    std::string json;
    Code code;
  };
  const std::string layer =
      R"({"mediaType":"application/vnd.blz.archive.v1","digest":")" + kA + R"(","size":1})";
  const Case cases[] = {
      {"not json", Code::kCorruption},
      {"[]", Code::kCorruption},
      {Replace(good, R"("schemaVersion":2)", R"("schemaVersion":1)"), Code::kCorruption},
      {Replace(good, "application/vnd.oci.image.manifest.v1+json",
               "application/vnd.oci.image.index.v1+json"),
       Code::kUnsupported},
      {Replace(good, R"("artifactType":"application/vnd.blz.model.v1")",
               R"("artifactType":"application/x-other")"),
       Code::kUnsupported},
      {Replace(good, "application/vnd.blz.archive.v1", "application/vnd.oci.image.layer.v1.tar"),
       Code::kUnsupported},
      {Replace(good, R"("layers":[)", R"("layers":[)" + layer + ","), Code::kCorruption},
      {Replace(good, R"("layers":[{)", R"("layers":[],"x":[{)"), Code::kCorruption},
      {Replace(good, kA, "sha256:abc"), Code::kCorruption},
      {Replace(good, kC, "md5:" + std::string(32, '0')), Code::kCorruption},
      {Replace(good, R"("size":456)", R"("size":-1)"), Code::kCorruption},
      {Replace(good, R"("size":123)", R"("size":"123")"), Code::kCorruption},
      // Issue 9, defect 3: valid JSON + NUL + junk must not parse as the JSON before the NUL.
      {good + std::string("\0junk", 5), Code::kCorruption},
      {Replace(good, R"("schemaVersion":2)", R"("schemaVersion":2,"schemaVersion":2)"),
       Code::kCorruption},
  };
  for (const Case& c : cases) {
    Result<ModelManifest> m = ParseManifest(c.json);
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_EQ(m.status().code(), c.code) << c.json << " -> " << m.status().ToString();
  }
}

}  // namespace
}  // namespace blz::client
