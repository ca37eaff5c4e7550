// Authentication and authorization through the registry's handlers (registry/auth.h): the
// challenge, Basic credentials, the token endpoint, scoped tokens, revocation, expiry, and the
// token admin API.
#include "registry/auth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sys/stat.h>

#include <ctime>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::kManifestType;

constexpr bool kAnon = false;  // Harness::Call's `auth`: do not add the admin token

Header Basic(const std::string& user, const std::string& password) {
  return {"Authorization", "Basic " + Base64Encode(user + ":" + password, /*url=*/false)};
}
Header Bearer(const std::string& token) { return {"Authorization", "Bearer " + token}; }
Header Host(const std::string& host) { return {"Host", host}; }

std::string D(const std::string& bytes) { return MakeDigest(Sha256Hex(bytes)); }

RegistryOptions Private() {
  RegistryOptions o;
  o.private_mode = true;
  return o;
}

// A new API token with `scope` (expiring `expires_in` seconds from now when not 0).
std::string NewToken(Harness* h, const std::string& name, const std::string& scope,
                     int64_t expires_in = 0) {
  std::optional<int64_t> expires;
  if (expires_in != 0) expires = int64_t(std::time(nullptr)) + expires_in;
  auto t = h->registry().db().CreateToken(name, scope, expires);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : "";
}

// GET the token endpoint; returns the access token ("" on failure, with *status set).
std::string FetchAccessToken(Harness* h, const std::string& query, std::vector<Header> headers,
                             int* status = nullptr) {
  Response r = h->Call("GET", std::string(kTokenEndpointPath) + query, "", std::move(headers),
                       kAnon);
  if (status != nullptr) *status = r.status;
  if (r.status != 200) return "";
  json j = json::parse(r.body, nullptr, false);
  EXPECT_TRUE(j.is_object()) << r.body;
  if (!j.is_object()) return "";
  EXPECT_EQ(j.value("token", ""), j.value("access_token", ""));
  EXPECT_EQ(j.value("expires_in", 0), kAccessTokenSeconds);
  EXPECT_TRUE(j.contains("issued_at") && j["issued_at"].is_string());
  return j.value("token", "");
}

// A small pushed version of `repo` (tag v1), pushed with the admin token.
void PushVersion(Harness* h, const std::string& repo) {
  static const std::string archive = testing::TinyArchive(1);
  Response r = h->PutManifest(repo, "v1", h->ManifestFor(repo, archive));
  ASSERT_EQ(r.status, 201) << r.body;
}

// ---- the challenge ----

TEST(AuthTest, AnonymousPingIsChallengedWithAnAbsoluteRealm) {
  Harness h;
  Response r = h.Call("GET", "/v2/", "", {Host("reg.example:5000")}, kAnon);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(ErrorCodeOf(r), "UNAUTHORIZED");
  EXPECT_EQ(r.Get("WWW-Authenticate"),
            "Bearer realm=\"http://reg.example:5000/v2/_blz/token\",service=\"reg.example:5000\"");
  // Without a (usable) Host header the realm is still an absolute URL.
  for (const std::vector<Header>& headers :
       {std::vector<Header>{}, std::vector<Header>{Host("evil\"host")}}) {
    Response no_host = h.Call("GET", "/v2/", "", headers, kAnon);
    EXPECT_EQ(no_host.Get("WWW-Authenticate"),
              "Bearer realm=\"http://localhost/v2/_blz/token\",service=\"localhost\"");
  }
  // Valid credentials: 200.
  EXPECT_EQ(h.Call("GET", "/v2/").status, 200);
  EXPECT_EQ(h.Call("GET", "/v2/", "", {Basic("anyone", h.token())}, kAnon).status, 200);
}

TEST(AuthTest, PublicUrlIsTheRealmAndScopesNameTheRepository) {
  RegistryOptions o;
  o.public_url = "https://models.example.com/";
  Harness h(o);
  Response r = h.Call("POST", "/v2/org/m/blobs/uploads/", "", {Host("ignored:1")}, kAnon);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.Get("WWW-Authenticate"),
            "Bearer realm=\"https://models.example.com/v2/_blz/token\","
            "service=\"models.example.com\",scope=\"repository:org/m:pull,push\"");
  // A bad public URL is refused at Open.
  RegistryOptions bad;
  bad.public_url = "models.example.com";
  blz::testing::TempDir tmp;
  auto reg = Registry::Open(tmp / "data", bad);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), Code::kInvalidArgument);
}

