// Patch uploads (registry/patch_upload_handlers.cc, docs/registry-api.md "Patch uploads"):
// POST /v2/<name>/blobs/uploads/?blz-patch-from=<base>, chunks of a patch, PUT ?digest=<target>,
// with the real patcher (CreatePatch here, ApplyPatch in the registry).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "patcher/patch.h"
#include "registry/registry.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::PushVersion;
using testing::TinyArchive;

RegistryOptions WithPatchUploads() {
  RegistryOptions o;
  o.apply_patch = PatcherApplyPatchFunction();
  return o;
}

class PatchUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TinyArchive(1, 2);
    target_ = TinyArchive(1, 2, 0.01);  // a fine-tune of the base
    base_digest_ = MakeDigest(Sha256Hex(base_));
    target_digest_ = MakeDigest(Sha256Hex(target_));
    blz::testing::WriteFileBytes(tmp_ / "a.blz", base_);
    blz::testing::WriteFileBytes(tmp_ / "b.blz", target_);
    patcher::DiffStats stats;
    Status s = patcher::CreatePatch(tmp_ / "a.blz", tmp_ / "b.blz", tmp_ / "p.blzpatch", {},
                                    &stats);
    ASSERT_TRUE(s.ok()) << s.ToString();
    patch_ = blz::testing::ReadFileBytes(tmp_ / "p.blzpatch");
  }

  // The blob `digest` as the registry serves it ("" when it answers something else than 200).
  static std::string Blob(Harness* h, const std::string& repo, const std::string& digest) {
    Response r = h->Call("GET", "/v2/" + repo + "/blobs/" + digest);
    return r.status == 200 ? BodyOf(r) : "";
  }

  // Nothing of a refused patch upload is left: no target blob, no session, no temp file.
  static void ExpectNothingStored(Harness* h, const std::string& digest) {
    EXPECT_FALSE(h->registry().blobs().Contains(digest));
    EXPECT_EQ(h->Call("HEAD", "/v2/org/m/blobs/" + digest).status, 404);
    EXPECT_EQ(h->UploadsCount(), 0u);
  }

  blz::testing::TempDir tmp_;
  std::string base_, target_, patch_, base_digest_, target_digest_;
};

TEST_F(PatchUploadTest, MonolithicPatchPublishesTheTargetAndItsManifestIsAccepted) {
  Harness h(WithPatchUploads());
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  ASSERT_LT(patch_.size(), target_.size());
  Response r = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_ +
                                  "&digest=" + target_digest_,
                      patch_);
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.Get("Docker-Content-Digest"), target_digest_);
  EXPECT_EQ(r.Get("Blz-Patch-From"), base_digest_);
  EXPECT_TRUE(Blob(&h, "org/m", target_digest_) == target_);
  // The manifest follows as usual: its archive is now a blob of the repository.
  Response m = h.PutManifest("org/m", "v2", h.ManifestFor("org/m", target_));
  EXPECT_EQ(m.status, 201) << m.body;
  EXPECT_EQ(h.UploadsCount(), 0u);
}

TEST_F(PatchUploadTest, ChunkedPatchIsResumedAndEveryReplicaKnowsItsBase) {
  Harness h(WithPatchUploads());
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  Response start = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_);
  ASSERT_EQ(start.status, 202) << start.body;
  EXPECT_EQ(start.Get("Blz-Patch-From"), base_digest_);
  const std::string location = start.Get("Location").value_or("");
  const size_t half = patch_.size() / 2;
  Response first = h.Call("PATCH", location, patch_.substr(0, half),
                          {{"Content-Range", "0-" + std::to_string(half - 1)}});
  ASSERT_EQ(first.status, 202) << first.body;

  // The client lost the connection and asks where the session is: any replica knows (the
  // offset and the base are in the shared metadata DB; the harness's replicas share the blob
  // directory, not the fs driver's upload parts, so the chunks go to the first one again).
  Harness replica(h, WithPatchUploads());
  Response status = replica.Call("GET", location);
  ASSERT_EQ(status.status, 204) << status.body;
  EXPECT_EQ(status.Get("Blz-Upload-Offset"), std::to_string(half));
  EXPECT_EQ(status.Get("Blz-Patch-From"), base_digest_);
  // A chunk at a stale offset is refused (416), as in any upload.
  Response stale = replica.Call("PATCH", location, patch_.substr(0, 8), {{"Content-Range", "0-7"}});
  EXPECT_EQ(stale.status, 416);
  Response second =
      h.Call("PATCH", location, patch_.substr(half),
             {{"Content-Range", std::to_string(half) + "-" + std::to_string(patch_.size() - 1)}});
  ASSERT_EQ(second.status, 202) << second.body;
  Response done = h.Call("PUT", location + "?digest=" + target_digest_);
  ASSERT_EQ(done.status, 201) << done.body;
  EXPECT_EQ(done.Get("Docker-Content-Digest"), target_digest_);
  EXPECT_TRUE(Blob(&h, "org/m", target_digest_) == target_);
  EXPECT_EQ(h.Call("GET", location).status, 404) << "the session is closed";
  EXPECT_EQ(h.PutManifest("org/m", "v2", h.ManifestFor("org/m", target_)).status, 201);
}

