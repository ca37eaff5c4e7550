// The browsing endpoints (registry/browse_handlers.cc, docs/registry-api.md "Browsing") and
// ?async=1 (registry/background_jobs.h), with real archives and the real patcher.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "registry/background_jobs.h"
#include "registry/registry.h"
#include "tests/formats/test_models.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using nlohmann::json;
using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::PollUntilDone;
using testing::PushVersion;
using testing::Json;
using testing::TinyArchive;

RegistryOptions WithPatcher() {
  RegistryOptions o;
  o.create_patch = PatcherPatchFunction();
  return o;
}

// ---- /v2/_blz/repositories ----

TEST(BrowseRepositoriesTest, SummariesFilterAndPagination) {
  Harness h;
  const std::string a1 = PushVersion(&h, "a/one", "v1", TinyArchive(1));
  const std::string a2 = PushVersion(&h, "a/one", "latest", TinyArchive(2));
  PushVersion(&h, "b/two", "v1", TinyArchive(3));
  PushVersion(&h, "c/three", "v1", TinyArchive(4));

  Response all = h.Call("GET", "/v2/_blz/repositories");
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_EQ(all.Get("Content-Type"), "application/json");
  json j = Json(all);
  EXPECT_EQ(j["total"], 3);
  ASSERT_EQ(j["repositories"].size(), 3u);
  const json& one = j["repositories"][0];
  EXPECT_EQ(one["name"], "a/one");
  EXPECT_EQ(one["versions"], 2);
  EXPECT_EQ(one["latest"]["digest"], a2);
  EXPECT_EQ(one["latest"]["tag"], "latest");
  EXPECT_EQ(one["latest"]["size"], TinyArchive(2).size());
  EXPECT_EQ(one["latest"]["structure"].get<std::string>().size(), 64u);
  EXPECT_TRUE(one["latest"]["pushed"].get<std::string>().ends_with("Z"));
  EXPECT_EQ(one["last_push"], one["latest"]["pushed"]);
  EXPECT_FALSE(all.Get("Link").has_value());
  (void)a1;

  Response page1 = h.Call("GET", "/v2/_blz/repositories?n=2");
  ASSERT_EQ(page1.status, 200);
  json p1 = Json(page1);
  ASSERT_EQ(p1["repositories"].size(), 2u);
  EXPECT_EQ(p1["total"], 3);
  ASSERT_TRUE(page1.Get("Link").has_value());
  EXPECT_EQ(*page1.Get("Link"), "</v2/_blz/repositories?n=2&last=b%2Ftwo&q=>; rel=\"next\"");
  Response page2 = h.Call("GET", "/v2/_blz/repositories?n=2&last=b%2Ftwo&q=");
  ASSERT_EQ(page2.status, 200);
  json p2 = Json(page2);
  ASSERT_EQ(p2["repositories"].size(), 1u);
  EXPECT_EQ(p2["repositories"][0]["name"], "c/three");
  EXPECT_FALSE(page2.Get("Link").has_value());

  Response filtered = h.Call("GET", "/v2/_blz/repositories?q=t");
  json f = Json(filtered);
  EXPECT_EQ(f["total"], 2);  // b/two, c/three
  ASSERT_EQ(f["repositories"].size(), 2u);
  EXPECT_EQ(f["repositories"][0]["name"], "b/two");
  EXPECT_EQ(Json(h.Call("GET", "/v2/_blz/repositories?q=nothing"))["total"], 0);
  EXPECT_EQ(Json(h.Call("GET", "/v2/_blz/repositories?q=TWO"))["total"], 1);  // names are lower-case
}

TEST(BrowseRepositoriesTest, BadPaginationArgumentsAre400) {
  Harness h;
  PushVersion(&h, "a/one", "v1", TinyArchive(1));
  Response r = h.Call("GET", "/v2/_blz/repositories?n=ten");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCodeOf(r), "BAD_REQUEST");
  Response neg = h.Call("GET", "/v2/_blz/repositories?n=-1");
  EXPECT_EQ(neg.status, 400);
  Response q = h.Call("GET", "/v2/_blz/repositories?q=" + std::string(300, 'x'));
  EXPECT_EQ(q.status, 400);
  EXPECT_EQ(ErrorCodeOf(q), "BAD_REQUEST");
  Response post = h.Call("POST", "/v2/_blz/repositories");
  EXPECT_EQ(post.status, 405);
}