// ---- Basic ----

TEST(AuthTest, BasicCredentialsWorkOnEveryEndpointIncludingChunkedUploads) {
  Harness h(Private());
  const Header basic = Basic("conformance", h.token());
  Response ping = h.Call("GET", "/v2/", "", {basic}, kAnon);
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(ping.principal, "conformance@admin");  // recorded for the access log
  EXPECT_EQ(h.Call("GET", "/v2/").principal, "admin");
  // A chunked upload following Location: POST, PATCH, PUT, all with Basic.
  const std::string blob = "chunked upload bytes";
  Response start = h.Call("POST", "/v2/org/m/blobs/uploads/", "", {basic}, kAnon);
  ASSERT_EQ(start.status, 202) << start.body;
  const std::string loc = *start.Get("Location");
  Response patch = h.Call("PATCH", loc, blob.substr(0, 7),
                          {basic, {"Content-Range", "0-6"}}, kAnon);
  ASSERT_EQ(patch.status, 202) << patch.body;
  Response put = h.Call("PUT", *patch.Get("Location") + "?digest=" + D(blob), blob.substr(7),
                        {basic}, kAnon);
  ASSERT_EQ(put.status, 201) << put.body;
  Response get = h.Call("GET", "/v2/org/m/blobs/" + D(blob), "", {basic}, kAnon);
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(testing::BodyOf(get), blob);
  EXPECT_EQ(h.Call("GET", "/v2/_catalog", "", {basic}, kAnon).status, 200);
}

TEST(AuthTest, BadBasicCredentialsAreChallenged) {
  Harness h;
  std::string wrong = h.token();
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  for (const Header& header :
       {Basic("u", wrong), Basic("u", ""), Header{"Authorization", "Basic !!!"},
        Header{"Authorization", "Basic " + Base64Encode("no-colon", false)}, Bearer(wrong),
        Bearer("blz1.forged.token")}) {
    Response r = h.Call("GET", "/v2/", "", {header}, kAnon);
    EXPECT_EQ(r.status, 401) << header.value;
    EXPECT_EQ(ErrorCodeOf(r), "UNAUTHORIZED");
    EXPECT_EQ(r.Get("WWW-Authenticate").value_or("").rfind("Bearer realm=\"http://", 0), 0u);
    // Bad credentials are refused even where anonymous callers could read.
    EXPECT_EQ(h.Call("GET", "/v2/_catalog", "", {header}, kAnon).status, 401);
  }
}

TEST(AuthTest, HubClientsMaySendTheApiTokenWithTheHfPrefix) {
  // @huggingface/hub refuses an accessToken that does not start with "hf_".
  Harness h(Private());
  Response ping = h.Call("GET", "/v2/", "", {Bearer("hf_" + h.token())}, kAnon);
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(ping.principal, "admin");
  EXPECT_EQ(h.Call("GET", "/v2/", "", {Bearer("hf_")}, kAnon).status, 401);
  EXPECT_EQ(h.Call("GET", "/v2/", "", {Bearer("hf_x" + h.token())}, kAnon).status, 401);
}

// ---- scopes ----

TEST(AuthTest, PullOnlyTokenCannotPush) {
  Harness h;
  PushVersion(&h, "org/m");
  const std::string reader = NewToken(&h, "reader", "*:pull");
  EXPECT_EQ(h.Call("GET", "/v2/org/m/manifests/v1", "", {Basic("r", reader)}, kAnon).status, 200);
  for (const std::pair<std::string, std::string>& req :
       std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v2/org/m/blobs/uploads/"},
           {"PUT", "/v2/org/m/manifests/v2"},
           {"POST", "/v2/_blz/gc"},
           {"GET", "/v2/_blz/tokens"}}) {
    Response r = h.Call(req.first, req.second, "", {Basic("r", reader)}, kAnon);
    EXPECT_EQ(r.status, 403) << req.first << " " << req.second;
    EXPECT_EQ(ErrorCodeOf(r), "DENIED") << r.body;
    EXPECT_FALSE(r.Get("WWW-Authenticate").has_value());
  }
}