TEST_F(PatchUploadTest, PatchThatDoesNotProduceTheDigestStoresNothing) {
  Harness h(WithPatchUploads());
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  const std::string other = MakeDigest(Sha256Hex(std::string("another archive")));
  Response start = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_);
  ASSERT_EQ(start.status, 202);
  const std::string location = start.Get("Location").value_or("");
  Response r = h.Call("PUT", location + "?digest=" + other, patch_);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorCodeOf(r), "DIGEST_INVALID");
  EXPECT_NE(r.body.find(target_digest_), std::string::npos) << r.body;  // what it does rebuild
  ExpectNothingStored(&h, other);
  ExpectNothingStored(&h, target_digest_);
  EXPECT_EQ(h.Call("GET", location).status, 404) << "an unusable session is discarded";
  // Monolithic likewise.
  Response mono = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_ +
                                     "&digest=" + other,
                         patch_);
  EXPECT_EQ(mono.status, 400);
  EXPECT_EQ(ErrorCodeOf(mono), "DIGEST_INVALID");
  ExpectNothingStored(&h, other);
}

TEST_F(PatchUploadTest, UnknownBaseIsBlobUnknown) {
  Harness h(WithPatchUploads());
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  const std::string unknown = MakeDigest(Sha256Hex(std::string("nobody pushed this")));
  Response r = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + unknown);
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(ErrorCodeOf(r), "BLOB_UNKNOWN");
  const nlohmann::json detail = nlohmann::json::parse(r.body)["errors"][0]["detail"];
  EXPECT_EQ(detail["blz_patch_from"], unknown);
  // A blob that is not a model version (the config) is no base either.
  const std::string config = h.PushBlob("org/m", "{\"archive_size\":1}");
  EXPECT_EQ(ErrorCodeOf(h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + config)),
            "BLOB_UNKNOWN");
  Response mono = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + unknown +
                                     "&digest=" + target_digest_,
                         patch_);
  EXPECT_EQ(ErrorCodeOf(mono), "BLOB_UNKNOWN");
  ExpectNothingStored(&h, target_digest_);
  // Malformed: 400.
  EXPECT_EQ(ErrorCodeOf(h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=sha256:xyz")),
            "DIGEST_INVALID");
}

