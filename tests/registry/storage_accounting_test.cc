// Bytes at rest against the models' own size (registry/storage_accounting.h, GET
// /v2/_blz/storage; issue 27), with the real patcher: the figures are the sizes of the blobs
// that store a known set of pushes, raw and then compressed into full patches; shared blobs
// count once in the total; a caller sees only the repositories it may pull.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "registry/archive_storage.h"
#include "registry/registry.h"
#include "registry/storage_accounting.h"
#include "tests/formats/test_models.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using testing::ErrorCodeOf;
using testing::Harness;
using testing::Json;
using testing::PushVersion;
using nlohmann::json;

RegistryOptions StorageOptions(bool private_mode = false) {
  RegistryOptions o;
  o.create_patch = PatcherPatchFunction();
  o.full_patch = PatcherFullPatchFunctions();
  o.storage.background = false;  // compressed when the test says so
  o.storage.grace = std::chrono::milliseconds(0);
  o.storage.max_chain_depth = 0;  // full patches (chains: ArchiveChainsTest)
  o.private_mode = private_mode;
  return o;
}

// A packed synthetic model whose planes compress (about 140 KB).
std::string ModelArchive(uint64_t seed, double perturb = 0) {
  return blz::testing::PackedTestModel(seed, perturb);
}

// The config blob Harness::ManifestFor pushes with `archive` (archives of the same size share
// it: one blob).
std::string ConfigOf(const std::string& archive) {
  return "{\"archive_size\":" + std::to_string(archive.size()) + "}";
}
uint64_t ConfigSize(const std::string& archive) { return ConfigOf(archive).size(); }
// The bytes of the distinct configs of `archives`.
uint64_t DistinctConfigBytes(const std::vector<std::string>& archives) {
  std::set<std::string> configs;
  for (const std::string& a : archives) configs.insert(ConfigOf(a));
  uint64_t n = 0;
  for (const std::string& c : configs) n += c.size();
  return n;
}

uint64_t StoredSize(Harness& h, const std::string& digest) {
  auto info = h.registry().blobs().Stat(digest);
  EXPECT_TRUE(info.ok()) << digest << ": " << info.status().ToString();
  return info.ok() ? info->size : 0;
}

std::string FullPatchOf(Harness& h, const std::string& archive_digest) {
  auto p = h.registry().db().FindPatch("", archive_digest);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->patch_digest : "";
}

json Storage(Harness& h, const std::string& query = "") {
  Response r = h.Call("GET", "/v2/_blz/storage" + query);
  EXPECT_EQ(r.status, 200) << r.body;
  return Json(r);
}

const json& Repo(const json& doc, const std::string& name) {
  static const json kNone;
  for (const json& r : doc.at("repositories")) {
    if (r.at("name") == name) return r;
  }
  ADD_FAILURE() << "no repository " << name << " in " << doc.dump();
  return kNone;
}