TEST(AuthTest, NamespaceTokensStayInTheirNamespace) {
  Harness h(Private());
  const std::string ci = NewToken(&h, "ci", "org-a/*:pull,push");
  const Header auth = Bearer(ci);
  EXPECT_EQ(h.PushBlob("org-b/x", "seed"), D("seed"));  // as admin
  Response own = h.Call("POST", "/v2/org-a/x/blobs/uploads/?digest=" + D("a"), "a", {auth}, kAnon);
  EXPECT_EQ(own.status, 201) << own.body;
  EXPECT_EQ(h.Call("POST", "/v2/org-a/deep/er/blobs/uploads/", "", {auth}, kAnon).status, 202);
  Response other =
      h.Call("POST", "/v2/org-b/x/blobs/uploads/?digest=" + D("b"), "b", {auth}, kAnon);
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(ErrorCodeOf(other), "DENIED");
  EXPECT_NE(other.body.find("push on repository 'org-b/x'"), std::string::npos) << other.body;
  // The refusal names the token and the scope it has, so that the client can say what it
  // lacked (issue 24).
  EXPECT_NE(other.body.find("token 'ci' (scope 'org-a/*:pull,push') does not grant push"),
            std::string::npos)
      << other.body;
  EXPECT_EQ(h.Call("POST", "/v2/org-ab/x/blobs/uploads/", "", {auth}, kAnon).status, 403);
  // Private registry: no pulls outside the namespace either; the catalog needs pull somewhere.
  EXPECT_EQ(h.Call("GET", "/v2/org-b/x/blobs/" + D("seed"), "", {auth}, kAnon).status, 403);
  EXPECT_EQ(h.Call("GET", "/v2/org-a/x/blobs/" + D("a"), "", {auth}, kAnon).status, 200);
  EXPECT_EQ(h.Call("GET", "/v2/_catalog", "", {auth}, kAnon).status, 200);
  const std::string pusher = NewToken(&h, "pusher", "org-a/*:push");
  EXPECT_EQ(h.Call("GET", "/v2/_catalog", "", {Bearer(pusher)}, kAnon).status, 403);
}

TEST(AuthTest, AnonymousPullsOnlyOnPublicRegistries) {
  {
    Harness h;
    PushVersion(&h, "m");
    EXPECT_EQ(h.Call("GET", "/v2/m/manifests/v1", "", {}, kAnon).status, 200);
    EXPECT_EQ(h.Call("GET", "/v2/m/tags/list", "", {}, kAnon).status, 200);
    Response catalog = h.Call("GET", "/v2/_catalog", "", {}, kAnon);
    EXPECT_EQ(catalog.status, 200);
    EXPECT_EQ(catalog.principal, "");
    Response push = h.Call("PUT", "/v2/m/manifests/v2", "{}", {{"Content-Type", kManifestType}},
                           kAnon);
    EXPECT_EQ(push.status, 401);
  }
  {
    Harness h(Private());
    PushVersion(&h, "m");
    Response r = h.Call("GET", "/v2/m/manifests/v1", "", {}, kAnon);
    EXPECT_EQ(r.status, 401);
    EXPECT_NE(r.Get("WWW-Authenticate").value_or("").find("scope=\"repository:m:pull\""),
              std::string::npos);
    EXPECT_EQ(h.Call("GET", "/v2/_catalog", "", {}, kAnon).status, 401);
  }
}

// ---- revocation and expiry ----

TEST(AuthTest, RevokedTokensFailAtOnceAndSoDoTheirAccessTokens) {
  Harness h(Private());
  PushVersion(&h, "m");
  const std::string t = NewToken(&h, "temp", "m:pull,push");
  const std::string access = FetchAccessToken(&h, "?service=x&scope=repository:m:pull",
                                              {Basic("u", t)});
  ASSERT_FALSE(access.empty());
  EXPECT_EQ(h.Call("GET", "/v2/m/manifests/v1", "", {Bearer(access)}, kAnon).status, 200);
  EXPECT_EQ(h.Call("GET", "/v2/m/manifests/v1", "", {Basic("u", t)}, kAnon).status, 200);

  Response revoke = h.Call("DELETE", "/v2/_blz/tokens/temp");
  ASSERT_EQ(revoke.status, 204) << revoke.body;
  for (const Header& header : {Basic("u", t), Bearer(t), Bearer(access)}) {
    Response r = h.Call("GET", "/v2/m/manifests/v1", "", {header}, kAnon);
    EXPECT_EQ(r.status, 401) << header.value;
    EXPECT_NE(r.body.find("revoked"), std::string::npos) << r.body;
  }
  // A new token of the same name does not revive the old access token.
  NewToken(&h, "temp", "m:pull,push");
  EXPECT_EQ(h.Call("GET", "/v2/m/manifests/v1", "", {Bearer(access)}, kAnon).status, 401);
  // The token endpoint refuses it too.
  int status = 0;
  FetchAccessToken(&h, "?scope=repository:m:pull", {Basic("u", t)}, &status);
  EXPECT_EQ(status, 401);
}