TEST_F(PatchUploadTest, UnreadableBaseAnswersLikeAnUnknownOne) {
  RegistryOptions o = WithPatchUploads();
  o.private_mode = true;
  Harness h(o);
  ASSERT_EQ(PushVersion(&h, "org/secret", "v1", base_), base_digest_);
  auto token = h.registry().db().CreateToken("b-writer", "org/b:pull,push", std::nullopt);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  const Header writer{"Authorization", "Bearer " + *token};
  const std::string unknown = MakeDigest(Sha256Hex(std::string("nobody pushed this")));

  Response hidden = h.Call("POST", "/v2/org/b/blobs/uploads/?blz-patch-from=" + base_digest_,
                           "", {writer}, false);
  Response none = h.Call("POST", "/v2/org/b/blobs/uploads/?blz-patch-from=" + unknown, "",
                         {writer}, false);
  EXPECT_EQ(hidden.status, 404) << hidden.body;
  std::string body = hidden.body;
  for (size_t pos; (pos = body.find(base_digest_)) != std::string::npos;) {
    body.replace(pos, base_digest_.size(), unknown);
  }
  EXPECT_EQ(body, none.body);
  Response mono = h.Call("POST", "/v2/org/b/blobs/uploads/?blz-patch-from=" + base_digest_ +
                                     "&digest=" + target_digest_,
                         patch_, {writer}, false);
  EXPECT_EQ(mono.status, 404);
  EXPECT_EQ(ErrorCodeOf(mono), "BLOB_UNKNOWN");
  EXPECT_FALSE(h.registry().blobs().Contains(target_digest_));

  // Once the caller may read the base's repository, the same upload goes through.
  auto reader = h.registry().db().CreateToken("b-writer-2", "org/b:pull,push;org/secret:pull",
                                              std::nullopt);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Response ok = h.Call("POST", "/v2/org/b/blobs/uploads/?blz-patch-from=" + base_digest_ +
                                   "&digest=" + target_digest_,
                       patch_, {{"Authorization", "Bearer " + *reader}}, false);
  EXPECT_EQ(ok.status, 201) << ok.body;
}

TEST_F(PatchUploadTest, CorruptPatchIsRefusedAndNothingIsKept) {
  Harness h(WithPatchUploads());
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  std::string damaged = patch_;
  damaged[damaged.size() - 40] ^= 0x5a;  // inside the last piece's payload
  std::string truncated = patch_.substr(0, patch_.size() - 100);
  for (const std::string& bad : {damaged, truncated, std::string("not a patch at all")}) {
    Response start = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_);
    ASSERT_EQ(start.status, 202);
    Response r = h.Call("PUT", start.Get("Location").value_or("") + "?digest=" + target_digest_, bad);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_TRUE(ErrorCodeOf(r) == "BLOB_UPLOAD_INVALID" || ErrorCodeOf(r) == "DIGEST_INVALID")
        << r.body;
    EXPECT_EQ(r.body.find(h.data()), std::string::npos) << "no server paths: " << r.body;
    ExpectNothingStored(&h, target_digest_);
  }
  // A patch against another base than the session's is refused too.
  Response start = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_);
  ASSERT_EQ(start.status, 202);
  blz::testing::WriteFileBytes(tmp_ / "c.blz", TinyArchive(7, 2));
  ASSERT_TRUE(patcher::CreatePatch(tmp_ / "c.blz", tmp_ / "b.blz", tmp_ / "q.blzpatch", {},
                                   nullptr)
                  .ok());
  Response r = h.Call("PUT", start.Get("Location").value_or("") + "?digest=" + target_digest_,
                      blz::testing::ReadFileBytes(tmp_ / "q.blzpatch"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCodeOf(r), "BLOB_UPLOAD_INVALID");
  ExpectNothingStored(&h, target_digest_);
}

TEST_F(PatchUploadTest, BaseStoredAsAFullPatchIsRebuiltToApplyTheUpload) {
  RegistryOptions o = WithPatchUploads();
  o.full_patch = PatcherFullPatchFunctions();
  o.storage.grace = std::chrono::milliseconds(0);
  Harness h(o);
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  h.registry().storage().WaitIdle();
  ASSERT_FALSE(h.registry().blobs().Contains(base_digest_)) << "the raw base should be dropped";
  Response r = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_ +
                                  "&digest=" + target_digest_,
                      patch_);
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(h.PutManifest("org/m", "v2", h.ManifestFor("org/m", target_, false)).status, 201);
}