TEST(BrowseRepositoriesTest, PrivateRegistryListsOnlyWhatTheCallerMayPull) {
  RegistryOptions o;
  o.private_mode = true;
  Harness h(o);
  PushVersion(&h, "a/one", "v1", TinyArchive(1));
  PushVersion(&h, "b/two", "v1", TinyArchive(2));

  Response anon = h.Call("GET", "/v2/_blz/repositories", "", {}, /*auth=*/false);
  EXPECT_EQ(anon.status, 401);
  EXPECT_EQ(ErrorCodeOf(anon), "UNAUTHORIZED");
  Response anon_versions = h.Call("GET", "/v2/a/one/blz/versions", "", {}, false);
  EXPECT_EQ(anon_versions.status, 401);

  auto token = h.registry().db().CreateToken("reader", "a/*:pull", std::nullopt);
  ASSERT_TRUE(token.ok());
  const std::vector<Header> bearer = {{"Authorization", "Bearer " + *token}};
  Response mine = h.Call("GET", "/v2/_blz/repositories", "", bearer, false);
  ASSERT_EQ(mine.status, 200) << mine.body;
  json j = Json(mine);
  EXPECT_EQ(j["total"], 1);
  ASSERT_EQ(j["repositories"].size(), 1u);
  EXPECT_EQ(j["repositories"][0]["name"], "a/one");
  EXPECT_EQ(h.Call("GET", "/v2/b/two/blz/versions", "", bearer, false).status, 403);

  Response admin = h.Call("GET", "/v2/_blz/repositories");
  EXPECT_EQ(Json(admin)["total"], 2);
}

// ---- /v2/<name>/blz/versions and patch-report ----

TEST(BrowseVersionsTest, NewestFirstWithPreviousOfTheSameStructure) {
  Harness h(WithPatcher());
  const std::string v1 = PushVersion(&h, "org/m", "v1", TinyArchive(1, 1));
  const std::string v2 = PushVersion(&h, "org/m", "v2", TinyArchive(1, 1, 0.01));
  const std::string v3 = PushVersion(&h, "org/m", "v3", TinyArchive(1, 2));  // another structure
  ASSERT_EQ(h.PutManifest("org/m", "stable", h.ManifestFor("org/m", TinyArchive(1, 1, 0.01),
                                                           /*push_blobs=*/false))
                .status,
            201);

  Response r = h.Call("GET", "/v2/org/m/blz/versions");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Json(r);
  EXPECT_EQ(j["name"], "org/m");
  ASSERT_EQ(j["versions"].size(), 3u);
  const json& n3 = j["versions"][0];
  const json& n2 = j["versions"][1];
  const json& n1 = j["versions"][2];
  EXPECT_EQ(n3["digest"], v3);
  EXPECT_EQ(n3["previous"], nullptr);  // the only version of its structure
  EXPECT_EQ(n2["digest"], v2);
  EXPECT_EQ(n2["tags"], json::array({"stable", "v2"}));
  EXPECT_EQ(n2["structure"], n1["structure"]);
  EXPECT_NE(n2["structure"], n3["structure"]);
  ASSERT_TRUE(n2["previous"].is_object());
  EXPECT_EQ(n2["previous"]["digest"], v1);
  EXPECT_EQ(n2["previous"]["patch_bytes"], nullptr);
  EXPECT_EQ(n2["previous"]["patch_cached"], false);
  EXPECT_EQ(n1["previous"], nullptr);
  EXPECT_EQ(n1["size"], TinyArchive(1, 1).size());

  // The patch report computes the patch; afterwards the listing knows its size.
  Response report = h.Call("GET", "/v2/org/m/blz/patch-report?from=" + v1 + "&to=" + v2);
  ASSERT_EQ(report.status, 200) << report.body;
  EXPECT_EQ(report.Get("Blz-Patch-Cache"), "miss");
  json rep = Json(report);
  EXPECT_EQ(rep["from"], v1);
  EXPECT_EQ(rep["to"], v2);
  EXPECT_EQ(rep["target_bytes"], TinyArchive(1, 1, 0.01).size());
  EXPECT_EQ(rep["added"], 0);
  EXPECT_EQ(rep["removed"], json::array());
  uint64_t tensors = 0, piece_bytes = 0;
  for (const json& p : rep["pieces"]) {
    EXPECT_TRUE(p["kind"] == "tensor" || p["kind"] == "file") << p;
    EXPECT_FALSE(p["codec"].get<std::string>().empty());
    EXPECT_FALSE(p["name"].get<std::string>().empty());
    tensors += p["kind"] == "tensor" ? 1 : 0;
    piece_bytes += p["patch_bytes"].get<uint64_t>();
    // Every piece names its file, so a file's patch bytes add up its tensors (issue 24 item 4:
    // the web view said "model.safetensors 0 B (identical)" counting only the header piece).
    EXPECT_EQ(p.value("file", ""), p["kind"] == "tensor" ? "model.safetensors"
                                                         : p["name"].get<std::string>())
        << p;
  }
  EXPECT_GT(tensors, 0u);
  EXPECT_EQ(rep["identical"].get<uint64_t>() + rep["patched"].get<uint64_t>(), tensors);
  EXPECT_GT(rep["patched"], 0);
  EXPECT_LE(piece_bytes + rep["prefix"]["patch_bytes"].get<uint64_t>(),
            rep["patch_bytes"].get<uint64_t>());
  // The same patch /blz/patch serves (from the cache).
  Response patch = h.Call("GET", "/v2/org/m/blz/patch?from=" + v1 + "&to=" + v2);
  ASSERT_EQ(patch.status, 200);
  EXPECT_EQ(patch.Get("Blz-Patch-Cache"), "hit");
  EXPECT_EQ(rep["patch_bytes"], BodyOf(patch).size());
  EXPECT_EQ(h.registry().patches_computed(), 1u);

  json again = Json(h.Call("GET", "/v2/org/m/blz/versions"));
  EXPECT_EQ(again["versions"][1]["previous"]["patch_cached"], true);
  EXPECT_EQ(again["versions"][1]["previous"]["patch_bytes"], rep["patch_bytes"]);
}

