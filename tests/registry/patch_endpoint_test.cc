// The patch endpoint with the real patcher (registry/patch_function.cc ->
// blz::patcher::CreatePatch). In its own test binary because it links the patcher's
// implementation; registry_test covers the endpoint's logic with a stand-in.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/identify.h"
#include "formats/value_diff_json.h"
#include "patcher/patch.h"
#include "registry/registry.h"
#include "tests/formats/test_models.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using testing::BodyOf;
using testing::Harness;

// Pushes `archive_path` as version `tag` of `repo`; returns the archive digest.
std::string PushArchive(Harness* h, const std::string& repo, const std::string& tag,
                        const std::string& archive_path) {
  const std::string archive = blz::testing::ReadFileBytes(archive_path);
  Response r = h->PutManifest(repo, tag, h->ManifestFor(repo, archive));
  EXPECT_EQ(r.status, 201) << r.body;
  return MakeDigest(Sha256Hex(archive));
}

// Requests the patch twice (miss, then hit), applies it to the base and checks the target comes
// back byte for byte.
void CheckPatchRoundTrip(const std::string& base_dir, const std::string& target_dir) {
  blz::testing::TempDir tmp;
  formats::PackStats ps;
  ASSERT_TRUE(formats::Pack(base_dir, tmp / "a.blz", &ps).ok());
  ASSERT_TRUE(formats::Pack(target_dir, tmp / "b.blz", &ps).ok());

  RegistryOptions options;
  options.create_patch = PatcherPatchFunction();
  Harness h(options);
  const std::string a = PushArchive(&h, "org/model", "v1", tmp / "a.blz");
  const std::string b = PushArchive(&h, "org/model", "v2", tmp / "b.blz");
  const std::string target = "/v2/org/model/blz/patch?from=" + a + "&to=" + b;

  Response miss = h.Call("GET", target, "", {}, /*auth=*/false);
  ASSERT_EQ(miss.status, 200) << miss.body;
  EXPECT_EQ(miss.Get("Blz-Patch-Cache"), "miss");
  const std::string patch = BodyOf(miss);
  EXPECT_EQ(miss.Get("Docker-Content-Digest"), MakeDigest(Sha256Hex(patch)));

  Response hit = h.Call("GET", target, "", {}, false);
  ASSERT_EQ(hit.status, 200);
  EXPECT_EQ(hit.Get("Blz-Patch-Cache"), "hit");
  EXPECT_EQ(hit.Get("Docker-Content-Digest"), miss.Get("Docker-Content-Digest"));
  EXPECT_EQ(h.registry().patches_computed(), 1u);

  blz::testing::WriteFileBytes(tmp / "p.blzpatch", patch);
  auto info = patcher::ReadPatchInfo(tmp / "p.blzpatch");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->base_digest, a);
  EXPECT_EQ(info->target_digest, b);
  patcher::ApplyStats as;
  Status s = patcher::ApplyPatch(tmp / "a.blz", tmp / "p.blzpatch", tmp / "rebuilt.blz", &as);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(as.target_digest, b);
  EXPECT_TRUE(blz::testing::ReadFileBytes(tmp / "rebuilt.blz") ==
              blz::testing::ReadFileBytes(tmp / "b.blz"));
}

TEST(PatchEndpointRealTest, SyntheticBaseAndFineTune) {
  blz::testing::TempDir tmp;
  blz::testing::WriteTestModel(tmp / "base", {});
  blz::testing::TestModelOptions ft;
  ft.perturb_scale = 0.01;
  blz::testing::WriteTestModel(tmp / "ft", ft);
  CheckPatchRoundTrip(tmp / "base", tmp / "ft");
}

TEST(PatchEndpointRealTest, TinyGpt2FromTheCorpus) {
  BLZ_REQUIRE_CORPUS(corpus);
  CheckPatchRoundTrip(corpus + "/tiny-gpt2/base", corpus + "/tiny-gpt2/ft-v1");
}