// The bases of a push (GET /v2/<name>/blz/bases?push=1): versions the caller may read, of the
// pushed archive's structure, of this repository or named related by the client, the same
// structure and repository first.
TEST_F(PatchUploadTest, PushBasesOfferVersionsOfTheSameStructureOrRepository) {
  Harness h(WithPatchUploads());
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  const std::string other_structure = PushVersion(&h, "org/other", "x", TinyArchive(3, 1));
  const std::string same_structure = PushVersion(&h, "org/other", "y", TinyArchive(5, 2));
  const std::string unknown = MakeDigest(Sha256Hex(std::string("nobody pushed this")));
  auto v1 = h.registry().db().FindVersion("org/m", base_digest_);
  ASSERT_TRUE(v1.ok());
  const std::string have = "&have=" + other_structure + "," + same_structure + "," + unknown +
                           "," + base_digest_ + "," + target_digest_;
  auto digests = [](const Response& r) {
    std::vector<std::string> out;
    const nlohmann::json doc = nlohmann::json::parse(r.body);
    for (const auto& b : doc["bases"]) out.push_back(b["digest"]);
    return out;
  };
  Response r = h.Call("GET", "/v2/org/m/blz/bases?push=1" + have + "&structure=" +
                                 v1->structural_hash + "&to-push=" + target_digest_);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(nlohmann::json::parse(r.body)["to"].is_null());
  EXPECT_EQ(digests(r), (std::vector<std::string>{base_digest_, same_structure}));
  EXPECT_EQ(nlohmann::json::parse(r.body)["bases"][0]["name"], "org/m:v1");
  // Without the structure: the versions of this repository only.
  Response no_structure = h.Call("GET", "/v2/org/m/blz/bases?push=1" + have);
  ASSERT_EQ(no_structure.status, 200) << no_structure.body;
  EXPECT_EQ(digests(no_structure), (std::vector<std::string>{base_digest_}));
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blz/bases?push=1" + have + "&structure=xyz").status, 400);
  // An archive the client found to hold most of the pushed tensors (&related=) is a base
  // whatever its structure and repository, after those of the same structure and repository;
  // an unknown one stays out, and a malformed list is refused naming the parameter.
  Response related = h.Call("GET", "/v2/org/m/blz/bases?push=1" + have + "&structure=" +
                                       v1->structural_hash + "&related=" + other_structure +
                                       "," + unknown);
  ASSERT_EQ(related.status, 200) << related.body;
  EXPECT_EQ(digests(related),
            (std::vector<std::string>{base_digest_, same_structure, other_structure}));
  Response bad = h.Call("GET", "/v2/org/m/blz/bases?push=1" + have + "&related=sha256:xyz");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("related"), std::string::npos) << bad.body;
}

// Versions of one repository pushed within the same second (`created` has one-second
// resolution) rank in the client's `have` order, its newest first, not by digest: otherwise a
// push could patch from the version before the latest.
TEST_F(PatchUploadTest, PushBasesPushedInTheSameSecondKeepTheClientsOrder) {
  Harness h(WithPatchUploads());
  std::string a, b;
  for (int seed = 10; seed < 40 && a.empty(); seed += 2) {  // until a pair shares its second
    const std::string x = PushVersion(&h, "org/m", "t" + std::to_string(seed), TinyArchive(seed, 2));
    const std::string y =
        PushVersion(&h, "org/m", "t" + std::to_string(seed + 1), TinyArchive(seed + 1, 2));
    auto vx = h.registry().db().FindVersion("org/m", x);
    auto vy = h.registry().db().FindVersion("org/m", y);
    ASSERT_TRUE(vx.ok() && vy.ok());
    if (vx->created == vy->created) a = x, b = y;
  }
  ASSERT_FALSE(a.empty()) << "no two pushes landed in the same second";
  auto first = [&](const std::string& have) {
    Response r = h.Call("GET", "/v2/org/m/blz/bases?push=1&have=" + have);
    EXPECT_EQ(r.status, 200) << r.body;
    const nlohmann::json doc = nlohmann::json::parse(r.body);
    return doc["bases"].empty() ? std::string() : doc["bases"][0]["digest"].get<std::string>();
  };
  // Whichever digest sorts first, each order of `have` puts its own first entry first.
  EXPECT_EQ(first(a + "," + b), a);
  EXPECT_EQ(first(b + "," + a), b);
}

TEST_F(PatchUploadTest, RegistryWithoutTheFunctionRefusesPatchUploads) {
  Harness h;
  ASSERT_EQ(PushVersion(&h, "org/m", "v1", base_), base_digest_);
  Response r = h.Call("POST", "/v2/org/m/blobs/uploads/?blz-patch-from=" + base_digest_);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(ErrorCodeOf(r), "UNSUPPORTED");
}

}  // namespace
}  // namespace blz::registry
