// Quotas and limits (docs/registry-api.md, "Quotas and limits"; issue 23): listings filtered by
// what the caller may pull, caps on open upload sessions and their idle expiry, and the
// per-client rate limit on new derived computations (the limiter itself:
// tests/registry/rate_limiter_test.cc). Lossy-delta canonical values and the delta cache's byte
// budget: tests/registry/delta_handlers_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "registry/registry.h"
#include "store/sql.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using nlohmann::json;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::Json;
using testing::PushVersion;
using testing::TinyArchive;

constexpr bool kAnon = false;  // Harness::Call without the admin token

Header Bearer(const std::string& token) { return {"Authorization", "Bearer " + token}; }

std::string NewToken(Harness* h, const std::string& name, const std::string& scope) {
  auto t = h->registry().db().CreateToken(name, scope);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : "";
}

RegistryOptions Private() {
  RegistryOptions o;
  o.private_mode = true;
  return o;
}

// ---- listings show only what the caller may pull (item 3) ----

TEST(ListingLimitsTest, CatalogListsOnlyRepositoriesTheTokenMayPull) {
  Harness h(Private());
  PushVersion(&h, "org-a/m", "v1", TinyArchive(1));
  PushVersion(&h, "org-a/n", "v1", TinyArchive(2));
  PushVersion(&h, "org-b/secret", "v1", TinyArchive(3));
  const std::string a = NewToken(&h, "tenant-a", "org-a/*:pull");

  Response all = h.Call("GET", "/v2/_catalog", "", {Bearer(a)}, kAnon);
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_EQ(Json(all)["repositories"], json::array({"org-a/m", "org-a/n"}));
  EXPECT_EQ(all.body.find("org-b"), std::string::npos) << all.body;

  // Pages are cut from the filtered list: the Link continues inside the tenant.
  Response first = h.Call("GET", "/v2/_catalog?n=1", "", {Bearer(a)}, kAnon);
  EXPECT_EQ(Json(first)["repositories"], json::array({"org-a/m"}));
  EXPECT_EQ(first.Get("Link"), "</v2/_catalog?n=1&last=org-a/m>; rel=\"next\"");
  Response second = h.Call("GET", "/v2/_catalog?n=1&last=org-a/m", "", {Bearer(a)}, kAnon);
  EXPECT_EQ(Json(second)["repositories"], json::array({"org-a/n"}));
  EXPECT_FALSE(second.Get("Link").has_value()) << *second.Get("Link");

  // The admin still sees everything.
  EXPECT_EQ(Json(h.Call("GET", "/v2/_catalog"))["repositories"],
            json::array({"org-a/m", "org-a/n", "org-b/secret"}));
}

