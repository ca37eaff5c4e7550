// The Ollama view through the registry's handlers (no sockets): manifest negotiation, the GGUF
// and config blobs, errors, and OCI clients unchanged.
#include "registry/ollama/ollama_handlers.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "registry/ollama/ollama_manifest.h"
#include "tests/registry/handler_harness.h"
#include "tests/registry/ollama/ollama_test_util.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::ErrorCodeOf;
using testing::GgufArchive;
using testing::Harness;
using testing::PushVersion;
using testing::SentBytes;
using testing::TinyArchive;
using testing::TinyGgufPath;

const Header kOllamaAccept{"Accept", ollama::kDockerManifestMediaType};

TEST(OllamaHandlers, GgufVersionAsDockerManifestWithTheFileAsLayer) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string gguf = blz::testing::ReadFileBytes(TinyGgufPath(corpus));
  Harness h;
  PushVersion(&h, "library/tiny", "latest", GgufArchive(TinyGgufPath(corpus)));

  Response m = h.Call("GET", "/v2/library/tiny/manifests/latest", "", {kOllamaAccept});
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.Get("Content-Type"), ollama::kDockerManifestMediaType);
  EXPECT_EQ(m.Get("Docker-Content-Digest"), MakeDigest(Sha256Hex(m.body)));
  json j = json::parse(m.body);
  EXPECT_EQ(j["schemaVersion"], 2);
  EXPECT_EQ(j["mediaType"], ollama::kDockerManifestMediaType);
  ASSERT_EQ(j["layers"].size(), 1u);
  EXPECT_EQ(j["layers"][0]["mediaType"], "application/vnd.ollama.image.model");
  const std::string gguf_digest = MakeDigest(Sha256Hex(gguf));
  EXPECT_EQ(j["layers"][0]["digest"], gguf_digest);
  EXPECT_EQ(j["layers"][0]["size"], gguf.size());
  EXPECT_EQ(j["config"]["mediaType"], "application/vnd.docker.container.image.v1+json");

  // The same bytes on every request (the config digest is stable).
  Response again = h.Call("GET", "/v2/library/tiny/manifests/latest", "", {kOllamaAccept});
  EXPECT_EQ(again.body, m.body);

  // The config blob: Ollama's ConfigV2, its digest as named.
  const std::string config_digest = j["config"]["digest"];
  Response c = h.Call("GET", "/v2/library/tiny/blobs/" + config_digest);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(MakeDigest(Sha256Hex(SentBytes(c))), config_digest);
  EXPECT_EQ(SentBytes(c).size(), j["config"]["size"].get<uint64_t>());
  json config = json::parse(SentBytes(c));
  EXPECT_EQ(config["model_format"], "gguf");
  EXPECT_EQ(config["model_family"], "llama");
  EXPECT_EQ(config["rootfs"]["diff_ids"], json::array({gguf_digest}));

  // The GGUF blob: the file's exact bytes; HEAD gives its size; Range as download.go asks.
  Response g = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest);
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(g.Get("Docker-Content-Digest"), gguf_digest);
  EXPECT_TRUE(SentBytes(g) == gguf);
  Response head = h.Call("HEAD", "/v2/library/tiny/blobs/" + gguf_digest);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.BodySize(), gguf.size());
  Response part = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest, "",
                         {{"Range", "bytes=1000-200999"}});
  ASSERT_EQ(part.status, 206) << part.body;
  EXPECT_EQ(part.Get("Content-Range"), "bytes 1000-200999/" + std::to_string(gguf.size()));
  EXPECT_TRUE(SentBytes(part) == gguf.substr(1000, 200000));
  Response past = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest, "",
                         {{"Range", "bytes=99999999-"}});
  EXPECT_EQ(past.status, 416);
  EXPECT_EQ(past.Get("Content-Range"), "bytes */" + std::to_string(gguf.size()));
}