TEST(AuthTest, ExpiredTokensAndAccessTokensFail) {
  Harness h(Private());
  PushVersion(&h, "m");
  const std::string old = NewToken(&h, "old", "*:pull", /*expires_in=*/-5);
  Response r = h.Call("GET", "/v2/m/manifests/v1", "", {Basic("u", old)}, kAnon);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("expired"), std::string::npos) << r.body;

  // An access token past its expiry, and one whose claims were edited.
  auto auth = Authenticator::Open(h.data(), &h.registry().db(), {/*private_mode=*/true, ""});
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  const std::string reader = NewToken(&h, "reader", "*:pull");
  Principal who = *(*auth)->Authenticate(RequestHead{"GET", "/v2/", {Bearer(reader)}, {}, false},
                                          int64_t(std::time(nullptr)));
  const int64_t now = int64_t(std::time(nullptr));
  const std::string fresh = (*auth)->MintAccessToken(who, *Scope::Parse("m:pull"), false, now, 300);
  const std::string stale =
      (*auth)->MintAccessToken(who, *Scope::Parse("m:pull"), false, now - 1000, 300);
  EXPECT_EQ(h.Call("GET", "/v2/m/manifests/v1", "", {Bearer(fresh)}, kAnon).status, 200);
  Response expired = h.Call("GET", "/v2/m/manifests/v1", "", {Bearer(stale)}, kAnon);
  EXPECT_EQ(expired.status, 401);
  EXPECT_NE(expired.body.find("expired"), std::string::npos) << expired.body;
  // Swap in the claims of a broader token: the signature no longer matches.
  const std::string broad =
      (*auth)->MintAccessToken(who, *Scope::Parse("m:pull,push"), false, now, 300);
  std::string forged = broad.substr(0, broad.rfind('.')) + fresh.substr(fresh.rfind('.'));
  Response f = h.Call("GET", "/v2/m/manifests/v1", "", {Bearer(forged)}, kAnon);
  EXPECT_EQ(f.status, 401);
  EXPECT_NE(f.body.find("bad signature"), std::string::npos) << f.body;
}

// ---- the token endpoint ----

TEST(AuthTest, TokenEndpointGrantsTheIntersectionOfRequestedAndAllowed) {
  Harness h(Private());
  PushVersion(&h, "org/m");
  const std::string reader = NewToken(&h, "reader", "org/*:pull");
  const std::string access = FetchAccessToken(
      &h, "?service=blz&scope=repository:org/m:pull,push&scope=repository:other:pull",
      {Basic("u", reader)});
  ASSERT_FALSE(access.empty());
  const Header bearer = Bearer(access);
  EXPECT_EQ(h.Call("GET", "/v2/", "", {bearer}, kAnon).status, 200);
  EXPECT_EQ(h.Call("GET", "/v2/org/m/manifests/v1", "", {bearer}, kAnon).status, 200);
  // Granted only pull on org/m: pushing is beyond the API token too, so 403.
  Response push = h.Call("POST", "/v2/org/m/blobs/uploads/", "", {bearer}, kAnon);
  EXPECT_EQ(push.status, 403);
  EXPECT_EQ(ErrorCodeOf(push), "DENIED");
  // org/n matches the API token's scope but was not requested: ask again (insufficient_scope).
  Response other = h.Call("GET", "/v2/org/n/tags/list", "", {bearer}, kAnon);
  EXPECT_EQ(other.status, 401);
  EXPECT_NE(other.Get("WWW-Authenticate")
                .value_or("")
                .find("scope=\"repository:org/n:pull\",error=\"insufficient_scope\""),
            std::string::npos)
      << other.Get("WWW-Authenticate").value_or("");
  EXPECT_EQ(h.Call("GET", "/v2/other/tags/list", "", {bearer}, kAnon).status, 403);
}