TEST(PatchEndpointRealTest, ArchivesThatAreNotArchivesAreNeverVersions) {
  // The registry identifies every archive at push (docs/registry-api.md), so bytes that are not
  // an archive never become a version the patch endpoint could be asked about.
  RegistryOptions options;
  options.create_patch = PatcherPatchFunction();
  Harness h(options);
  Response put = h.PutManifest("m", "v1", h.ManifestFor("m", "not an archive"));
  EXPECT_EQ(put.status, 400);
  EXPECT_EQ(testing::ErrorCodeOf(put), "MANIFEST_INVALID");
  const std::string v2 = testing::TinyArchive(2);
  ASSERT_EQ(h.PutManifest("m", "v2", h.ManifestFor("m", v2)).status, 201);
  Response r = h.Call("GET", "/v2/m/blz/patch?from=" + MakeDigest(Sha256Hex(std::string("not an archive"))) +
                                 "&to=" + MakeDigest(Sha256Hex(v2)));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(testing::ErrorCodeOf(r), "MANIFEST_UNKNOWN");
  EXPECT_EQ(h.registry().patches_computed(), 0u);
  EXPECT_EQ(h.UploadsCount(), 0u);
}

TEST(ValueDiffRealTest, ArchivesStoredAsFullPatchesAreDiffedAndIdentified) {
  // As `blz serve` runs: archives are replaced by their full patches in the background; the
  // value diff and the structural-hash backfill read them through the rebuilt-archive cache.
  blz::testing::TempDir tmp;
  blz::testing::WriteTestModel(tmp / "base", {});
  blz::testing::TestModelOptions ft;
  ft.perturb_scale = 0.01;
  blz::testing::WriteTestModel(tmp / "ft", ft);
  formats::PackStats ps;
  ASSERT_TRUE(formats::Pack(tmp / "base", tmp / "a.blz", &ps).ok());
  ASSERT_TRUE(formats::Pack(tmp / "ft", tmp / "b.blz", &ps).ok());

  RegistryOptions options;
  options.full_patch = PatcherFullPatchFunctions();
  options.storage.grace = std::chrono::milliseconds(0);
  Harness h(options);
  const std::string a = PushArchive(&h, "m", "v1", tmp / "a.blz");
  const std::string b = PushArchive(&h, "m", "v2", tmp / "b.blz");
  h.registry().storage().WaitIdle();
  ASSERT_FALSE(h.registry().blobs().Contains(a)) << "the raw archive should have been dropped";
  ASSERT_FALSE(h.registry().blobs().Contains(b));

  Response r = h.Call("GET", "/v2/m/blz/diff?from=" + a + "&to=" + b);
  ASSERT_EQ(r.status, 200) << r.body;
  formats::ValueDiffJsonOptions o;
  o.a_label = a;
  o.b_label = b;
  auto want = formats::ComputeValueDiffJson(tmp / "a.blz", tmp / "b.blz", o);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  EXPECT_EQ(BodyOf(r), *want);

  // Both share the structure `blz id` gives for the model directory.
  auto id = formats::IdentifyPath(tmp / "base");
  ASSERT_TRUE(id.ok());
  Response listed = h.Call("GET", "/v2/_blz/structures/" + id->structural_hash);
  ASSERT_EQ(listed.status, 200);
  const auto versions = nlohmann::json::parse(listed.body)["versions"];
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0]["digest"], a);
  EXPECT_EQ(versions[1]["digest"], b);

  // A schema-1 row (no hash) whose archive is stored only as a full patch is backfilled at Open.
  {
    auto db = h.OpenMetadataSql();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE(db->Exec("UPDATE versions SET structural_hash = NULL").ok());
  }
  RegistryOptions reopen_options;
  reopen_options.full_patch = PatcherFullPatchFunctions();
  reopen_options.storage.background = false;
  h.Reopen(reopen_options);
  EXPECT_EQ(h.registry().db().FindVersion("m", a)->structural_hash, id->structural_hash);
  EXPECT_EQ(h.registry().db().FindVersion("m", b)->structural_hash, id->structural_hash);
}

}  // namespace
}  // namespace blz::registry
