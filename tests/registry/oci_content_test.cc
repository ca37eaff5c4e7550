// Any OCI content through the pure handlers: image manifests, indexes, artifacts with a
// subject, Docker schema 2; the referrers API; DELETE of tags, manifests and blobs; blob links
// and cross-repository mounts (registry/manifest_handlers.cc, blob_handlers.cc,
// upload_handlers.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::ErrorCodeOf;
using testing::Harness;

const char kIndexType[] = "application/vnd.oci.image.index.v1+json";
const char kImageConfigType[] = "application/vnd.oci.image.config.v1+json";
const char kLayerType[] = "application/vnd.oci.image.layer.v1.tar+gzip";

json Descriptor(const std::string& media_type, const std::string& bytes) {
  return {{"mediaType", media_type},
          {"digest", MakeDigest(Sha256Hex(bytes))},
          {"size", bytes.size()}};
}

// An image manifest over a config and one layer, both pushed to `repo` first.
std::string ImageManifest(Harness* h, const std::string& repo, const std::string& salt,
                          const json& extra = json::object()) {
  const std::string config = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"salt\":\"" + salt +
                             "\"}";
  const std::string layer = "layer bytes " + salt;
  h->PushBlob(repo, config);
  h->PushBlob(repo, layer);
  json m = {{"schemaVersion", 2},
            {"mediaType", testing::kManifestType},
            {"config", Descriptor(kImageConfigType, config)},
            {"layers", json::array({Descriptor(kLayerType, layer)})}};
  m.update(extra);
  return m.dump(1);
}

Response Put(Harness* h, const std::string& repo, const std::string& ref,
             const std::string& body, const std::string& type) {
  return h->Call("PUT", "/v2/" + repo + "/manifests/" + ref, body, {{"Content-Type", type}});
}

TEST(OciContentTest, ImageManifestIsStoredByteExactAndServedWithItsType) {
  Harness h;
  const std::string m = ImageManifest(&h, "org/app", "a");
  Response put = Put(&h, "org/app", "v1", m, testing::kManifestType);
  ASSERT_EQ(put.status, 201) << put.body;
  const std::string digest = MakeDigest(Sha256Hex(m));
  EXPECT_EQ(put.Get("Docker-Content-Digest"), digest);
  EXPECT_FALSE(put.Get("OCI-Subject").has_value());
  for (const std::string& ref : {std::string("v1"), digest}) {
    Response get = h.Call("GET", "/v2/org/app/manifests/" + ref);
    ASSERT_EQ(get.status, 200) << get.body;
    EXPECT_EQ(get.body, m);  // byte-exact, indentation included
    EXPECT_EQ(get.Get("Content-Type"), testing::kManifestType);
    EXPECT_EQ(get.Get("Docker-Content-Digest"), digest);
  }
  // Not a model version: no blz structure, no patch endpoint input.
  Response tags = h.Call("GET", "/v2/org/app/tags/list");
  EXPECT_EQ(json::parse(tags.body)["tags"], json::array({"v1"}));
}

TEST(OciContentTest, ManifestWithoutMediaTypeTakesTheContentType) {
  Harness h;
  json m = json::parse(ImageManifest(&h, "org/app", "b"));
  m.erase("mediaType");
  Response put = Put(&h, "org/app", "empty", m.dump(), testing::kManifestType);
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/empty").Get("Content-Type"),
            testing::kManifestType);
}

TEST(OciContentTest, DockerSchema2ManifestAndListAreStored) {
  Harness h;
  json m = json::parse(ImageManifest(&h, "lib/x", "c"));
  m["mediaType"] = kDockerManifestMediaType;
  const std::string body = m.dump();
  ASSERT_EQ(Put(&h, "lib/x", "d2", body, kDockerManifestMediaType).status, 201);
  json list = {{"schemaVersion", 2},
               {"mediaType", kDockerManifestListMediaType},
               {"manifests", json::array({Descriptor(kDockerManifestMediaType, body)})}};
  Response put = Put(&h, "lib/x", "list", list.dump(), kDockerManifestListMediaType);
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(h.Call("GET", "/v2/lib/x/manifests/list").Get("Content-Type"),
            kDockerManifestListMediaType);
}

