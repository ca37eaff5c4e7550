// ParseOciManifest (registry/oci_manifest.h).
#include "registry/oci_manifest.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

namespace blz::registry {
namespace {

using json = nlohmann::json;

const std::string kSha(64, 'a');

json Desc(const std::string& type) {
  return {{"mediaType", type}, {"digest", "sha256:" + kSha}, {"size", 3}};
}

TEST(OciManifestTest, ImageManifestFieldsAndUnknownFieldsIgnored) {
  json m = {{"schemaVersion", 2},
            {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
            {"config", Desc("application/vnd.oci.image.config.v1+json")},
            {"layers", json::array({Desc("l1"), Desc("l2")})},
            {"subject", Desc("application/vnd.oci.image.manifest.v1+json")},
            {"annotations", {{"b", "2"}, {"a", "1"}}},
            {"somethingNew", {1, 2, 3}}};
  m["config"]["data"] = "e30=";
  auto r = ParseOciManifest(m.dump(), "application/vnd.oci.image.manifest.v1+json; charset=x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kind, OciManifest::Kind::kImage);
  EXPECT_EQ(r->layers.size(), 2u);
  ASSERT_TRUE(r->subject.has_value());
  EXPECT_EQ(r->subject->digest, "sha256:" + kSha);
  // No artifactType: the config's media type is what referrers report.
  EXPECT_EQ(r->artifact_type, "application/vnd.oci.image.config.v1+json");
  EXPECT_FALSE(r->has_artifact_type_field);
  EXPECT_EQ(json::parse(r->annotations), (json{{"a", "1"}, {"b", "2"}}));
}

TEST(OciManifestTest, MediaTypeFromContentTypeOrFields) {
  json image = {{"schemaVersion", 2}, {"config", Desc("c")}, {"layers", json::array()}};
  auto a = ParseOciManifest(image.dump(), std::nullopt);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->media_type, "application/vnd.oci.image.manifest.v1+json");
  json index = {{"schemaVersion", 2}, {"manifests", json::array({Desc("m")})}};
  auto b = ParseOciManifest(index.dump(), std::nullopt);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->kind, OciManifest::Kind::kIndex);
  auto c = ParseOciManifest(image.dump(), kDockerManifestMediaType);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->media_type, kDockerManifestMediaType);
}

TEST(OciManifestTest, RejectionsNameTheField) {
  struct Case {
    json body;
    std::string needle;
  } cases[] = {
      {json::array(), "JSON object"},
      {{{"schemaVersion", 1}}, "schemaVersion"},
      {{{"schemaVersion", 2}, {"mediaType", 5}}, "mediaType"},
      {{{"schemaVersion", 2}, {"mediaType", "application/json"}}, "unsupported"},
      {{{"schemaVersion", 2}, {"config", Desc("c")}}, "'layers'"},
      {{{"schemaVersion", 2}, {"config", {{"mediaType", "c"}, {"size", 1}}}, {"layers", json::array()}},
       "config.digest"},
      {{{"schemaVersion", 2}, {"config", {{"digest", "sha256:" + kSha}, {"size", 1}}},
        {"layers", json::array()}},
       "config.mediaType"},
      {{{"schemaVersion", 2}, {"config", Desc("c")}, {"layers", json::array({{{"mediaType", "l"}, {"digest", "sha256:" + kSha}, {"size", -1}}})}},
       "layers[0].size"},
      {{{"schemaVersion", 2}, {"config", Desc("c")}, {"layers", json::array()}, {"subject", "x"}},
       "subject"},
      {{{"schemaVersion", 2}, {"config", Desc("c")}, {"layers", json::array()}, {"artifactType", 1}},
       "artifactType"},
      {{{"schemaVersion", 2}, {"manifests", 1}}, "'manifests'"},
  };
  for (const Case& c : cases) {
    auto r = ParseOciManifest(c.body.dump(), std::nullopt);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << r.status().message() << " lacks " << c.needle;
  }
  // Content-Type and mediaType disagree.
  json image = {{"schemaVersion", 2},
                {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                {"config", Desc("c")},
                {"layers", json::array()}};
  EXPECT_FALSE(ParseOciManifest(image.dump(), "application/vnd.oci.image.index.v1+json").ok());
  // Duplicate keys and NUL bytes (strict JSON).
  EXPECT_FALSE(ParseOciManifest("{\"schemaVersion\":2,\"schemaVersion\":2}", std::nullopt).ok());
  EXPECT_FALSE(ParseOciManifest(std::string("{\"schemaVersion\":2}\0", 19), std::nullopt).ok());
}

}  // namespace
}  // namespace blz::registry