// A GGUF version stored only as its full patch: the blob GETs (whole, and the parts Ollama's
// download.go asks for) are decoded from the chunks they touch; nothing is rebuilt.
TEST(OllamaHandlers, GgufBlobOfAFullPatchVersionNeedsNoRebuild) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string gguf = blz::testing::ReadFileBytes(TinyGgufPath(corpus));
  const std::string gguf_digest = MakeDigest(Sha256Hex(gguf));
  RegistryOptions options;
  options.full_patch = PatcherFullPatchFunctions();
  options.storage.background = false;
  options.storage.grace = std::chrono::milliseconds(0);
  Harness h(std::move(options));
  const std::string archive =
      PushVersion(&h, "library/tiny", "latest", GgufArchive(TinyGgufPath(corpus)));
  ASSERT_TRUE(h.registry().storage().Compress(archive).ok());
  ASSERT_FALSE(h.registry().blobs().Contains(archive));
  Response m = h.Call("GET", "/v2/library/tiny/manifests/latest", "", {kOllamaAccept});
  ASSERT_EQ(m.status, 200) << m.body;
  Response part = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest, "",
                         {{"Range", "bytes=1000-200999"}});
  ASSERT_EQ(part.status, 206) << part.body;
  EXPECT_TRUE(SentBytes(part) == gguf.substr(1000, 200000));
  Response g = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest);
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_TRUE(SentBytes(g) == gguf);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
}

// A GGUF version stored as a chain link (a patch from the previous version, whose tensor data
// it changes a little): its blob GETs and Ranges decode through the chain, rebuilding nothing.
TEST(OllamaHandlers, GgufBlobOfAChainedVersionNeedsNoRebuild) {
  BLZ_REQUIRE_CORPUS(corpus);
  blz::testing::TempDir tmp;
  std::string gguf = blz::testing::ReadFileBytes(TinyGgufPath(corpus));
  const std::string v1 = GgufArchive(TinyGgufPath(corpus));
  // A "fine-tune": the same tensors, some of the last one's bytes changed.
  for (size_t i = gguf.size() - 6000; i < gguf.size() - 4000; i += 3) gguf[i] ^= 0x01;
  blz::testing::WriteFileBytes(tmp / "model.gguf", gguf);
  const std::string gguf_digest = MakeDigest(Sha256Hex(gguf));
  RegistryOptions options;
  options.full_patch = PatcherFullPatchFunctions();
  options.storage.background = false;
  options.storage.grace = std::chrono::milliseconds(0);
  options.storage.max_chain_depth = 4;
  Harness h(options);
  const std::string d1 = PushVersion(&h, "library/tiny", "v1", v1);
  ASSERT_TRUE(h.registry().storage().Compress(d1).ok());
  const std::string d2 = PushVersion(&h, "library/tiny", "latest", GgufArchive(tmp / "model.gguf"));
  ASSERT_TRUE(h.registry().storage().Compress(d2).ok());
  auto link = h.registry().db().FindChainLink(d2);
  ASSERT_TRUE(link.ok()) << "not stored as a chain: " << link.status().ToString();
  EXPECT_EQ(link->parent_digest, d1);
  ASSERT_FALSE(h.registry().blobs().Contains(d2));
  // Compressing rebuilt the parent into the cache (to diff against it): empty it.
  std::filesystem::remove_all(h.data() + "/cache/sha256");
  h.Reopen(options);
  Response part = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest, "",
                         {{"Range", "bytes=1000-200999"}});
  ASSERT_EQ(part.status, 206) << part.body;
  EXPECT_EQ(part.file_path, "");  // decoded as it is sent
  EXPECT_TRUE(SentBytes(part) == gguf.substr(1000, 200000));
  Response tail = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest, "",
                         {{"Range", "bytes=" + std::to_string(gguf.size() - 7000) + "-"}});
  ASSERT_EQ(tail.status, 206) << tail.body;
  EXPECT_TRUE(SentBytes(tail) == gguf.substr(gguf.size() - 7000));
  Response g = h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest);
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_TRUE(SentBytes(g) == gguf);
  EXPECT_EQ(h.registry().storage().status().chain_rebuilds, 0u);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
}

