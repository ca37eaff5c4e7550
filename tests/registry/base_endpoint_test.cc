// Handler tests (no sockets) for choosing a base: GET /v2/<name>/blz/bases and patches from a
// base that is a version of another repository (docs/registry-api.md, "Choosing a base").
#include <gtest/gtest.h>

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::PushVersion;
using testing::TinyArchive;

std::string D(const std::string& bytes) { return MakeDigest(Sha256Hex(bytes)); }

// A stand-in patch function: "PATCH <base hex> -> <target hex>" plus `pad` bytes, so tests can
// make one cached patch smaller than another.
RegistryOptions WithPatches(size_t pad = 0) {
  RegistryOptions o;
  o.create_patch = [pad](const std::string& base, const std::string&, const std::string& target,
                         const std::string&, const std::string& out) -> Status {
    auto b = Sha256FileHex(base);
    auto t = Sha256FileHex(target);
    if (!b.ok() || !t.ok()) return Internal("cannot hash inputs");
    return WriteFileAtomic(out, "PATCH " + *b + " -> " + *t + std::string(pad, 'x'));
  };
  return o;
}

std::string Bases(const std::string& repo, const std::string& to,
                  const std::vector<std::string>& have) {
  std::string t = "/v2/" + repo + "/blz/bases?to=" + to;
  if (!have.empty()) {
    t += "&have=";
    for (size_t i = 0; i < have.size(); ++i) t += (i ? "," : "") + have[i];
  }
  return t;
}

std::vector<std::string> DigestsOf(const Response& r) {
  std::vector<std::string> out;
  json doc = json::parse(BodyOf(r));
  for (const json& b : doc.at("bases")) out.push_back(b.at("digest").get<std::string>());
  return out;
}

class BaseEndpointTest : public ::testing::Test {
 protected:
  // Same structure (one layer) with different values; `other_` has two layers.
  const std::string target_ = TinyArchive(20, 1);
  const std::string here_ = TinyArchive(21, 1);
  const std::string there_ = TinyArchive(22, 1);
  const std::string other_ = TinyArchive(23, 2);
  const std::string unknown_ = D("never pushed");
};

TEST_F(BaseEndpointTest, RanksSameStructureThenSameRepository) {
  Harness h(WithPatches());
  const std::string t = PushVersion(&h, "org/b", "v2", target_);
  const std::string here = PushVersion(&h, "org/b", "v1", here_);
  const std::string there = PushVersion(&h, "org/a", "v1", there_);
  const std::string other = PushVersion(&h, "org/b", "wide", other_);

  Response r = h.Call("GET", Bases("org/b", t, {other, there, unknown_, here, t}), "", {}, false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Get("Content-Type"), "application/json");
  // The unknown digest and the target itself are left out.
  EXPECT_EQ(DigestsOf(r), (std::vector<std::string>{here, there, other}));
  json doc = json::parse(BodyOf(r));
  EXPECT_EQ(doc["to"]["digest"], t);
  EXPECT_EQ(doc["to"]["repository"], "org/b");
  EXPECT_EQ(doc["to"]["size"], target_.size());
  EXPECT_TRUE(ParseDigest(doc["to"]["manifest_digest"].get<std::string>()).ok());
  EXPECT_EQ(doc["to"]["structure"].get<std::string>().size(), 64u);
  EXPECT_EQ(doc["bases"][0]["same_structure"], true);
  EXPECT_EQ(doc["bases"][1]["repository"], "org/a");
  EXPECT_EQ(doc["bases"][2]["same_structure"], false);
  EXPECT_TRUE(doc["bases"][0]["patch_size"].is_null());
}