TEST(BrowseVersionsTest, UnknownRepositoryIs404) {
  Harness h;
  Response r = h.Call("GET", "/v2/no/such/blz/versions");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorCodeOf(r), "NAME_UNKNOWN");
  Response bad = h.Call("GET", "/v2/Bad..Name/blz/versions");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ErrorCodeOf(bad), "NAME_INVALID");
}

TEST(BrowsePatchReportTest, ErrorPaths) {
  Harness h(WithPatcher());
  const std::string v1 = PushVersion(&h, "org/m", "v1", TinyArchive(1, 1));
  const std::string other = MakeDigest(Sha256Hex(std::string("nothing")));
  Response missing = h.Call("GET", "/v2/org/m/blz/patch-report?to=" + v1);
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(ErrorCodeOf(missing), "DIGEST_INVALID");
  Response bad = h.Call("GET", "/v2/org/m/blz/patch-report?from=sha256:xyz&to=" + v1);
  EXPECT_EQ(bad.status, 400);
  Response unknown = h.Call("GET", "/v2/org/m/blz/patch-report?from=" + other + "&to=" + v1);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(ErrorCodeOf(unknown), "MANIFEST_UNKNOWN");
  EXPECT_EQ(h.registry().patches_computed(), 0u);
}

TEST(BrowsePatchReportTest, WithoutAPatcherIsUnsupported) {
  Harness h;  // no create_patch
  const std::string v1 = PushVersion(&h, "org/m", "v1", TinyArchive(1, 1));
  const std::string v2 = PushVersion(&h, "org/m", "v2", TinyArchive(1, 1, 0.01));
  Response r = h.Call("GET", "/v2/org/m/blz/patch-report?from=" + v1 + "&to=" + v2);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(ErrorCodeOf(r), "UNSUPPORTED");
}