TEST(OciContentTest, RejectionsNameWhatIsWrong) {
  Harness h;
  const std::string good = ImageManifest(&h, "org/app", "d");
  struct Case {
    const char* what;
    std::string body;
    std::string type;
    std::string code;
  } cases[] = {
      {"not JSON", "blablabla", testing::kManifestType, "MANIFEST_INVALID"},
      {"type mismatch", good, kIndexType, "MANIFEST_INVALID"},
      {"unsupported type", json{{"schemaVersion", 2}, {"mediaType", "text/plain"}}.dump(),
       "text/plain", "MANIFEST_INVALID"},
      {"no config",
       json{{"schemaVersion", 2}, {"mediaType", testing::kManifestType}, {"layers", json::array()}}
           .dump(),
       testing::kManifestType, "MANIFEST_INVALID"},
      {"bad digest",
       [&] {
         json m = json::parse(good);
         m["layers"][0]["digest"] = "sha256:XYZ";
         return m.dump();
       }(),
       testing::kManifestType, "MANIFEST_INVALID"},
      {"unknown blob",
       [&] {
         json m = json::parse(good);
         m["layers"][0] = Descriptor(kLayerType, "never pushed");
         return m.dump();
       }(),
       testing::kManifestType, "MANIFEST_BLOB_UNKNOWN"},
      {"unknown child manifest",
       json{{"schemaVersion", 2},
            {"mediaType", kIndexType},
            {"manifests", json::array({Descriptor(testing::kManifestType, "{}")})}}
           .dump(),
       kIndexType, "MANIFEST_BLOB_UNKNOWN"},
      {"annotation not a string",
       [&] {
         json m = json::parse(good);
         m["annotations"] = {{"k", 1}};
         return m.dump();
       }(),
       testing::kManifestType, "MANIFEST_INVALID"},
  };
  for (const Case& c : cases) {
    Response r = Put(&h, "org/app", "bad", c.body, c.type);
    EXPECT_EQ(r.status, 400) << c.what << ": " << r.body;
    EXPECT_EQ(ErrorCodeOf(r), c.code) << c.what << ": " << r.body;
  }
  // Nothing was stored under the tag.
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/bad").status, 404);
}

TEST(OciContentTest, BlobsOfAnotherRepositoryAreNotReferencedNorReadable) {
  Harness h;
  const std::string m = ImageManifest(&h, "org/one", "e");
  // The same manifest in another repository: its blobs are not linked there.
  Response put = Put(&h, "org/two", "v1", m, testing::kManifestType);
  EXPECT_EQ(put.status, 400) << put.body;
  EXPECT_EQ(ErrorCodeOf(put), "MANIFEST_BLOB_UNKNOWN");
  const std::string layer = MakeDigest(Sha256Hex(std::string("layer bytes e")));
  EXPECT_EQ(h.Call("GET", "/v2/org/one/blobs/" + layer).status, 200);
  Response other = h.Call("HEAD", "/v2/org/two/blobs/" + layer);
  EXPECT_EQ(other.status, 404);
}

// Non-distributable ("foreign") layers are fetched from their urls and usually never pushed:
// a manifest whose foreign layers are absent is accepted (distribution-spec "Pushing
// Manifests"), one whose foreign layer was pushed has it checked like any layer, and an absent
// ordinary layer is still MANIFEST_BLOB_UNKNOWN.
TEST(OciContentTest, ForeignLayersNeedNotBePushed) {
  Harness h;
  json m = json::parse(ImageManifest(&h, "org/app", "foreign"));
  for (const char* type : {"application/vnd.oci.image.layer.nondistributable.v1.tar",
                           "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
                           "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
                           "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"}) {
    json layer = Descriptor(type, std::string("never pushed ") + type);
    layer["urls"] = json::array({"https://example.com/layer.tar"});
    m["layers"].push_back(std::move(layer));
  }
  const std::string body = m.dump();
  Response put = Put(&h, "org/app", "foreign", body, testing::kManifestType);
  ASSERT_EQ(put.status, 201) << put.body;
  Response get = h.Call("GET", "/v2/org/app/manifests/foreign");
  ASSERT_EQ(get.status, 200);
  EXPECT_EQ(get.body, body);
  // The foreign layer is not a blob of the repository.
  const std::string absent = m["layers"][1]["digest"];
  EXPECT_EQ(h.Call("HEAD", "/v2/org/app/blobs/" + absent).status, 404);

  // Pushed: checked like any layer (here its size is wrong).
  const std::string pushed = "a foreign layer pushed anyway";
  h.PushBlob("org/app", pushed);
  json wrong = json::parse(ImageManifest(&h, "org/app", "foreign"));
  json d = Descriptor("application/vnd.oci.image.layer.nondistributable.v1.tar", pushed);
  d["size"] = pushed.size() + 1;
  wrong["layers"].push_back(d);
  Response bad = Put(&h, "org/app", "wrong", wrong.dump(), testing::kManifestType);
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(ErrorCodeOf(bad), "MANIFEST_INVALID") << bad.body;
  EXPECT_NE(bad.body.find("has " + std::to_string(pushed.size() + 1) + " bytes"),
            std::string::npos)
      << bad.body;

  // An ordinary layer type is still required.
  json plain = json::parse(ImageManifest(&h, "org/app", "foreign"));
  plain["layers"].push_back(Descriptor(kLayerType, "an ordinary layer never pushed"));
  Response missing = Put(&h, "org/app", "plain", plain.dump(), testing::kManifestType);
  EXPECT_EQ(missing.status, 400) << missing.body;
  EXPECT_EQ(ErrorCodeOf(missing), "MANIFEST_BLOB_UNKNOWN") << missing.body;
}