TEST(OllamaHandlers, OciClientsKeepTheStoredManifest) {
  BLZ_REQUIRE_CORPUS(corpus);
  Harness h;
  const std::string archive = GgufArchive(TinyGgufPath(corpus));
  const std::string stored = h.ManifestFor("library/tiny", archive);
  ASSERT_EQ(h.PutManifest("library/tiny", "latest", stored).status, 201);
  const std::string docker_list =
      "application/vnd.docker.distribution.manifest.v2+json, "
      "application/vnd.docker.distribution.manifest.list.v2+json, "
      "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json";
  for (const std::vector<Header>& headers :
       {std::vector<Header>{}, std::vector<Header>{{"Accept", testing::kManifestType}},
        std::vector<Header>{{"Accept", docker_list}}}) {
    Response r = h.Call("GET", "/v2/library/tiny/manifests/latest", "", headers);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, stored);
    EXPECT_EQ(r.Get("Content-Type"), testing::kManifestType);
    EXPECT_EQ(r.Get("Docker-Content-Digest"), MakeDigest(Sha256Hex(stored)));
  }
}

TEST(OllamaHandlers, NotASingleGgufIsAClearError) {
  Harness h;
  PushVersion(&h, "org/safetensors", "v1", TinyArchive(1));
  Response r = h.Call("GET", "/v2/org/safetensors/manifests/v1", "", {kOllamaAccept});
  EXPECT_EQ(r.status, 406);
  EXPECT_EQ(ErrorCodeOf(r), "UNSUPPORTED");
  EXPECT_NE(r.body.find("org/safetensors:v1"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("no GGUF file"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("model.safetensors"), std::string::npos) << r.body;
  // An OCI client still gets it.
  EXPECT_EQ(h.Call("GET", "/v2/org/safetensors/manifests/v1").status, 200);
}

TEST(OllamaHandlers, UnknownDigestsStayUnknown) {
  BLZ_REQUIRE_CORPUS(corpus);
  Harness h;
  PushVersion(&h, "library/tiny", "latest", GgufArchive(TinyGgufPath(corpus)));
  PushVersion(&h, "other/repo", "latest", TinyArchive(2));
  const std::string gguf_digest =
      MakeDigest(Sha256Hex(blz::testing::ReadFileBytes(TinyGgufPath(corpus))));
  Response none = h.Call("GET", "/v2/library/tiny/blobs/sha256:" + std::string(64, '0'));
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(ErrorCodeOf(none), "BLOB_UNKNOWN");
  // The GGUF is a file of library/tiny only: another repository does not serve it.
  Response elsewhere = h.Call("GET", "/v2/other/repo/blobs/" + gguf_digest);
  EXPECT_EQ(elsewhere.status, 404);
  EXPECT_EQ(ErrorCodeOf(elsewhere), "BLOB_UNKNOWN");
}

TEST(OllamaHandlers, PrivateRegistryNeedsPullLikeAnyBlob) {
  BLZ_REQUIRE_CORPUS(corpus);
  RegistryOptions o;
  o.private_mode = true;
  Harness h(o);
  PushVersion(&h, "library/tiny", "latest", GgufArchive(TinyGgufPath(corpus)));
  const std::string gguf_digest =
      MakeDigest(Sha256Hex(blz::testing::ReadFileBytes(TinyGgufPath(corpus))));
  Response anon_manifest =
      h.Call("GET", "/v2/library/tiny/manifests/latest", "", {kOllamaAccept}, /*auth=*/false);
  EXPECT_EQ(anon_manifest.status, 401);
  ASSERT_TRUE(anon_manifest.Get("WWW-Authenticate").has_value());
  Response anon_blob =
      h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest, "", {}, /*auth=*/false);
  EXPECT_EQ(anon_blob.status, 401);
  EXPECT_EQ(h.Call("GET", "/v2/library/tiny/blobs/" + gguf_digest).status, 200);
}

}  // namespace
}  // namespace blz::registry