TEST(BrowsePatchReportTest, TinyGpt2FromTheCorpus) {
  BLZ_REQUIRE_CORPUS(corpus);
  blz::testing::TempDir tmp;
  formats::PackStats ps;
  ASSERT_TRUE(formats::Pack(corpus + "/tiny-gpt2/base", tmp / "a.blz", &ps).ok());
  ASSERT_TRUE(formats::Pack(corpus + "/tiny-gpt2/ft-v1", tmp / "b.blz", &ps).ok());
  Harness h(WithPatcher());
  const std::string a = PushVersion(&h, "gpt2", "base", blz::testing::ReadFileBytes(tmp / "a.blz"));
  const std::string b = PushVersion(&h, "gpt2", "ft", blz::testing::ReadFileBytes(tmp / "b.blz"));
  Response r = h.Call("GET", "/v2/gpt2/blz/patch-report?from=" + a + "&to=" + b);
  ASSERT_EQ(r.status, 200) << r.body;
  json rep = Json(r);
  bool saw_config = false;
  for (const json& p : rep["pieces"]) saw_config = saw_config || p["name"] == "config.json";
  EXPECT_TRUE(saw_config);
  EXPECT_LT(rep["patch_bytes"].get<uint64_t>(), rep["target_bytes"].get<uint64_t>());
}

// ---- /v2/<name>/blz/version ----

// A packed model directory: the tiny test model plus `extra` files.
std::string ArchiveWith(const std::vector<std::pair<std::string, std::string>>& extra) {
  blz::testing::TempDir tmp;
  blz::testing::TestModelOptions o;
  o.layers = 1;
  o.hidden = 4;
  o.vocab = 8;
  blz::testing::WriteTestModel(tmp / "model", o);
  for (const auto& [path, bytes] : extra) {
    blz::testing::WriteFileBytes(tmp / "model" + "/" + path, bytes);
  }
  formats::PackStats stats;
  Status s = formats::Pack(tmp / "model", tmp / "model.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "model.blz");
}

TEST(BrowseVersionTest, FilesTensorsAndMetadata) {
  Harness h;
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  const std::string archive =
      ArchiveWith({{"config.json", R"({"model_type":"llama","hidden_size":4})"},
                   {"generation_config.json", R"({"do_sample":true})"},
                   {"broken.json", "{not json"},
                   {"deep.json", deep},
                   {"README.md", "# hi"}});
  const std::string d = PushVersion(&h, "org/m", "v1", archive);
  Response r = h.Call("GET", "/v2/org/m/blz/version?digest=" + d);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Json(r);
  EXPECT_EQ(j["digest"], d);
  EXPECT_EQ(j["tags"], json::array({"v1"}));
  EXPECT_EQ(j["size"], archive.size());
  EXPECT_EQ(j["format"], "safetensors");
  EXPECT_EQ(j["structure"].get<std::string>().size(), 64u);
  bool saw_readme = false, saw_safetensors = false;
  for (const json& f : j["files"]) {
    if (f["path"] == "README.md") {
      saw_readme = true;
      EXPECT_EQ(f["kind"], "raw");
      EXPECT_EQ(f["bytes"], 4);
    }
    saw_safetensors = saw_safetensors || f["kind"] == "safetensors";
  }
  EXPECT_TRUE(saw_readme);
  EXPECT_TRUE(saw_safetensors);
  ASSERT_FALSE(j["tensors"].empty());
  for (const json& t : j["tensors"]) {
    EXPECT_TRUE(t.contains("name") && t.contains("dtype") && t["shape"].is_array() &&
                t["bytes"].is_number() && t.contains("file"))
        << t;
  }
  const json& m = j["metadata"];
  EXPECT_EQ(m["config"]["model_type"], "llama");
  EXPECT_EQ(m["gguf"], nullptr);
  EXPECT_EQ(m["files"]["generation_config.json"]["do_sample"], true);
  EXPECT_EQ(m["files"]["broken.json"], "{not json");  // invalid JSON: the text
  EXPECT_EQ(m["files"]["deep.json"], deep);           // too deep to embed: the text
  EXPECT_FALSE(m["files"].contains("config.json"));
}

TEST(BrowseVersionTest, ErrorPaths) {
  Harness h;
  const std::string d = PushVersion(&h, "org/m", "v1", TinyArchive(1));
  Response none = h.Call("GET", "/v2/org/m/blz/version");
  EXPECT_EQ(none.status, 400);
  EXPECT_EQ(ErrorCodeOf(none), "DIGEST_INVALID");
  Response bad = h.Call("GET", "/v2/org/m/blz/version?digest=sha256:ABC");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ErrorCodeOf(bad), "DIGEST_INVALID");
  Response unknown = h.Call("GET", "/v2/org/m/blz/version?digest=" +
                                       MakeDigest(Sha256Hex(std::string("x"))));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(ErrorCodeOf(unknown), "MANIFEST_UNKNOWN");
  Response elsewhere = h.Call("GET", "/v2/org/other/blz/version?digest=" + d);
  EXPECT_EQ(elsewhere.status, 404);
}