TEST(StorageAccountingTest, FiguresAreTheStoredBlobsRawThenCompressed) {
  Harness h(StorageOptions());
  const std::string a = ModelArchive(1);
  const std::string b = ModelArchive(1, 0.01);
  const std::string da = PushVersion(&h, "org/m", "v1", a);
  const std::string db = PushVersion(&h, "org/m", "v2", b);
  const uint64_t model = a.size() + b.size();
  const uint64_t configs = DistinctConfigBytes({a, b});
  const uint64_t config_blobs = ConfigOf(a) == ConfigOf(b) ? 1 : 2;

  // Raw: the archives themselves plus their configs.
  json doc = Storage(h);
  const json& raw = Repo(doc, "org/m");
  EXPECT_EQ(raw.at("model_bytes").get<uint64_t>(), model);
  EXPECT_EQ(raw.at("archive_at_rest_bytes").get<uint64_t>(),
            StoredSize(h, da) + StoredSize(h, db));
  EXPECT_EQ(raw.at("other_bytes").get<uint64_t>(), configs);
  EXPECT_EQ(raw.at("at_rest_bytes").get<uint64_t>(), model + configs);
  EXPECT_EQ(raw.at("versions").get<uint64_t>(), 2u);
  EXPECT_EQ(raw.at("blobs").get<uint64_t>(), 2 + config_blobs);
  EXPECT_EQ(raw.at("forms").at("raw").get<uint64_t>(), 2u);
  EXPECT_EQ(raw.at("shared_bytes").get<uint64_t>(), 0u);
  ASSERT_EQ(raw.at("by_archive").size(), 2u);
  EXPECT_EQ(raw.at("by_archive")[0].at("digest"), da);
  EXPECT_EQ(raw.at("by_archive")[0].at("form"), "raw");
  EXPECT_EQ(raw.at("by_archive")[0].at("stored_as"), da);
  EXPECT_EQ(doc.at("total").at("at_rest_bytes").get<uint64_t>(), model + configs);

  // Compressed: each archive is its full patch now.
  ASSERT_TRUE(h.registry().storage().Compress(da).ok());
  ASSERT_TRUE(h.registry().storage().Compress(db).ok());
  ASSERT_FALSE(h.registry().blobs().Contains(da));
  const std::string pa = FullPatchOf(h, da), pb = FullPatchOf(h, db);
  const uint64_t patches = StoredSize(h, pa) + StoredSize(h, pb);
  doc = Storage(h);
  const json& full = Repo(doc, "org/m");
  EXPECT_EQ(full.at("model_bytes").get<uint64_t>(), model);
  EXPECT_EQ(full.at("archive_at_rest_bytes").get<uint64_t>(), patches);
  EXPECT_EQ(full.at("at_rest_bytes").get<uint64_t>(), patches + configs);
  EXPECT_LT(patches, model);
  EXPECT_NEAR(full.at("ratio").get<double>(), double(patches + configs) / double(model), 1e-9);
  EXPECT_EQ(full.at("forms").at("full_patch").get<uint64_t>(), 2u);
  EXPECT_FALSE(full.at("forms").contains("raw"));
  EXPECT_EQ(full.at("by_archive")[1].at("form"), "full_patch");
  EXPECT_EQ(full.at("by_archive")[1].at("stored_as"), pb);
  EXPECT_EQ(full.at("by_archive")[1].at("at_rest_bytes").get<uint64_t>(), StoredSize(h, pb));
  const json& total = doc.at("total");
  EXPECT_EQ(total.at("model_bytes").get<uint64_t>(), model);
  EXPECT_EQ(total.at("at_rest_bytes").get<uint64_t>(), patches + configs);
  EXPECT_EQ(total.at("archives").get<uint64_t>(), 2u);
  // The archive storage's status is still there for the admin.
  EXPECT_EQ(doc.at("compressed").get<uint64_t>(), 2u);

  // The per-archive function the endpoint uses, directly.
  auto at_rest = AtRest(h.registry().blobs(), h.registry().db(), da);
  ASSERT_TRUE(at_rest.ok()) << at_rest.status().ToString();
  EXPECT_EQ(at_rest->form, StoredForm::kFullPatch);
  EXPECT_EQ(at_rest->blob, pa);
  EXPECT_EQ(at_rest->bytes, StoredSize(h, pa));
}