TEST(AuthTest, TokenEndpointFlowForAPushLikeDockerDoes) {
  Harness h(Private());
  const std::string ci = NewToken(&h, "ci", "org/*:pull,push");
  // 1. The client tries, gets the challenge; 2. asks the realm for the challenge's scope.
  Response first = h.Call("POST", "/v2/org/m/blobs/uploads/", "", {}, kAnon);
  ASSERT_EQ(first.status, 401);
  EXPECT_NE(first.Get("WWW-Authenticate").value_or("").find("scope=\"repository:org/m:pull,push\""),
            std::string::npos);
  // Go's url.Values encodes the scope's ':' and ',' and the space between scopes as '+'.
  const std::string access = FetchAccessToken(
      &h, "?account=u&scope=repository%3Aorg%2Fm%3Apull%2Cpush+registry:catalog:*&service=s",
      {Basic("u", ci)});
  ASSERT_FALSE(access.empty());
  const std::string blob = "docker-style push";
  Response up = h.Call("POST", "/v2/org/m/blobs/uploads/?digest=" + D(blob), blob,
                       {Bearer(access)}, kAnon);
  EXPECT_EQ(up.status, 201) << up.body;
  EXPECT_EQ(h.Call("GET", "/v2/_catalog", "", {Bearer(access)}, kAnon).status, 200);
}

TEST(AuthTest, TokenEndpointForAnonymousCallers) {
  {
    Harness h;  // public: anonymous callers get pull, never push
    PushVersion(&h, "m");
    const std::string access =
        FetchAccessToken(&h, "?scope=repository:m:pull,push", {}, nullptr);
    ASSERT_FALSE(access.empty());
    EXPECT_EQ(h.Call("GET", "/v2/", "", {Bearer(access)}, kAnon).status, 200);
    EXPECT_EQ(h.Call("GET", "/v2/m/manifests/v1", "", {Bearer(access)}, kAnon).status, 200);
    Response push = h.Call("POST", "/v2/m/blobs/uploads/", "", {Bearer(access)}, kAnon);
    EXPECT_EQ(push.status, 401);  // anonymous: a challenge, so a client can log in
  }
  {
    Harness h(Private());
    int status = 0;
    EXPECT_EQ(FetchAccessToken(&h, "?scope=repository:m:pull", {}, &status), "");
    EXPECT_EQ(status, 401);
    Response bad = h.Call("GET", "/v2/_blz/token", "", {Basic("u", "nope")}, kAnon);
    EXPECT_EQ(bad.status, 401);
    EXPECT_EQ(bad.Get("WWW-Authenticate"), "Basic realm=\"blz\"");
  }
}

TEST(AuthTest, TokenEndpointRefusesMalformedScopes) {
  Harness h;
  for (const char* q : {"?scope=repository", "?scope=repository:m", "?scope=repository:BAD:pull"}) {
    Response r = h.Call("GET", std::string("/v2/_blz/token") + q);
    EXPECT_EQ(r.status, 400) << q;
    EXPECT_EQ(ErrorCodeOf(r), "BAD_REQUEST") << r.body;
  }
  // Unknown resource types and actions are ignored, as with distribution.
  EXPECT_EQ(h.Call("GET", "/v2/_blz/token?scope=plugin:x:pull&scope=repository:m:fly").status,
            200);
  EXPECT_EQ(h.Call("POST", "/v2/_blz/token").status, 405);
}

// ---- the admin API ----