TEST(OciContentTest, IndexArtifactsAndReferrers) {
  Harness h;
  const std::string subject = ImageManifest(&h, "org/app", "subject");
  const std::string subject_digest = MakeDigest(Sha256Hex(subject));
  // The subject need not exist (an attestation may be pushed first).
  const std::string empty = "{}";
  h.PushBlob("org/app", empty);
  const std::string sig = "signature";
  h.PushBlob("org/app", sig);
  auto artifact = [&](const std::string& type, const std::string& note) {
    json m = {{"schemaVersion", 2},
              {"mediaType", testing::kManifestType},
              {"artifactType", type},
              {"config", Descriptor("application/vnd.oci.empty.v1+json", empty)},
              {"layers", json::array({Descriptor(type, sig)})},
              {"subject", Descriptor(testing::kManifestType, subject)},
              {"annotations", {{"note", note}}}};
    return m.dump();
  };
  const std::string a = artifact("application/vnd.example.sig", "a");
  const std::string b = artifact("application/vnd.example.sbom", "b");
  for (const std::string* m : {&a, &b}) {
    Response put = Put(&h, "org/app", MakeDigest(Sha256Hex(*m)), *m, testing::kManifestType);
    ASSERT_EQ(put.status, 201) << put.body;
    EXPECT_EQ(put.Get("OCI-Subject"), subject_digest);
  }
  json index = {{"schemaVersion", 2},
                {"mediaType", kIndexType},
                {"artifactType", "application/vnd.example.bundle"},
                {"manifests", json::array({Descriptor(testing::kManifestType, a)})},
                {"subject", Descriptor(testing::kManifestType, subject)}};
  Response put = Put(&h, "org/app", "bundle", index.dump(), kIndexType);
  ASSERT_EQ(put.status, 201) << put.body;

  Response all = h.Call("GET", "/v2/org/app/referrers/" + subject_digest);
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_EQ(all.Get("Content-Type"), kIndexType);
  EXPECT_FALSE(all.Get("OCI-Filters-Applied").has_value());
  json listed = json::parse(all.body);
  EXPECT_EQ(listed["schemaVersion"], 2);
  ASSERT_EQ(listed["manifests"].size(), 3u);
  for (const json& d : listed["manifests"]) {
    if (d["digest"] == MakeDigest(Sha256Hex(a))) {
      EXPECT_EQ(d["artifactType"], "application/vnd.example.sig");
      EXPECT_EQ(d["annotations"]["note"], "a");
      EXPECT_EQ(d["size"], a.size());
      EXPECT_EQ(d["mediaType"], testing::kManifestType);
    }
  }
  Response sbom =
      h.Call("GET", "/v2/org/app/referrers/" + subject_digest + "?artifactType=application/vnd.example.sbom");
  ASSERT_EQ(sbom.status, 200);
  EXPECT_EQ(sbom.Get("OCI-Filters-Applied"), "artifactType");
  json only = json::parse(sbom.body)["manifests"];
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0]["digest"], MakeDigest(Sha256Hex(b)));

  // Never a 404 for a valid digest: an empty index.
  Response none = h.Call("GET", "/v2/org/app/referrers/" + MakeDigest(Sha256Hex(std::string("x"))));
  ASSERT_EQ(none.status, 200);
  EXPECT_TRUE(json::parse(none.body)["manifests"].empty());
  EXPECT_EQ(h.Call("GET", "/v2/org/app/referrers/sha256:nothex").status, 400);

  // A deleted referrer is no longer listed.
  ASSERT_EQ(h.Call("DELETE", "/v2/org/app/manifests/" + MakeDigest(Sha256Hex(b))).status, 202);
  EXPECT_EQ(json::parse(h.Call("GET", "/v2/org/app/referrers/" + subject_digest).body)["manifests"]
                .size(),
            2u);
}