TEST(ListingLimitsTest, StructureListingShowsOnlyVersionsTheTokenMayPull) {
  Harness h(Private());
  // Same layer count: the same structure in both tenants.
  const std::string mine = PushVersion(&h, "org-a/m", "v1", TinyArchive(1));
  const std::string theirs = PushVersion(&h, "org-b/secret", "hidden-tag", TinyArchive(2));
  auto versions = h.registry().db().ListVersions("org-a/m");
  ASSERT_TRUE(versions.ok() && versions->size() == 1);
  const std::string hash = versions->front().structural_hash;
  ASSERT_FALSE(hash.empty());
  const std::string a = NewToken(&h, "tenant-a", "org-a/*:pull");

  Response r = h.Call("GET", "/v2/_blz/structures/" + hash, "", {Bearer(a)}, kAnon);
  ASSERT_EQ(r.status, 200) << r.body;
  const json doc = Json(r);
  ASSERT_EQ(doc["versions"].size(), 1u) << r.body;
  EXPECT_EQ(doc["versions"][0]["repository"], "org-a/m");
  EXPECT_EQ(doc["versions"][0]["digest"], mine);
  EXPECT_EQ(r.body.find("org-b"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("hidden-tag"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(theirs), std::string::npos) << r.body;
  EXPECT_FALSE(r.Get("Link").has_value());

  // The admin sees both, and pages of one continue with a Link.
  Response admin = h.Call("GET", "/v2/_blz/structures/" + hash + "?n=1");
  EXPECT_EQ(Json(admin)["versions"].size(), 1u);
  EXPECT_TRUE(admin.Get("Link").has_value());
  EXPECT_EQ(Json(h.Call("GET", "/v2/_blz/structures/" + hash))["versions"].size(), 2u);
}

// ---- upload sessions: caps and idle expiry (item 9) ----

// The default caps (kDefaultMaxUploadsPerToken, kDefaultMaxUploadsPerRepository), spelled out
// so that this file also builds against a registry without them.
constexpr uint64_t kPerToken = 100;
constexpr uint64_t kPerRepository = 1000;

// POST /v2/<repo>/blobs/uploads/ with `token`: the response.
Response OpenSession(Harness* h, const std::string& repo, const std::string& token) {
  return h->Call("POST", "/v2/" + repo + "/blobs/uploads/", "", {Bearer(token)}, kAnon);
}

TEST(UploadLimitsTest, OpenSessionsPerTokenAreCapped) {
  Harness h;
  const std::string pusher = NewToken(&h, "ci", "org/*:push");
  std::string last_location;
  for (uint64_t i = 0; i < kPerToken; ++i) {
    Response r = OpenSession(&h, "org/m", pusher);
    ASSERT_EQ(r.status, 202) << i << ": " << r.body;
    last_location = r.Get("Location").value_or("");
  }
  Response over = OpenSession(&h, "org/m", pusher);
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(ErrorCodeOf(over), "TOOMANYREQUESTS");
  EXPECT_NE(over.body.find("the most allowed per token (" +
                           std::to_string(kPerToken) + ")"),
            std::string::npos)
      << over.body;
  EXPECT_TRUE(over.Get("Retry-After").has_value());
  // A session is its database row: no local file, neither for these nor the refused one.
  EXPECT_EQ(h.UploadsCount(), 0u);
  // Other tokens are not affected; cancelling a session frees a place.
  EXPECT_EQ(h.Call("POST", "/v2/org/m/blobs/uploads/").status, 202);
  ASSERT_EQ(h.Call("DELETE", last_location, "", {Bearer(pusher)}, kAnon).status, 204);
  EXPECT_EQ(OpenSession(&h, "org/m", pusher).status, 202);
}

TEST(UploadLimitsTest, OpenSessionsPerRepositoryAreCapped) {
  Harness h;
  const uint64_t tokens = kPerRepository / kPerToken;
  for (uint64_t t = 0; t < tokens; ++t) {
    const std::string token = NewToken(&h, "ci-" + std::to_string(t), "org/*:push");
    for (uint64_t i = 0; i < kPerToken; ++i) {
      ASSERT_EQ(OpenSession(&h, "org/m", token).status, 202) << t << "/" << i;
    }
  }
  const std::string fresh = NewToken(&h, "ci-fresh", "org/*:push");
  Response over = OpenSession(&h, "org/m", fresh);
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(ErrorCodeOf(over), "TOOMANYREQUESTS");
  EXPECT_NE(over.body.find("open in repository 'org/m', the most allowed per repository"),
            std::string::npos)
      << over.body;
  // Another repository has its own count.
  EXPECT_EQ(OpenSession(&h, "org/other", fresh).status, 202);
}

TEST(UploadLimitsTest, IdleSessionsExpireLongBeforeAWeek) {
  Harness h;
  Response idle = h.Call("POST", "/v2/org/m/blobs/uploads/");
  Response busy = h.Call("POST", "/v2/org/m/blobs/uploads/");
  ASSERT_EQ(idle.status, 202);
  ASSERT_EQ(busy.status, 202);
  const std::string idle_uuid = idle.Get("Docker-Upload-UUID").value_or("");
  const std::string busy_uuid = busy.Get("Docker-Upload-UUID").value_or("");
  ASSERT_EQ(h.Call("PATCH", *idle.Get("Location"), "some bytes").status, 202);
  ASSERT_EQ(h.Call("PATCH", *busy.Get("Location"), "more bytes").status, 202);
  // No byte for 25 hours (the default idle timeout is 24 h; the session is a day old at most,
  // far from the week of upload_max_age): the row's last activity, which every replica writes.
  {
    Result<store::sql::Database> db = h.OpenMetadataSql();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE(db->Exec("UPDATE uploads SET updated = updated - 90000, started = started - 90000"
                         " WHERE uuid = '" + idle_uuid + "'")
                    .ok());
  }
  const bool fs = std::filesystem::exists(h.data() + "/uploads/parts-" + idle_uuid);
  h.Reopen();
  Response gone = h.Call("GET", *idle.Get("Location"));
  EXPECT_EQ(gone.status, 404) << gone.body;
  EXPECT_EQ(ErrorCodeOf(gone), "BLOB_UPLOAD_UNKNOWN");
  EXPECT_FALSE(std::filesystem::exists(h.data() + "/uploads/parts-" + idle_uuid));
  EXPECT_EQ(h.Call("GET", *busy.Get("Location")).status, 204);
  if (fs) {
    EXPECT_TRUE(std::filesystem::exists(h.data() + "/uploads/parts-" + busy_uuid));
  }
}

// ---- new derived computations per client (item 1) ----

TEST(ComputationLimitsTest, NewPatchesPerClientAreRateLimited) {
  RegistryOptions o;
  o.computation_burst = 10;  // (the default is 30)
  int calls = 0;
  o.create_patch = [&calls](const std::string&, const std::string&, const std::string&,
                            const std::string& to, const std::string& out) -> Status {
    ++calls;
    return WriteFileAtomic(out, "PATCH to " + to);
  };
  Harness h(std::move(o));
  std::vector<std::string> v;
  for (int i = 0; i < 13; ++i) {
    v.push_back(PushVersion(&h, "m", "v" + std::to_string(i), TinyArchive(100 + uint64_t(i))));
  }
  auto patch = [&](int to, std::vector<Header> headers, bool admin) {
    return h.Call("GET", "/v2/m/blz/patch?from=" + v[0] + "&to=" + v[size_t(to)], "",
                  std::move(headers), admin);
  };
  // An anonymous caller of a public registry: 10 new patches at once, then 429.
  for (int i = 1; i <= 10; ++i) {
    Response r = patch(i, {}, kAnon);
    ASSERT_EQ(r.status, 200) << i << ": " << r.body;
    EXPECT_EQ(r.Get("Blz-Patch-Cache"), "miss");
  }
  Response over = patch(11, {}, kAnon);
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(ErrorCodeOf(over), "TOOMANYREQUESTS");
  ASSERT_TRUE(over.Get("Retry-After").has_value());
  EXPECT_GE(std::stoi(*over.Get("Retry-After")), 1);
  EXPECT_NE(over.body.find("too many new computations"), std::string::npos) << over.body;
  EXPECT_EQ(calls, 10);
  // Cached results cost nothing.
  Response cached = patch(1, {}, kAnon);
  EXPECT_EQ(cached.status, 200);
  EXPECT_EQ(cached.Get("Blz-Patch-Cache"), "hit");
  // Another client (a token) has its own bucket; admin tokens are not limited.
  const std::string reader = NewToken(&h, "reader", "*:pull");
  EXPECT_EQ(patch(11, {Bearer(reader)}, kAnon).status, 200);
  EXPECT_EQ(patch(12, {}, /*admin=*/true).status, 200);
  EXPECT_EQ(calls, 12);
}

}  // namespace
}  // namespace blz::registry
