#include "client/registry_client.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "client/local_store.h"
#include "core/digest.h"
#include "tests/client/env_guard.h"
#include "tests/client/test_server.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::MakeResponse;
using blz::testing::OciError;
using blz::testing::TempDir;
using blz::testing::TestRequest;
using blz::testing::TestResponse;
using blz::testing::TestServer;
namespace http = boost::beast::http;

RegistryClient MakeClient(const TestServer& server, std::string token = "") {
  RegistryClientOptions options;
  options.token = std::move(token);
  options.http.io_timeout = std::chrono::seconds(10);
  return RegistryClient(RegistryAddress{"127.0.0.1", server.port()}, options);
}

std::string Digest(const std::string& data) { return MakeDigest(Sha256Hex(data)); }

size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) ++n;
  }
  return n;
}

TEST(RegistryClientTest, PingSendsBearerToken) {
  TestServer server([](const TestRequest& req) {
    if (req[http::field::authorization] != "Bearer s3cret") {
      return OciError(http::status::unauthorized, "UNAUTHORIZED", "authentication required");
    }
    return MakeResponse(http::status::ok, "{}");
  });
  RegistryClient with_token = MakeClient(server, "s3cret");
  EXPECT_TRUE(with_token.Ping().ok());

  // Anonymous: a challenge on /v2/ means "reachable" (OCI registries challenge anonymous
  // clients there even when they allow anonymous pulls).
  RegistryClient anonymous = MakeClient(server);
  EXPECT_TRUE(anonymous.Ping().ok());

  // A rejected token is an error naming the registry.
  RegistryClient wrong = MakeClient(server, "wrong");
  Status s = wrong.Ping();
  EXPECT_EQ(s.code(), Code::kUnauthorized);
  EXPECT_NE(s.message().find("UNAUTHORIZED: authentication required"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("stored for 127.0.0.1:"), std::string::npos) << s.message();
}

TEST(RegistryClientTest, TokenAdminRequests) {
  TestServer server([](const TestRequest& req) {
    if (req.method() == http::verb::post && req.target() == "/v2/_blz/tokens") {
      auto body = nlohmann::json::parse(req.body());
      EXPECT_EQ(body["name"], "ci");
      EXPECT_EQ(body["scope"], "org/*:pull");
      EXPECT_EQ(body["expires_in"], 60);
      return MakeResponse(http::status::created,
                          R"({"name":"ci","token":"t0k","scope":"org/*:pull"})");
    }
    if (req.method() == http::verb::get && req.target() == "/v2/_blz/tokens") {
      return MakeResponse(http::status::ok, R"({"tokens":[{"name":"ci"}]})");
    }
    if (req.method() == http::verb::delete_ && req.target() == "/v2/_blz/tokens/ci") {
      return MakeResponse(http::status::no_content, "");
    }
    return OciError(http::status::not_found, "NOT_FOUND", "no active token named 'x'");
  });
  RegistryClient client = MakeClient(server, "admin");
  auto created = client.CreateToken("ci", "org/*:pull", 60);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["token"], "t0k");
  auto listed = client.ListTokens();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ((*listed)["tokens"].size(), 1u);
  EXPECT_TRUE(client.RevokeToken("ci").ok());
  EXPECT_EQ(client.RevokeToken("x").code(), Code::kNotFound);
  // Names that would change the request target are refused before any request.
  const size_t before = server.seen().size();
  for (const char* bad : {"", "a/b", "a?b", "..%2f"}) {
    EXPECT_EQ(client.RevokeToken(bad).code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(server.seen().size(), before);
}

TEST(RegistryClientTest, PingOfAnUnreachableRegistryFails) {
  uint16_t port = 0;
  {
    TestServer server([](const TestRequest&) { return MakeResponse(http::status::ok, "{}"); });
    port = server.port();
  }  // stopped: nothing listens on the port any more
  RegistryClientOptions options;
  options.token = "t";
  options.http.io_timeout = std::chrono::seconds(5);
  RegistryClient client(RegistryAddress{"127.0.0.1", port}, options);
  Status s = client.Ping();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), Code::kUnauthorized);
}

TEST(RegistryClientTest, UploadRefusedParsesOciErrorBody) {
  TestServer server([](const TestRequest&) {
    return OciError(http::status::unauthorized, "UNAUTHORIZED", "authentication required");
  });
  RegistryClient client = MakeClient(server, "wrong");
  Status s = client.UploadBlob("org/model", Digest("abc"), "abc");
  EXPECT_EQ(s.code(), Code::kUnauthorized);
  EXPECT_EQ(s.message().rfind("push refused: UNAUTHORIZED: authentication required", 0), 0u)
      << s.message();
  EXPECT_NE(s.message().find("was rejected"), std::string::npos) << s.message();
}

TEST(RegistryClientTest, ErrorCodesMapToStatusCodes) {
  struct Case {
    http::status status;
    std::string code;
    Code want;
  };
  const Case cases[] = {
      {http::status::not_found, "MANIFEST_UNKNOWN", Code::kNotFound},
      {http::status::bad_request, "DIGEST_INVALID", Code::kDigestMismatch},
      {http::status::bad_request, "NAME_INVALID", Code::kInvalidArgument},
      {http::status::forbidden, "DENIED", Code::kUnauthorized},
      {http::status::payload_too_large, "SIZE_INVALID", Code::kTooLarge},
      {http::status::internal_server_error, "UNKNOWN", Code::kUnavailable},
  };
  for (const Case& c : cases) {
    TestServer server([&](const TestRequest&) { return OciError(c.status, c.code, "msg " + c.code); });
    RegistryClient client = MakeClient(server);
    Result<ManifestResponse> r = client.GetManifest("org/model", "v1");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.want) << c.code << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.code + ": msg " + c.code), std::string::npos)
        << r.status().message();
  }
}

TEST(RegistryClientTest, NonJsonErrorBodyIsQuoted) {
  TestServer server([](const TestRequest&) {
    return MakeResponse(http::status::bad_gateway, "upstream down\n", "text/plain");
  });
  RegistryClient client = MakeClient(server);
  Result<std::vector<std::string>> r = client.ListTags("org/model");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("HTTP 502"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("upstream down"), std::string::npos);
}

TEST(RegistryClientTest, HeadBlob) {
  const std::string present = Digest("present");
  TestServer server([&](const TestRequest& req) {
    if (req.target() == "/v2/org/model/blobs/" + present) {
      TestResponse res{http::status::ok, 11};
      res.content_length(7);
      res.set("Docker-Content-Digest", present);
      return res;
    }
    return OciError(http::status::not_found, "BLOB_UNKNOWN", "blob unknown");
  });
  RegistryClient client = MakeClient(server);
  Result<BlobStat> yes = client.HeadBlob("org/model", present);
  ASSERT_TRUE(yes.ok()) << yes.status().ToString();
  EXPECT_TRUE(yes->exists);
  EXPECT_EQ(yes->size, 7u);
  Result<BlobStat> no = client.HeadBlob("org/model", Digest("absent"));
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->exists);
}

TEST(RegistryClientTest, GetBlobVerifiesAndPublishes) {
  TempDir tmp;
  const std::string data(300 * 1024, 'q');
  const std::string digest = Digest(data);
  TestServer server([&](const TestRequest& req) {
    if (req.target() == "/v2/org/model/blobs/" + digest) {
      return MakeResponse(http::status::ok, data, "application/octet-stream");
    }
    return OciError(http::status::not_found, "BLOB_UNKNOWN", "blob unknown");
  });
  Result<LocalStore> store = LocalStore::Open(tmp / "store");
  ASSERT_TRUE(store.ok());
  Result<std::string> staging = store->MakeStagingDir();
  ASSERT_TRUE(staging.ok());
  RegistryClient client = MakeClient(server);
  uint64_t progress_total = 0;
  Status s = client.GetBlob("org/model", digest, data.size(), *staging + "/blob",
                            [&](uint64_t, uint64_t total) { progress_total = total; });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(progress_total, data.size());
  EXPECT_EQ(client.bytes_received(), data.size());
  EXPECT_EQ(blz::testing::ReadFileBytes(*staging + "/blob"), data);
  Result<std::string> published = store->PublishBlob(*staging + "/blob", digest);
  ASSERT_TRUE(published.ok());
  EXPECT_TRUE(store->HasBlob(digest));
  EXPECT_TRUE(store->VerifyBlob(digest).ok());
}

TEST(RegistryClientTest, WrongBytesGiveDigestMismatchAndLeaveNothing) {
  TempDir tmp;
  const std::string good = "the real archive bytes";
  const std::string digest = Digest(good);
  std::string evil = good;
  evil[3] ^= 1;  // same length, different bytes
  TestServer server([&](const TestRequest&) {
    return MakeResponse(http::status::ok, evil, "application/octet-stream");
  });
  Result<LocalStore> store = LocalStore::Open(tmp / "store");
  ASSERT_TRUE(store.ok());
  Result<std::string> staging = store->MakeStagingDir();
  ASSERT_TRUE(staging.ok());
  RegistryClient client = MakeClient(server);
  Status s = client.GetBlob("org/model", digest, good.size(), *staging + "/blob");
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_NE(s.message().find(digest), std::string::npos);
  EXPECT_EQ(CountFiles(*staging), 0u);
  EXPECT_FALSE(store->HasBlob(digest));
  EXPECT_EQ(CountFiles(tmp / "store/blobs"), 0u);
}

TEST(RegistryClientTest, SizeDisagreeingWithManifestIsCorruption) {
  TempDir tmp;
  const std::string data = "0123456789";
  TestServer server([&](const TestRequest&) {
    return MakeResponse(http::status::ok, data, "application/octet-stream");
  });
  RegistryClient client = MakeClient(server);
  Status s = client.GetBlob("org/model", Digest(data), data.size() + 5, tmp / "blob");
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(tmp / "blob"));
  EXPECT_EQ(CountFiles(tmp.path()), 0u);
}

TEST(RegistryClientTest, ConnectionDroppedMidBlobLeavesNothing) {
  TempDir tmp;
  const std::string data(4096, 'x');
  TestServer server([&](const TestRequest&) {
    TestResponse res = MakeResponse(http::status::ok, data.substr(0, 1000),
                                    "application/octet-stream");
    res.set("X-Test-Truncate", std::to_string(data.size()));
    return res;
  });
  RegistryClient client = MakeClient(server);
  Status s = client.GetBlob("org/model", Digest(data), data.size(), tmp / "blob");
  EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
  EXPECT_EQ(CountFiles(tmp.path()), 0u);
}

TEST(RegistryClientTest, UploadFlowPostThenPutWithDigest) {
  TempDir tmp;
  const std::string data(200 * 1024 + 3, 'u');
  blz::testing::WriteFileBytes(tmp / "blob", data);
  const std::string digest = Digest(data);
  TestServer server([&](const TestRequest& req) {
    if (req.method() == http::verb::post &&
        req.target() == "/v2/org/model/blobs/uploads/") {
      TestResponse res = MakeResponse(http::status::accepted);
      res.set(http::field::location, "/v2/org/model/blobs/uploads/u-1?state=abc");
      return res;
    }
    if (req.method() == http::verb::put &&
        req.target() == "/v2/org/model/blobs/uploads/u-1?state=abc&digest=" + digest) {
      if (Digest(req.body()) != digest) {
        return OciError(http::status::bad_request, "DIGEST_INVALID", "digest mismatch");
      }
      TestResponse res = MakeResponse(http::status::created);
      res.set("Docker-Content-Digest", digest);
      return res;
    }
    return OciError(http::status::not_found, "NAME_UNKNOWN", std::string(req.target()));
  });
  RegistryClient client = MakeClient(server, "tok");
  uint64_t progress_done = 0;
  Status s = client.UploadBlobFromFile("org/model", digest, tmp / "blob",
                                       [&](uint64_t done, uint64_t) { progress_done = done; });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(progress_done, data.size());
  EXPECT_EQ(client.bytes_sent(), data.size());
  std::vector<TestRequest> seen = server.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].body(), data);
  EXPECT_EQ(seen[1][http::field::authorization], "Bearer tok");

  // A digest the server disagrees with.
  Status bad = client.UploadBlob("org/model", digest, "not the same bytes");
  EXPECT_EQ(bad.code(), Code::kDigestMismatch) << bad.ToString();
}

TEST(RegistryClientTest, AbsoluteUploadLocationIsAccepted) {
  const std::string data = "config";
  const std::string digest = Digest(data);
  uint16_t port = 0;
  TestServer server([&](const TestRequest& req) {
    if (req.method() == http::verb::post) {
      TestResponse res = MakeResponse(http::status::accepted);
      res.set(http::field::location,
              "http://127.0.0.1:" + std::to_string(port) + "/v2/m/blobs/uploads/abc");
      return res;
    }
    if (req.target() == "/v2/m/blobs/uploads/abc?digest=" + digest) {
      return MakeResponse(http::status::created);
    }
    return OciError(http::status::not_found, "BLOB_UPLOAD_UNKNOWN", "no");
  });
  port = server.port();
  RegistryClient client = MakeClient(server);
  Status s = client.UploadBlob("m", digest, data);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(RegistryClientTest, ManifestPutAndGet) {
  const std::string manifest = R"({"schemaVersion":2})";
  const std::string digest = Digest(manifest);
  TestServer server([&](const TestRequest& req) {
    if (req.method() == http::verb::put) {
      EXPECT_EQ(req[http::field::content_type], "application/vnd.oci.image.manifest.v1+json");
      TestResponse res = MakeResponse(http::status::created);
      res.set("Docker-Content-Digest", Digest(req.body()));
      return res;
    }
    if (req.target() == "/v2/m/manifests/v1" || req.target() == "/v2/m/manifests/" + digest) {
      TestResponse res =
          MakeResponse(http::status::ok, manifest, "application/vnd.oci.image.manifest.v1+json");
      res.set("Docker-Content-Digest", digest);
      return res;
    }
    if (req.target() == "/v2/m/manifests/" + Digest("other")) {
      return MakeResponse(http::status::ok, manifest);  // wrong bytes for that digest
    }
    return OciError(http::status::not_found, "MANIFEST_UNKNOWN", "manifest unknown");
  });
  RegistryClient client = MakeClient(server);
  Result<std::string> put = client.PutManifest("m", "v1", manifest);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(*put, digest);

  Result<ManifestResponse> by_tag = client.GetManifest("m", "v1");
  ASSERT_TRUE(by_tag.ok()) << by_tag.status().ToString();
  EXPECT_EQ(by_tag->bytes, manifest);
  EXPECT_EQ(by_tag->digest, digest);
  Result<ManifestResponse> by_digest = client.GetManifest("m", digest);
  ASSERT_TRUE(by_digest.ok());

  Result<ManifestResponse> tampered = client.GetManifest("m", Digest("other"));
  EXPECT_EQ(tampered.status().code(), Code::kDigestMismatch);

  Result<ManifestResponse> missing = client.GetManifest("m", "v2");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("pull refused: MANIFEST_UNKNOWN"), std::string::npos)
      << missing.status().message();
}

// Issue 24: a 403 names where the token came from and the registry's words (token name and
// scope); a revoked token is called revoked; `blz tags` does not say "pull refused".
TEST(RegistryClientTest, RefusalsNameTheTokenItsSourceAndWhatFailed) {
  blz::testing::EnvGuard env;
  env.Set("BLZ_TOKEN", "0123abcd");
  HttpResponse denied;
  denied.status = 403;
  denied.body = R"({"errors":[{"code":"DENIED","message":"token 'ci' (scope 'org/*:pull') )"
                R"(does not grant push on repository 'org/m'","detail":{"token":"ci"}}]})";
  Status s = StatusFromResponse(denied, "push", "manifest org/m:v1", true, "reg:5000");
  EXPECT_EQ(s.code(), Code::kUnauthorized);
  EXPECT_NE(s.message().find("token 'ci' (scope 'org/*:pull') does not grant push"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("the token in BLZ_TOKEN lacks this permission"), std::string::npos)
      << s.message();

  HttpResponse revoked;
  revoked.status = 401;
  revoked.body = R"({"errors":[{"code":"UNAUTHORIZED","message":"token 'ci' was revoked"}]})";
  Status r = StatusFromResponse(revoked, "pull", "manifest org/m:v1", true, "reg:5000");
  EXPECT_EQ(r.code(), Code::kUnauthorized);
  EXPECT_NE(r.message().find("the token in BLZ_TOKEN was revoked"), std::string::npos)
      << r.message();

  env.Unset("BLZ_TOKEN");
  Status stored = StatusFromResponse(denied, "push", "manifest org/m:v1", true, "reg:5000");
  EXPECT_NE(stored.message().find("the token `blz login` stored for reg:5000 lacks"),
            std::string::npos)
      << stored.message();

  TestServer server([](const TestRequest&) {
    return OciError(http::status::not_found, "NAME_UNKNOWN", "no repository 'nope'");
  });
  Result<std::vector<std::string>> tags = MakeClient(server).ListTags("nope");
  EXPECT_EQ(tags.status().code(), Code::kNotFound);
  EXPECT_EQ(tags.status().message().find("pull refused"), std::string::npos)
      << tags.status().message();
  EXPECT_EQ(tags.status().message().rfind("listing tags of nope refused: NAME_UNKNOWN: no "
                                          "repository 'nope'", 0),
            0u)
      << tags.status().message();
}

TEST(RegistryClientTest, ListTagsFollowsPagination) {
  TestServer server([](const TestRequest& req) {
    if (req.target() == "/v2/m/tags/list") {
      TestResponse res = MakeResponse(http::status::ok, R"({"name":"m","tags":["a","b"]})");
      res.set(http::field::link, "</v2/m/tags/list?n=2&last=b>; rel=\"next\"");
      return res;
    }
    if (req.target() == "/v2/m/tags/list?n=2&last=b") {
      return MakeResponse(http::status::ok, R"({"name":"m","tags":["c"]})");
    }
    return OciError(http::status::not_found, "NAME_UNKNOWN", "repository unknown");
  });
  RegistryClient client = MakeClient(server);
  Result<std::vector<std::string>> tags = client.ListTags("m");
  ASSERT_TRUE(tags.ok()) << tags.status().ToString();
  EXPECT_EQ(*tags, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(client.ListTags("nope").status().code(), Code::kNotFound);
}

TEST(RegistryClientTest, GetPatch) {
  TempDir tmp;
  const std::string patch = "PATCHBYTES";
  const std::string from = Digest("a"), to = Digest("b");
  TestServer server([&](const TestRequest& req) {
    if (req.target() == "/v2/m/blz/patch?from=" + from + "&to=" + to) {
      TestResponse res = MakeResponse(http::status::ok, patch, "application/vnd.blz.patch.v1");
      res.set("Docker-Content-Digest", Digest(patch));
      res.set("Blz-Patch-Cache", "hit");
      return res;
    }
    if (req.target() == "/v2/m/blz/patch?from=" + to + "&to=" + from) {
      TestResponse res = MakeResponse(http::status::ok, patch);
      res.set("Docker-Content-Digest", Digest("something else"));
      return res;
    }
    return OciError(http::status::not_found, "MANIFEST_UNKNOWN", "not a version");
  });
  RegistryClient client = MakeClient(server);
  Result<PatchDownload> got = client.GetPatch("m", from, to, tmp / "p1", 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, patch.size());
  EXPECT_EQ(got->digest, Digest(patch));
  EXPECT_TRUE(got->server_cache_hit);
  EXPECT_EQ(blz::testing::ReadFileBytes(tmp / "p1"), patch);

  Result<PatchDownload> capped = client.GetPatch("m", from, to, tmp / "p2", patch.size() - 1);
  EXPECT_EQ(capped.status().code(), Code::kTooLarge);
  EXPECT_FALSE(std::filesystem::exists(tmp / "p2"));

  Result<PatchDownload> lying = client.GetPatch("m", to, from, tmp / "p3", 0);
  EXPECT_EQ(lying.status().code(), Code::kDigestMismatch);
  EXPECT_FALSE(std::filesystem::exists(tmp / "p3"));

  Result<PatchDownload> none = client.GetPatch("m", from, Digest("c"), tmp / "p4", 0);
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_EQ(CountFiles(tmp.path()), 1u);
}

TEST(RegistryClientTest, BlobRedirectToAnotherHostDropsAuthorization) {
  const std::string blob = "redirected blob bytes";
  const std::string digest = Digest(blob);
  TestServer store([&](const TestRequest& req) {
    if (req.target() == "/objects/" + digest.substr(7)) {
      return MakeResponse(http::status::ok, blob, "application/octet-stream");
    }
    return OciError(http::status::not_found, "NOT_FOUND", "no such object");
  });
  TestServer registry([&](const TestRequest& req) {
    TestResponse r = MakeResponse(http::status::temporary_redirect, "");
    // Another origin: "localhost" is not the registry's "127.0.0.1".
    r.set(http::field::location, "http://localhost:" + std::to_string(store.port()) +
                                     "/objects/" + digest.substr(7));
    if (req[http::field::authorization] != "Bearer s3cret") {
      return OciError(http::status::unauthorized, "UNAUTHORIZED", "no");
    }
    return r;
  });
  TempDir dir;
  RegistryClient client = MakeClient(registry, "s3cret");
  Status s = client.GetBlob("org/m", digest, blob.size(), dir / "blob");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(blz::testing::ReadFileBytes(dir / "blob"), blob);
  ASSERT_EQ(store.seen().size(), 1u);
  EXPECT_EQ(store.seen()[0].count(http::field::authorization), 0u)
      << "the registry's token must not reach another host";
  ASSERT_EQ(registry.seen().size(), 1u);
  EXPECT_EQ(registry.seen()[0][http::field::authorization], "Bearer s3cret");
}

TEST(RegistryClientTest, SameHostRedirectKeepsAuthorization) {
  const std::string blob = "same host";
  const std::string digest = Digest(blob);
  TestServer registry([&](const TestRequest& req) {
    if (req[http::field::authorization] != "Bearer s3cret") {
      return OciError(http::status::unauthorized, "UNAUTHORIZED", "no");
    }
    if (req.target() == "/elsewhere") return MakeResponse(http::status::ok, blob, "");
    TestResponse r = MakeResponse(http::status::found, "");
    r.set(http::field::location, "/elsewhere");
    return r;
  });
  TempDir dir;
  RegistryClient client = MakeClient(registry, "s3cret");
  Status s = client.GetBlob("org/m", digest, 0, dir / "blob");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(registry.seen().size(), 2u);
}

TEST(RegistryClientTest, RedirectLoopsAndBadLocationsFailCleanly) {
  const std::string digest = Digest("never");
  TestServer loop([&](const TestRequest& req) {
    TestResponse r = MakeResponse(http::status::permanent_redirect, "");
    r.set(http::field::location, std::string(req.target()) + "x");
    return r;
  });
  TempDir dir;
  RegistryClient client = MakeClient(loop);
  Status s = client.GetBlob("org/m", digest, 0, dir / "blob");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("more than 5 redirects"), std::string::npos) << s.ToString();
  EXPECT_EQ(loop.seen().size(), 6u);  // the first request and 5 hops
  EXPECT_FALSE(std::filesystem::exists(dir / "blob"));

  TestServer bad([&](const TestRequest&) {
    TestResponse r = MakeResponse(http::status::see_other, "");
    r.set(http::field::location, "ftp://example.com/x");
    return r;
  });
  RegistryClient bad_client = MakeClient(bad);
  Status b = bad_client.GetBlob("org/m", digest, 0, dir / "blob");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("unusable redirect Location"), std::string::npos) << b.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir / "blob"));
}

}  // namespace
}  // namespace blz::client