TEST(AuthTest, AdminApiCreatesListsAndRevokesTokens) {
  Harness h(Private());
  PushVersion(&h, "org/m");
  Response created = h.Call("POST", "/v2/_blz/tokens",
                            R"({"name":"ci","scope":"org/*:push,pull","expires_in":3600})");
  ASSERT_EQ(created.status, 201) << created.body;
  json c = json::parse(created.body);
  EXPECT_EQ(c["name"], "ci");
  EXPECT_EQ(c["scope"], "org/*:pull,push");  // canonical
  EXPECT_TRUE(c["expires"].is_number_integer());
  const std::string ci = c["token"];
  EXPECT_EQ(h.Call("GET", "/v2/org/m/tags/list", "", {Basic("ci", ci)}, kAnon).status, 200);

  Response listed = h.Call("GET", "/v2/_blz/tokens");
  ASSERT_EQ(listed.status, 200);
  json l = json::parse(listed.body);
  ASSERT_EQ(l["tokens"].size(), 2u);
  EXPECT_EQ(l["tokens"][0]["name"], "admin");
  EXPECT_EQ(l["tokens"][0]["scope"], "*:pull,push,delete,admin");
  EXPECT_TRUE(l["tokens"][0]["expires"].is_null());
  EXPECT_EQ(l["tokens"][1]["name"], "ci");
  EXPECT_EQ(listed.body.find(ci), std::string::npos);  // never shown again

  // Errors: bad fields, duplicate names, non-admin callers, unknown names.
  for (const char* body : {"", "[]", R"({"scope":"*:pull"})", R"({"name":"x"})",
                           R"({"name":"bad name","scope":"*:pull"})",
                           R"({"name":"x","scope":"org/*:admin"})",
                           R"({"name":"x","scope":"*:pull","expires_in":0})",
                           R"({"name":"x","scope":"*:pull","expires_in":"30d"})"}) {
    Response r = h.Call("POST", "/v2/_blz/tokens", body);
    EXPECT_EQ(r.status, 400) << body << " " << r.body;
  }
  Response bad_scope = h.Call("POST", "/v2/_blz/tokens", R"({"name":"x","scope":"org/*:pul"})");
  EXPECT_NE(bad_scope.body.find("unknown action 'pul'"), std::string::npos) << bad_scope.body;
  EXPECT_EQ(h.Call("POST", "/v2/_blz/tokens", R"({"name":"ci","scope":"*:pull"})").status, 403);
  EXPECT_EQ(h.Call("POST", "/v2/_blz/tokens", R"({"name":"y","scope":"*:pull"})", {Basic("ci", ci)},
                   kAnon)
                .status,
            403);
  EXPECT_EQ(h.Call("DELETE", "/v2/_blz/tokens/ci", "", {Basic("ci", ci)}, kAnon).status, 403);
  EXPECT_EQ(h.Call("DELETE", "/v2/_blz/tokens/nobody").status, 404);
  EXPECT_EQ(h.Call("PUT", "/v2/_blz/tokens/ci").status, 405);

  ASSERT_EQ(h.Call("DELETE", "/v2/_blz/tokens/ci").status, 204);
  EXPECT_EQ(h.Call("GET", "/v2/org/m/tags/list", "", {Basic("ci", ci)}, kAnon).status, 401);
  EXPECT_EQ(json::parse(h.Call("GET", "/v2/_blz/tokens").body)["tokens"].size(), 1u);
}

TEST(AuthTest, SecretLivesInTheDatabaseAndSurvivesRestarts) {
  Harness h(Private());
  PushVersion(&h, "m");
  const std::string access =
      FetchAccessToken(&h, "?scope=repository:m:pull", {Basic("u", h.token())});
  ASSERT_FALSE(access.empty());
  // In the metadata DB (shared by replicas), not in a file of the data directory.
  EXPECT_TRUE(h.registry().db().GetSetting(kAuthSecretSetting).ok());
  EXPECT_FALSE(std::filesystem::exists(h.data() + "/auth_secret"));
  h.Reopen(Private());
  EXPECT_EQ(h.Call("GET", "/v2/m/manifests/v1", "", {Bearer(access)}, kAnon).status, 200);
  // A fresh DB next to a damaged secret file of an older blz is refused with a clear message.
  blz::testing::TempDir fresh;
  std::filesystem::create_directories(fresh / "data");
  std::filesystem::permissions(fresh / "data", std::filesystem::perms::owner_all);
  blz::testing::WriteFileBytes(fresh / "data/auth_secret", "short\n");
  auto reg = Registry::Open(fresh / "data", Private());
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), Code::kCorruption);
  EXPECT_NE(reg.status().message().find("auth_secret"), std::string::npos);
}

TEST(AuthTest, RevokedAdminTokenIsReplacedAtTheNextStart) {
  Harness h;
  ASSERT_EQ(h.Call("DELETE", "/v2/_blz/tokens/admin").status, 204);
  EXPECT_EQ(h.Call("GET", "/v2/").status, 401);
  auto again = h.registry().EnsureAdminToken();
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ(h.Call("GET", "/v2/", "", {Bearer(**again)}, kAnon).status, 200);
  EXPECT_FALSE(h.registry().EnsureAdminToken()->has_value());
}

}  // namespace
}  // namespace blz::registry