TEST(BrowseVersionTest, GgufKeysFromTheCorpus) {
  BLZ_REQUIRE_CORPUS(corpus);
  blz::testing::TempDir tmp;
  formats::PackStats ps;
  ASSERT_TRUE(formats::Pack(corpus + "/gguf/ggml-vocab-gpt-2.gguf", tmp / "g.blz", &ps).ok());
  Harness h;
  const std::string d = PushVersion(&h, "vocab", "v1", blz::testing::ReadFileBytes(tmp / "g.blz"));
  Response r = h.Call("GET", "/v2/vocab/blz/version?digest=" + d);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Json(r);
  EXPECT_EQ(j["format"], "gguf");
  const json& g = j["metadata"]["gguf"];
  ASSERT_TRUE(g.is_object());
  EXPECT_EQ(g["general.architecture"], "gpt2");
  const json& tokens = g["tokenizer.ggml.tokens"];
  EXPECT_EQ(tokens["type"], "array");
  EXPECT_EQ(tokens["element_type"], "string");
  EXPECT_GT(tokens["length"].get<uint64_t>(), 1000u);
  EXPECT_EQ(tokens["first"].size(), 8u);
  EXPECT_LT(r.body.size(), 64u << 10);  // arrays are summarized, not listed
}

// ---- /v2/<name>/blz/stats ----

TEST(BrowseStatsTest, ComputedOnceAndCached) {
  Harness h;
  const std::string d = PushVersion(&h, "org/m", "v1", TinyArchive(1));
  Response miss = h.Call("GET", "/v2/org/m/blz/stats?digest=" + d);
  ASSERT_EQ(miss.status, 200) << BodyOf(miss);
  EXPECT_EQ(miss.Get("Blz-Stats-Cache"), "miss");
  json j = Json(miss);
  EXPECT_EQ(j["path"], d);
  EXPECT_EQ(j["format"], "blz");
  ASSERT_TRUE(j["stats"].is_object());
  ASSERT_FALSE(j["stats"]["tensors"].empty());
  EXPECT_EQ(j["stats"]["tensors"].size(), j["tensors"].size());
  Response hit = h.Call("GET", "/v2/org/m/blz/stats?digest=" + d);
  ASSERT_EQ(hit.status, 200);
  EXPECT_EQ(hit.Get("Blz-Stats-Cache"), "hit");
  EXPECT_EQ(BodyOf(hit), BodyOf(miss));
  EXPECT_EQ(h.registry().stats_computed(), 1u);

  // Garbage collection keeps the cached statistics of a live version.
  auto gc = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blz/stats?digest=" + d).Get("Blz-Stats-Cache"), "hit");

  Response bad = h.Call("GET", "/v2/org/m/blz/stats?digest=nope");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ErrorCodeOf(bad), "DIGEST_INVALID");
  Response unknown =
      h.Call("GET", "/v2/org/m/blz/stats?digest=" + MakeDigest(Sha256Hex(std::string("y"))));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(ErrorCodeOf(unknown), "MANIFEST_UNKNOWN");
}