TEST(OciContentTest, DeleteTagKeepsTheManifestDeleteManifestRemovesItsTags) {
  Harness h;
  const std::string m = ImageManifest(&h, "org/app", "f");
  const std::string digest = MakeDigest(Sha256Hex(m));
  ASSERT_EQ(Put(&h, "org/app", "v1", m, testing::kManifestType).status, 201);
  ASSERT_EQ(Put(&h, "org/app", "latest", m, testing::kManifestType).status, 201);

  EXPECT_EQ(h.Call("DELETE", "/v2/org/app/manifests/latest").status, 202);
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/latest").status, 404);
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/" + digest).status, 200);
  Response again = h.Call("DELETE", "/v2/org/app/manifests/latest");
  EXPECT_EQ(again.status, 404);
  EXPECT_EQ(ErrorCodeOf(again), "MANIFEST_UNKNOWN");

  EXPECT_EQ(h.Call("DELETE", "/v2/org/app/manifests/" + digest).status, 202);
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/" + digest).status, 404);
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/v1").status, 404);
  EXPECT_TRUE(json::parse(h.Call("GET", "/v2/org/app/tags/list").body)["tags"].empty());
  EXPECT_EQ(h.Call("DELETE", "/v2/org/app/manifests/" + digest).status, 404);
  // Deletes need a token.
  Response anonymous = h.Call("DELETE", "/v2/org/app/manifests/" + digest, "", {}, false);
  EXPECT_EQ(anonymous.status, 401);
}

TEST(OciContentTest, DeleteBlobUnlinksItFromOneRepositoryOnly) {
  Harness h;
  const std::string bytes = "shared bytes";
  const std::string digest = h.PushBlob("org/one", bytes);
  h.PushBlob("org/two", bytes);
  EXPECT_EQ(h.Call("DELETE", "/v2/org/one/blobs/" + digest).status, 202);
  EXPECT_EQ(h.Call("GET", "/v2/org/one/blobs/" + digest).status, 404);
  Response two = h.Call("GET", "/v2/org/two/blobs/" + digest);
  ASSERT_EQ(two.status, 200);
  EXPECT_EQ(testing::BodyOf(two), bytes);
  Response again = h.Call("DELETE", "/v2/org/one/blobs/" + digest);
  EXPECT_EQ(again.status, 404);
  EXPECT_EQ(ErrorCodeOf(again), "BLOB_UNKNOWN");
}

TEST(OciContentTest, NoDeleteAnswersUnsupported) {
  RegistryOptions o;
  o.allow_delete = false;
  Harness h(o);
  const std::string m = ImageManifest(&h, "org/app", "g");
  ASSERT_EQ(Put(&h, "org/app", "v1", m, testing::kManifestType).status, 201);
  for (const std::string& target :
       {std::string("/v2/org/app/manifests/v1"),
        "/v2/org/app/manifests/" + MakeDigest(Sha256Hex(m)),
        "/v2/org/app/blobs/" + MakeDigest(Sha256Hex(std::string("layer bytes g")))}) {
    Response r = h.Call("DELETE", target);
    EXPECT_EQ(r.status, 405) << target;
    EXPECT_EQ(ErrorCodeOf(r), "UNSUPPORTED");
  }
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/v1").status, 200);
}

TEST(OciContentTest, CrossRepositoryMount) {
  Harness h;
  const std::string digest = h.PushBlob("org/src", "mount me");
  // From a repository that holds it: linked at once.
  Response mounted =
      h.Call("POST", "/v2/org/dst/blobs/uploads/?mount=" + digest + "&from=org/src");
  ASSERT_EQ(mounted.status, 201) << mounted.body;
  EXPECT_EQ(mounted.Get("Location"), "/v2/org/dst/blobs/" + digest);
  EXPECT_EQ(testing::BodyOf(h.Call("GET", "/v2/org/dst/blobs/" + digest)), "mount me");
  // From a repository that does not hold it, or of a blob nobody has: an upload session.
  const std::string absent = MakeDigest(Sha256Hex(std::string("absent")));
  for (const std::string& q : {"?mount=" + digest + "&from=org/other", "?mount=" + absent,
                              "?mount=" + absent + "&from=org/src"}) {
    Response r = h.Call("POST", "/v2/org/third/blobs/uploads/" + q);
    EXPECT_EQ(r.status, 202) << q;
    EXPECT_EQ(r.Get("Location").value_or("").rfind("/v2/org/third/blobs/uploads/", 0), 0u) << q;
  }
  // Automatic mount (no from) of a blob linked somewhere, on a public registry.
  Response automatic = h.Call("POST", "/v2/org/fourth/blobs/uploads/?mount=" + digest);
  EXPECT_EQ(automatic.status, 201);
}