TEST(StorageAccountingTest, SharedBlobsCountOnceInTheTotal) {
  Harness h(StorageOptions());
  const std::string a = ModelArchive(2);
  const std::string b = ModelArchive(3);
  const std::string da = PushVersion(&h, "team/base", "v1", a);
  PushVersion(&h, "team/fork", "v1", a);  // the same archive and config
  PushVersion(&h, "team/fork", "v2", b);
  ASSERT_TRUE(h.registry().storage().Compress(da).ok());
  const uint64_t pa = StoredSize(h, FullPatchOf(h, da));
  const uint64_t ca = ConfigSize(a);
  // b's config is another blob unless both archives have the same size (then it is a's).
  const bool same_config = ConfigOf(a) == ConfigOf(b);
  const uint64_t cb = same_config ? 0 : ConfigSize(b);

  json doc = Storage(h);
  const json& base = Repo(doc, "team/base");
  const json& fork = Repo(doc, "team/fork");
  EXPECT_EQ(base.at("model_bytes").get<uint64_t>(), a.size());
  EXPECT_EQ(base.at("at_rest_bytes").get<uint64_t>(), pa + ca);
  EXPECT_EQ(base.at("shared_bytes").get<uint64_t>(), pa + ca);
  EXPECT_EQ(fork.at("model_bytes").get<uint64_t>(), a.size() + b.size());
  EXPECT_EQ(fork.at("at_rest_bytes").get<uint64_t>(), pa + ca + b.size() + cb);
  EXPECT_EQ(fork.at("shared_bytes").get<uint64_t>(), pa + ca);
  EXPECT_EQ(fork.at("forms").at("raw").get<uint64_t>(), 1u);
  EXPECT_EQ(fork.at("forms").at("full_patch").get<uint64_t>(), 1u);
  const json& total = doc.at("total");
  EXPECT_EQ(total.at("model_bytes").get<uint64_t>(), a.size() + b.size());
  EXPECT_EQ(total.at("at_rest_bytes").get<uint64_t>(), pa + ca + b.size() + cb);
  EXPECT_EQ(total.at("versions").get<uint64_t>(), 3u);
  EXPECT_EQ(total.at("archives").get<uint64_t>(), 2u);
  EXPECT_EQ(total.at("blobs").get<uint64_t>(), same_config ? 3u : 4u);

  // One repository: nothing is shared within it.
  doc = Storage(h, "?repository=team/fork");
  ASSERT_EQ(doc.at("repositories").size(), 1u);
  EXPECT_EQ(Repo(doc, "team/fork").at("shared_bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(h.Call("GET", "/v2/_blz/storage?repository=team/none").status, 404);
  EXPECT_EQ(h.Call("GET", "/v2/_blz/storage?repository=Bad..Name").status, 400);
}

TEST(StorageAccountingTest, CallersSeeOnlyRepositoriesTheyMayPull) {
  Harness h(StorageOptions(/*private_mode=*/true));
  const std::string a = ModelArchive(4);
  PushVersion(&h, "org-a/m", "v1", a);
  PushVersion(&h, "org-b/m", "v1", a);  // shared with a repository the reader cannot see
  PushVersion(&h, "org-b/n", "v1", ModelArchive(5));
  auto token = h.registry().db().CreateToken("reader", "org-a/*:pull");
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  const Header reader{"Authorization", "Bearer " + *token};

  Response r = h.Call("GET", "/v2/_blz/storage", "", {reader}, /*auth=*/false);
  ASSERT_EQ(r.status, 200) << r.body;
  json doc = Json(r);
  ASSERT_EQ(doc.at("repositories").size(), 1u) << doc.dump();
  EXPECT_EQ(doc.at("repositories")[0].at("name"), "org-a/m");
  // Sharing with org-b/m is not revealed; neither is the total nor the storage status.
  EXPECT_EQ(doc.at("repositories")[0].at("shared_bytes").get<uint64_t>(), 0u);
  EXPECT_TRUE(doc.at("total").is_null());
  EXPECT_FALSE(doc.contains("pending"));
  EXPECT_EQ(r.body.find("org-b"), std::string::npos);
  Response other =
      h.Call("GET", "/v2/_blz/storage?repository=org-b/m", "", {reader}, /*auth=*/false);
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(ErrorCodeOf(other), "NAME_UNKNOWN");
  // No credentials on a private registry: challenged.
  EXPECT_EQ(h.Call("GET", "/v2/_blz/storage", "", {}, /*auth=*/false).status, 401);

  // The admin sees every repository and the total.
  doc = Storage(h);
  EXPECT_EQ(doc.at("repositories").size(), 3u);
  EXPECT_EQ(Repo(doc, "org-a/m").at("shared_bytes").get<uint64_t>(),
            a.size() + ConfigSize(a));
  EXPECT_EQ(doc.at("total").at("archives").get<uint64_t>(), 2u);
}

}  // namespace
}  // namespace blz::registry