TEST_F(BaseEndpointTest, AMeasuredPatchBeatsAGuess) {
  Harness h(WithPatches());
  const std::string t = PushVersion(&h, "org/b", "v2", target_);
  const std::string here = PushVersion(&h, "org/b", "v1", here_);
  const std::string there = PushVersion(&h, "org/a", "v1", there_);
  // A patch from the other repository's version is computed (and cached) first.
  Response p = h.Call("GET", "/v2/org/b/blz/patch?from=" + there + "&to=" + t, "", {}, false);
  ASSERT_EQ(p.status, 200) << p.body;
  Response r = h.Call("GET", Bases("org/b", t, {here, there}), "", {}, false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(DigestsOf(r), (std::vector<std::string>{there, here}));
  json doc = json::parse(BodyOf(r));
  EXPECT_EQ(doc["bases"][0]["patch_size"], BodyOf(p).size());
}

// A model of another architecture: every tensor of the same name has another shape.
std::string OtherArchitectureArchive(uint64_t seed) {
  blz::testing::TempDir tmp;
  blz::testing::TestModelOptions o;
  o.layers = 1;
  o.hidden = 8;
  o.vocab = 16;
  o.seed = seed;
  blz::testing::WriteTestModel(tmp / "model", o);
  formats::PackStats stats;
  Status s = formats::Pack(tmp / "model", tmp / "model.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "model.blz");
}

// Issue 24 item 5: TinyStories Llama was patched from tiny-gpt2. A version of another
// repository and architecture is never offered, even with a patch already cached from it; a
// version of another repository that holds the target's tensors (same names and shapes, plus a
// layer more) is. Bases and the target are named NAME:TAG.
TEST_F(BaseEndpointTest, NeverOffersAnUnrelatedArchitecture) {
  Harness h(WithPatches());
  const std::string t = PushVersion(&h, "org/b", "v2", target_);
  const std::string related = PushVersion(&h, "org/a", "v1", other_);  // 2 layers, same names
  const std::string unrelated =
      PushVersion(&h, "org/gpt2", "main", OtherArchitectureArchive(24));
  Response p = h.Call("GET", "/v2/org/b/blz/patch?from=" + unrelated + "&to=" + t, "", {}, false);
  ASSERT_EQ(p.status, 200) << p.body;

  Response r = h.Call("GET", Bases("org/b", t, {unrelated, related}), "", {}, false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(DigestsOf(r), (std::vector<std::string>{related}));
  json doc = json::parse(BodyOf(r));
  EXPECT_EQ(doc["to"]["name"], "org/b:v2");
  EXPECT_EQ(doc["bases"][0]["name"], "org/a:v1");
  EXPECT_EQ(doc["bases"][0]["shared_fraction"], 1.0);

  // Nothing related held: no base at all (the client then takes the full patch).
  Response none = h.Call("GET", Bases("org/b", t, {unrelated}), "", {}, false);
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_TRUE(DigestsOf(none).empty()) << BodyOf(none);

  // An untagged version is named NAME@<12 hex>.
  EXPECT_EQ(internal::VersionDisplayName("org/a", "sha256:0123456789abcdef0123", {}),
            "org/a@0123456789ab");
  EXPECT_EQ(internal::VersionDisplayName("org/a", "sha256:0123", {"v1", "latest"}),
            "org/a:latest");
}

TEST_F(BaseEndpointTest, PatchFromAVersionOfAnotherRepository) {
  Harness h(WithPatches());
  const std::string t = PushVersion(&h, "org/b", "v2", target_);
  const std::string there = PushVersion(&h, "org/a", "v1", there_);
  Response p = h.Call("GET", "/v2/org/b/blz/patch?from=" + there + "&to=" + t, "", {}, false);
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(BodyOf(p), "PATCH " + Sha256Hex(there_) + " -> " + Sha256Hex(target_));
  // A digest that is nobody's version stays refused.
  Response none = h.Call("GET", "/v2/org/b/blz/patch?from=" + unknown_ + "&to=" + t, "", {},
                         false);
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(ErrorCodeOf(none), "MANIFEST_UNKNOWN");
}

TEST_F(BaseEndpointTest, PrivateRegistryOffersOnlyReadableBases) {
  RegistryOptions o = WithPatches();
  o.private_mode = true;
  Harness h(o);
  const std::string t = PushVersion(&h, "org/b", "v2", target_);
  const std::string there = PushVersion(&h, "org/a", "v1", there_);
  auto token = h.registry().db().CreateToken("b-reader", "org/b:pull", std::nullopt);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  const Header reader{"Authorization", "Bearer " + *token};

  // org/a is not readable with this token: its version is neither offered nor patched from
  // (the answer is the same as for a digest nobody pushed).
  Response r = h.Call("GET", Bases("org/b", t, {there}), "", {reader}, false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(DigestsOf(r).empty());
  Response p = h.Call("GET", "/v2/org/b/blz/patch?from=" + there + "&to=" + t, "", {reader},
                      false);
  EXPECT_EQ(p.status, 404);
  EXPECT_EQ(ErrorCodeOf(p), "MANIFEST_UNKNOWN");
  Response unknown = h.Call("GET", "/v2/org/b/blz/patch?from=" + unknown_ + "&to=" + t, "",
                            {reader}, false);
  EXPECT_EQ(unknown.status, 404);
  std::string hidden = BodyOf(p);
  hidden.replace(hidden.find(there), there.size(), unknown_);
  hidden.replace(hidden.find(there), there.size(), unknown_);  // message and detail
  EXPECT_EQ(hidden, BodyOf(unknown));

  // The admin token reads everything.
  Response admin = h.Call("GET", Bases("org/b", t, {there}));
  ASSERT_EQ(admin.status, 200) << admin.body;
  EXPECT_EQ(DigestsOf(admin), (std::vector<std::string>{there}));
  // Anonymous callers get nothing at all.
  EXPECT_EQ(h.Call("GET", Bases("org/b", t, {there}), "", {}, false).status, 401);
}

TEST_F(BaseEndpointTest, RejectsBadQueries) {
  Harness h;
  const std::string t = PushVersion(&h, "org/b", "v2", target_);
  Response no_to = h.Call("GET", "/v2/org/b/blz/bases", "", {}, false);
  EXPECT_EQ(no_to.status, 400);
  EXPECT_EQ(ErrorCodeOf(no_to), "DIGEST_INVALID");
  Response bad_have = h.Call("GET", Bases("org/b", t, {"sha256:xyz"}), "", {}, false);
  EXPECT_EQ(bad_have.status, 400);
  EXPECT_NE(bad_have.body.find("sha256:xyz"), std::string::npos) << bad_have.body;
  std::vector<std::string> many;
  for (int i = 0; i < 65; ++i) many.push_back(D("d" + std::to_string(i)));
  Response too_many = h.Call("GET", Bases("org/b", t, many), "", {}, false);
  EXPECT_EQ(too_many.status, 400);
  EXPECT_NE(too_many.body.find("more than 64"), std::string::npos) << too_many.body;
  Response not_version = h.Call("GET", Bases("org/b", unknown_, {}), "", {}, false);
  EXPECT_EQ(not_version.status, 404);
  EXPECT_EQ(ErrorCodeOf(not_version), "MANIFEST_UNKNOWN");
  Response post = h.Call("POST", Bases("org/b", t, {}), "", {}, false);
  EXPECT_EQ(post.status, 405);
}

}  // namespace
}  // namespace blz::registry