TEST(OciContentTest, AutomaticMountIsOffOnAPrivateRegistry) {
  RegistryOptions o;
  o.private_mode = true;
  Harness h(o);
  const std::string digest = h.PushBlob("org/src", "private bytes");
  EXPECT_EQ(h.Call("POST", "/v2/org/dst/blobs/uploads/?mount=" + digest).status, 202);
}

TEST(OciContentTest, ManifestBySha512Digest) {
  Harness h;
  const std::string m = ImageManifest(&h, "org/app", "h");
  const std::string digest = "sha512:" + Sha512Hex(m);
  Response put = Put(&h, "org/app", digest, m, testing::kManifestType);
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(put.Get("Docker-Content-Digest"), digest);
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/" + digest).body, m);
  Response wrong = Put(&h, "org/app", "sha512:" + std::string(128, 'a'), m,
                       testing::kManifestType);
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(ErrorCodeOf(wrong), "DIGEST_INVALID");
}

TEST(OciContentTest, Sha512BlobsAreUploadedServedAndReferenced) {
  Harness h;
  const std::string layer = "a layer addressed by sha512";
  const std::string digest = "sha512:" + Sha512Hex(layer);
  // Monolithic.
  Response put = h.Call("POST", "/v2/org/app/blobs/uploads/?digest=" + digest, layer);
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(put.Get("Docker-Content-Digest"), digest);
  Response got = h.Call("GET", "/v2/org/app/blobs/" + digest);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(testing::BodyOf(got), layer);
  // In a session, then the wrong sha512: refused, nothing stored.
  const std::string other = "another sha512 blob";
  Response start = h.Call("POST", "/v2/org/app/blobs/uploads/");
  ASSERT_EQ(start.status, 202);
  const std::string location = start.Get("Location").value_or("");
  Response wrong = h.Call("PUT", location + "?digest=sha512:" + std::string(128, 'a'), other);
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(ErrorCodeOf(wrong), "DIGEST_INVALID");
  EXPECT_EQ(h.Call("HEAD", "/v2/org/app/blobs/sha512:" + std::string(128, 'a')).status, 404);
  // A manifest may reference it.
  const std::string config = "{}";
  h.PushBlob("org/app", config);
  json m = {{"schemaVersion", 2},
            {"mediaType", testing::kManifestType},
            {"config", Descriptor("application/vnd.oci.empty.v1+json", config)},
            {"layers", json::array({{{"mediaType", kLayerType},
                                     {"digest", digest},
                                     {"size", layer.size()}}})}};
  Response pm = Put(&h, "org/app", "sha512", m.dump(), testing::kManifestType);
  EXPECT_EQ(pm.status, 201) << pm.body;
  // Listed (garbage collection sees it) and verifiable.
  auto listed = h.registry().blobs().ListDigests();
  ASSERT_TRUE(listed.ok());
  EXPECT_NE(std::find(listed->begin(), listed->end(), digest), listed->end());
  EXPECT_TRUE(h.registry().blobs().Verify(digest).ok());
}

TEST(OciContentTest, BlzModelVersionsStillGetTheirChecks) {
  Harness h;
  // A blz model manifest whose layer is not a .blz archive is refused, as before.
  const std::string not_archive = "not an archive";
  std::string m = h.ManifestFor("org/model", not_archive);
  Response r = h.PutManifest("org/model", "v1", m);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_INVALID");
  // A real archive is a version with a structure.
  const std::string archive = testing::TinyArchive(1);
  ASSERT_EQ(h.PutManifest("org/model", "v2", h.ManifestFor("org/model", archive)).status, 201);
  auto version = h.registry().db().FindVersion("org/model", MakeDigest(Sha256Hex(archive)));
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(version->structural_hash.size(), 64u);
  // Deleting its manifest removes the version.
  ASSERT_EQ(h.Call("DELETE", "/v2/org/model/manifests/v2").status, 202);  // the tag
  ASSERT_EQ(h.Call("DELETE", "/v2/org/model/manifests/" + version->manifest_digest).status, 202);
  EXPECT_FALSE(h.registry().db().FindVersion("org/model", MakeDigest(Sha256Hex(archive))).ok());
}

}  // namespace
}  // namespace blz::registry