// A packed model whose one F32 tensor is all NaN.
std::string NanArchive() {
  blz::testing::TempDir tmp;
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((n >> (8 * i)) & 0xFF);
  file += header;
  const uint32_t nan_bits = 0x7FC00000u;
  for (int k = 0; k < 4; ++k) {
    for (int b = 0; b < 4; ++b) file.push_back(char((nan_bits >> (8 * b)) & 0xFF));
  }
  std::filesystem::create_directories(tmp / "model");
  blz::testing::WriteFileBytes(tmp / "model/model.safetensors", file);
  formats::PackStats stats;
  Status s = formats::Pack(tmp / "model", tmp / "model.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "model.blz");
}

// Issue 24 item 6: the catalog and the repository page flag NaN/Inf versions. Once a version's
// statistics are computed, both listings carry its non-finite counts ({} = all finite; null =
// not computed yet).
TEST(BrowseStatsTest, ListingsFlagNonFiniteVersions) {
  Harness h;
  const std::string good = PushVersion(&h, "org/ok", "v1", TinyArchive(1));
  const std::string bad = PushVersion(&h, "org/nan", "v1", NanArchive());
  json before = Json(h.Call("GET", "/v2/org/nan/blz/versions"));
  EXPECT_TRUE(before["versions"][0]["non_finite"].is_null()) << before.dump();
  ASSERT_EQ(h.Call("GET", "/v2/org/nan/blz/stats?digest=" + bad).status, 200);
  ASSERT_EQ(h.Call("GET", "/v2/org/ok/blz/stats?digest=" + good).status, 200);

  json versions = Json(h.Call("GET", "/v2/org/nan/blz/versions"));
  const json& nf = versions["versions"][0]["non_finite"];
  ASSERT_TRUE(nf.is_object()) << versions.dump();
  EXPECT_EQ(nf["nan"], 4);
  EXPECT_EQ(nf["inf"], 0);
  EXPECT_EQ(nf["all_non_finite"], 1);
  json ok = Json(h.Call("GET", "/v2/org/ok/blz/versions"));
  EXPECT_EQ(ok["versions"][0]["non_finite"], json::object()) << ok.dump();

  json catalog = Json(h.Call("GET", "/v2/_blz/repositories"));
  bool saw = false;
  for (const json& r : catalog["repositories"]) {
    if (r["name"] != "org/nan") continue;
    saw = true;
    EXPECT_EQ(r["latest"]["non_finite"]["nan"], 4) << r.dump();
  }
  EXPECT_TRUE(saw) << catalog.dump();
}

// ---- ?async=1 ----

TEST(BrowseAsyncTest, AcceptedWhileComputingThenTheDocument) {
  std::atomic<bool> release{false};
  std::atomic<int> calls{0};
  RegistryOptions o;
  const PatchFunction real = PatcherPatchFunction();
  o.create_patch = [&](const std::string& a, const std::string& ad, const std::string& b,
                       const std::string& bd, const std::string& out) {
    ++calls;
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return real(a, ad, b, bd, out);
  };
  o.async_wait = std::chrono::milliseconds(0);
  Harness h(o);
  // Whatever happens below, the blocked computation ends before the registry is destroyed.
  struct Release {
    std::atomic<bool>* flag;
    ~Release() { *flag = true; }
  } release_at_exit{&release};
  const std::string v1 = PushVersion(&h, "org/m", "v1", TinyArchive(1, 1));
  const std::string v2 = PushVersion(&h, "org/m", "v2", TinyArchive(1, 1, 0.01));
  const std::string target =
      "/v2/org/m/blz/patch-report?from=" + v1 + "&to=" + v2 + "&async=1";

  Response first = h.Call("GET", target);
  ASSERT_EQ(first.status, 202) << first.body;
  EXPECT_EQ(first.Get("Retry-After"), "1");
  json p = Json(first);
  EXPECT_EQ(p["state"], "computing");
  EXPECT_TRUE(p["phase"].is_string());
  EXPECT_TRUE(p.contains("done") && p.contains("total"));
  EXPECT_GE(p["elapsed_ms"].get<int64_t>(), 0);
  Response second = h.Call("GET", target);  // the same job, not another
  EXPECT_EQ(second.status, 202);

  release = true;
  Response done = PollUntilDone(&h, target);
  ASSERT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(Json(done)["to"], v2);
  EXPECT_EQ(calls.load(), 1);
  // Cached now: answered at once even with async.
  Response cached = PollUntilDone(&h, target);
  EXPECT_EQ(cached.status, 200);
  EXPECT_EQ(cached.Get("Blz-Patch-Cache"), "hit");
  // Without async the endpoint blocks as before.
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blz/patch-report?from=" + v1 + "&to=" + v2).status, 200);
  EXPECT_EQ(calls.load(), 1);
}

TEST(BrowseAsyncTest, ErrorsSurfaceOnceThenARetryComputesAgain) {
  std::atomic<int> calls{0};
  RegistryOptions o;
  o.create_patch = [&](const std::string&, const std::string&, const std::string&,
                       const std::string&, const std::string&) -> Status {
    ++calls;
    return IOError("disk on fire");
  };
  o.async_wait = std::chrono::milliseconds(0);
  Harness h(o);
  const std::string v1 = PushVersion(&h, "org/m", "v1", TinyArchive(1, 1));
  const std::string v2 = PushVersion(&h, "org/m", "v2", TinyArchive(1, 1, 0.01));
  const std::string target =
      "/v2/org/m/blz/patch-report?from=" + v1 + "&to=" + v2 + "&async=1";
  Response failed = PollUntilDone(&h, target);
  EXPECT_EQ(failed.status, 500);
  EXPECT_EQ(ErrorCodeOf(failed), "UNKNOWN");
  EXPECT_NE(failed.body.find("disk on fire"), std::string::npos);
  EXPECT_EQ(calls.load(), 1);
  Response retried = PollUntilDone(&h, target);
  EXPECT_EQ(retried.status, 500);
  EXPECT_EQ(calls.load(), 2);
}

TEST(BrowseAsyncTest, ValueDiffAndStatsAcceptAsync) {
  Harness h;  // default async_wait: small computations answer 200 at once
  const std::string v1 = PushVersion(&h, "org/m", "v1", TinyArchive(1, 1));
  const std::string v2 = PushVersion(&h, "org/m", "v2", TinyArchive(1, 1, 0.01));
  Response diff = PollUntilDone(&h, "/v2/org/m/blz/diff?from=" + v1 + "&to=" + v2 + "&async=1");
  ASSERT_EQ(diff.status, 200) << BodyOf(diff);
  EXPECT_TRUE(Json(diff).contains("values"));
  Response stats = PollUntilDone(&h, "/v2/org/m/blz/stats?digest=" + v2 + "&async=true");
  ASSERT_EQ(stats.status, 200) << BodyOf(stats);
  EXPECT_TRUE(Json(stats).contains("stats"));
  Response bad = PollUntilDone(&h, "/v2/org/m/blz/stats?digest=nope&async=1");
  EXPECT_EQ(bad.status, 400);
}

TEST(BackgroundJobsTest, OneJobPerKeyAndJoinedOnDestruction) {
  std::atomic<bool> release{false};
  std::atomic<int> runs{0};
  {
    BackgroundJobs jobs(1);
    struct Release {
      std::atomic<bool>* flag;
      ~Release() { *flag = true; }
    } release_at_exit{&release};
    auto work = [&](JobCounters* c) {
      ++runs;
      EXPECT_EQ(CurrentJobCounters(), c);
      c->total = 10;
      c->done = 4;
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      Response r;
      r.body = "done";
      return r;
    };
    BackgroundJobs::Outcome a = jobs.Run("k", "working", work, std::chrono::milliseconds(0));
    EXPECT_FALSE(a.finished);
    BackgroundJobs::Outcome b = jobs.Run("k", "working", work, std::chrono::milliseconds(0));
    EXPECT_FALSE(b.finished);
    EXPECT_EQ(jobs.size(), 1u);
    // Once running, a poll sees the job's phase and counters.
    BackgroundJobs::Outcome running;
    for (int i = 0; i < 6000 && !running.progress.total.has_value(); ++i) {
      running = jobs.Run("k", "working", work, std::chrono::milliseconds(0));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_FALSE(running.finished);
    EXPECT_EQ(running.progress.phase, "working");
    EXPECT_EQ(running.progress.total, 10u);
    EXPECT_EQ(running.progress.done, 4u);
    // A second key waits behind the first (one worker).
    BackgroundJobs::Outcome q = jobs.Run("other", "working", work, std::chrono::milliseconds(0));
    EXPECT_EQ(q.progress.phase, "queued");
    release = true;
    BackgroundJobs::Outcome done;
    for (int i = 0; i < 6000 && !done.finished; ++i) {
      done = jobs.Run("k", "working", work, std::chrono::milliseconds(0));
      if (!done.finished) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(done.finished);
    EXPECT_EQ(done.response.body, "done");
    // The destructor joins the worker (the "other" job may or may not have run).
  }
  EXPECT_GE(runs.load(), 1);
  EXPECT_LE(runs.load(), 2);
}

}  // namespace
}  // namespace blz::registry
