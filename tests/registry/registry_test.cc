// Handler tests for every endpoint of docs/registry-api.md and its error paths, without sockets.
// The patch endpoint is tested here with a stand-in PatchFunction; the real patcher is exercised
// in patch_endpoint_test.cc (a separate binary, because it links the patcher).
#include "registry/registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::kManifestType;
using testing::TinyArchive;

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = char(x >> 24);
  }
  return s;
}

std::string D(const std::string& bytes) { return MakeDigest(Sha256Hex(bytes)); }

// ---- /v2/, auth ----

TEST(RegistryTest, PingAnswersWithApiVersion) {
  Harness h;
  Response r = h.Call("GET", "/v2/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "{}");
  EXPECT_EQ(r.Get("Docker-Distribution-API-Version"), "registry/2.0");
  EXPECT_EQ(h.Call("GET", "/v2").status, 200);
  Response head = h.Call("HEAD", "/v2/");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.head_only);
  // Anonymous clients are challenged (registry/auth_test.cc has the details).
  Response anon = h.Call("GET", "/v2/", "", {}, /*auth=*/false);
  EXPECT_EQ(anon.status, 401);
  EXPECT_EQ(anon.Get("Docker-Distribution-API-Version"), "registry/2.0");
}

// Every answer says that a model manifest is accepted only once its archive passed `blz
// verify`: `blz push` reads it from the HEAD of the archive blob (a 404 when it is new) and
// then leaves that check to the registry (client/push.h).
TEST(RegistryTest, AnswersSayArchivesAreVerified) {
  Harness h;
  const std::string missing = "/v2/m/blobs/" + D("a blob nobody pushed");
  struct Case {
    std::string method, target;
    bool auth;
    int status;
  };
  for (const Case& c : {Case{"GET", "/v2/", true, 200}, Case{"HEAD", missing, true, 404},
                        Case{"HEAD", missing, false, 404},
                        Case{"GET", "/v2/no/such/route/x", true, 404}}) {
    SCOPED_TRACE(c.method + " " + c.target + (c.auth ? "" : " (anonymous)"));
    Response r = h.Call(c.method, c.target, "", {}, c.auth);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_EQ(r.Get("Blz-Verifies-Archives"), "true");
  }
}

TEST(RegistryTest, WritesNeedAToken) {
  Harness h;
  const std::string blob = "unauthorized bytes";
  for (bool send_bad_token : {false, true}) {
    std::vector<Header> headers;
    if (send_bad_token) headers.push_back({"Authorization", "Bearer " + std::string(64, 'a')});
    Response r = h.Call("POST", "/v2/m/blobs/uploads/?digest=" + D(blob), blob, headers,
                        /*auth=*/false);
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(ErrorCodeOf(r), "UNAUTHORIZED");
    EXPECT_EQ(r.Get("WWW-Authenticate").value_or("").rfind("Bearer realm=\"http://", 0), 0u);
  }
  // Even when the body is handed to Handle directly (no PlanBody), nothing is stored.
  Request req;
  req.head.method = "POST";
  req.head.target = "/v2/m/blobs/uploads/?digest=" + D(blob);
  req.body = blob;
  EXPECT_EQ(h.registry().Handle(req).status, 401);
  Response m = h.Call("PUT", "/v2/m/manifests/v1", h.ManifestFor("m", "arch", false),
                      {{"Content-Type", kManifestType}}, /*auth=*/false);
  EXPECT_EQ(m.status, 401);
  EXPECT_EQ(h.BlobCount(), 0u);
  EXPECT_EQ(h.UploadsCount(), 0u);
  EXPECT_EQ(h.Call("GET", "/v2/_catalog").body, "{\"repositories\":[]}");
  // Other auth schemes, Basic without base64(user:token) and a malformed header are refused.
  EXPECT_EQ(h.Call("POST", "/v2/m/blobs/uploads/", "", {{"Authorization", "Basic " + h.token()}},
                   false)
                .status,
            401);
  EXPECT_EQ(h.Call("POST", "/v2/m/blobs/uploads/", "", {{"Authorization", "Digest x=1"}}, false)
                .status,
            401);
  EXPECT_EQ(h.Call("POST", "/v2/m/blobs/uploads/", "", {{"Authorization", "Bearer"}}, false).status,
            401);
  // The scheme is case-insensitive.
  EXPECT_EQ(h.Call("POST", "/v2/m/blobs/uploads/", "", {{"Authorization", "bearer " + h.token()}},
                   false)
                .status,
            202);
}

TEST(RegistryTest, ReadsAreAnonymousUnlessPrivate) {
  Harness open;
  EXPECT_EQ(open.Call("GET", "/v2/_catalog", "", {}, false).status, 200);

  RegistryOptions o;
  o.private_mode = true;
  Harness priv(o);
  const std::string d = priv.PushBlob("m", "secret");
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v2/"},
           {"GET", "/v2/_catalog"},
           {"GET", "/v2/m/blobs/" + d},
           {"HEAD", "/v2/m/blobs/" + d},
           {"GET", "/v2/m/tags/list"},
           {"GET", "/v2/m/manifests/v1"}}) {
    Response r = priv.Call(method, target, "", {}, /*auth=*/false);
    EXPECT_EQ(r.status, 401) << method << " " << target;
    EXPECT_EQ(r.Get("WWW-Authenticate").value_or("").rfind("Bearer realm=\"http://", 0), 0u);
  }
  EXPECT_EQ(priv.Call("GET", "/v2/m/blobs/" + d).status, 200);
}

// ---- names, routes, methods ----

TEST(RegistryTest, BadNamesAreNameInvalid) {
  Harness h;
  const std::string d = D("x");
  for (const std::string& target : std::vector<std::string>{
           "/v2/UPPER/tags/list", "/v2/a..b/manifests/v1", "/v2/a//b/tags/list",
        "/v2/-a/blobs/" + d, "/v2/a%2F..%2Fb/tags/list",
        // An encoded '/' is not a separator (nor part of a valid name): not "org/model".
        "/v2/org%2fmodel/tags/list", "/v2/org%2Fmodel/manifests/v1", "/v2/a_-b/blz/patch?from=" + d + "&to=" + d,
        "/v2/" + std::string(256, 'a') + "/tags/list", "/v2/blobs/uploads/"}) {
    std::string method = target.find("uploads") != std::string::npos ? "POST" : "GET";
    Response r = h.Call(method, target);
    EXPECT_EQ(r.status, 400) << target;
    EXPECT_EQ(ErrorCodeOf(r), "NAME_INVALID") << target;
  }
}

TEST(RegistryTest, UnknownEndpointsAndMethods) {
  Harness h;
  Response r = h.Call("GET", "/v1/");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorCodeOf(r), "NOT_FOUND");
  EXPECT_EQ(h.Call("GET", "/v2/m/whatever/x").status, 404);
  Response patch = h.Call("PATCH", "/v2/m/manifests/v1");
  EXPECT_EQ(patch.status, 405);
  EXPECT_EQ(ErrorCodeOf(patch), "UNSUPPORTED");
  EXPECT_EQ(patch.Get("Allow"), "GET, HEAD, PUT, DELETE");
  EXPECT_EQ(h.Call("PUT", "/v2/_catalog").status, 405);
  EXPECT_EQ(h.Call("GET", "/v2/m/blobs/uploads/").status, 405);
}

// ---- blobs ----

TEST(RegistryTest, MonolithicUploadThenHeadAndGet) {
  Harness h;
  const std::string blob = Bytes(5000, 1);
  const std::string d = D(blob);
  Response r = h.Call("POST", "/v2/org/m/blobs/uploads/?digest=" + d, blob);
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.Get("Location"), "/v2/org/m/blobs/" + d);
  EXPECT_EQ(r.Get("Docker-Content-Digest"), d);
  EXPECT_EQ(h.UploadsCount(), 0u);

  Response head = h.Call("HEAD", "/v2/org/m/blobs/" + d);
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.head_only);
  EXPECT_EQ(head.BodySize(), blob.size());
  EXPECT_EQ(head.Get("Docker-Content-Digest"), d);

  Response get = h.Call("GET", "/v2/org/m/blobs/" + d);
  EXPECT_EQ(get.status, 200);
  EXPECT_FALSE(get.head_only);
  EXPECT_EQ(get.Get("Content-Type"), "application/octet-stream");
  EXPECT_EQ(get.Get("Accept-Ranges"), "bytes");
  EXPECT_EQ(BodyOf(get), blob);

  // The digest may arrive percent-encoded.
  std::string encoded = d;
  encoded.replace(6, 1, "%3A");
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blobs/" + encoded).status, 200);
  EXPECT_EQ(h.Call("POST", "/v2/org/m/blobs/uploads/?digest=" + encoded, blob).status, 201);
}

TEST(RegistryTest, WrongDigestStoresNothing) {
  Harness h;
  const std::string blob = Bytes(3000, 2);
  const std::string wrong = D("something else");
  Response r = h.Call("POST", "/v2/m/blobs/uploads/?digest=" + wrong, blob);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCodeOf(r), "DIGEST_INVALID");
  EXPECT_EQ(h.BlobCount(), 0u);
  EXPECT_EQ(h.UploadsCount(), 0u);
  EXPECT_EQ(h.Call("HEAD", "/v2/m/blobs/" + wrong).status, 404);
  EXPECT_EQ(h.Call("HEAD", "/v2/m/blobs/" + D(blob)).status, 404);

  Response malformed = h.Call("POST", "/v2/m/blobs/uploads/?digest=sha256:abc", blob);
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(ErrorCodeOf(malformed), "DIGEST_INVALID");
  EXPECT_EQ(h.BlobCount(), 0u);
}

TEST(RegistryTest, MissingAndMalformedBlobs) {
  Harness h;
  Response missing = h.Call("GET", "/v2/m/blobs/" + D("nope"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(ErrorCodeOf(missing), "BLOB_UNKNOWN");
  Response head = h.Call("HEAD", "/v2/m/blobs/" + D("nope"));
  EXPECT_EQ(head.status, 404);
  EXPECT_TRUE(head.head_only);
  for (const char* bad : {"sha256:xyz", "sha512:abcd", "nodigest", "sha256:..%2F..%2Fetc"}) {
    Response r = h.Call("GET", std::string("/v2/m/blobs/") + bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(ErrorCodeOf(r), "DIGEST_INVALID") << bad;
  }
}

TEST(RegistryTest, RangeRequests) {
  Harness h;
  const std::string blob = Bytes(2048, 3);
  const std::string d = h.PushBlob("m", blob);
  auto get = [&](const std::string& range) {
    return h.Call("GET", "/v2/m/blobs/" + d, "", {{"Range", range}});
  };
  struct Case {
    const char* range;
    uint64_t first, last;
  };
  for (const Case& c : {Case{"bytes=500-1499", 500, 1499}, Case{"bytes=500-", 500, 2047},
                        Case{"bytes=-500", 1548, 2047}, Case{"bytes=2000-5000", 2000, 2047},
                        Case{"bytes=0-0", 0, 0}}) {
    Response r = get(c.range);
    ASSERT_EQ(r.status, 206) << c.range;
    EXPECT_EQ(r.Get("Content-Range"), "bytes " + std::to_string(c.first) + "-" +
                                          std::to_string(c.last) + "/2048")
        << c.range;
    EXPECT_EQ(BodyOf(r), blob.substr(c.first, c.last - c.first + 1)) << c.range;
    EXPECT_EQ(r.Get("Docker-Content-Digest"), d);
  }
  for (const char* range : {"bytes=500-0", "bytes=5000-10000", "bytes=2048-", "bytes=-0"}) {
    Response r = get(range);
    EXPECT_EQ(r.status, 416) << range;
    EXPECT_EQ(ErrorCodeOf(r), "RANGE_INVALID") << range;
    EXPECT_EQ(r.Get("Content-Range"), "bytes */2048") << range;
  }
  // Ignorable Range headers give the whole blob.
  for (const char* range : {"bytes=0-1,4-5", "lines=1-2", "garbage"}) {
    Response r = get(range);
    EXPECT_EQ(r.status, 200) << range;
    EXPECT_EQ(BodyOf(r), blob);
  }
  // Empty blob: any range is unsatisfiable, the whole (empty) blob is fine.
  const std::string empty = h.PushBlob("m", "");
  EXPECT_EQ(h.Call("GET", "/v2/m/blobs/" + empty, "", {{"Range", "bytes=0-"}}).status, 416);
  Response whole = h.Call("GET", "/v2/m/blobs/" + empty);
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(whole.BodySize(), 0u);
}

// ---- upload sessions ----

TEST(RegistryTest, ChunkedUpload) {
  Harness h;
  const std::string blob = Bytes(10000, 4);
  const std::string d = D(blob);
  Response start = h.Call("POST", "/v2/m/blobs/uploads/");
  ASSERT_EQ(start.status, 202) << start.body;
  const std::string loc = *start.Get("Location");
  const std::string uuid = *start.Get("Docker-Upload-UUID");
  EXPECT_EQ(loc, "/v2/m/blobs/uploads/" + uuid);
  EXPECT_EQ(start.Get("Range"), "0-0");

  Response p1 = h.Call("PATCH", loc, blob.substr(0, 4000), {{"Content-Range", "0-3999"}});
  ASSERT_EQ(p1.status, 202) << p1.body;
  EXPECT_EQ(p1.Get("Range"), "0-3999");
  EXPECT_EQ(p1.Get("Location"), loc);
  EXPECT_EQ(p1.Get("Blz-Upload-Offset"), "4000");

  Response st = h.Call("GET", loc);
  EXPECT_EQ(st.status, 204);
  EXPECT_EQ(st.Get("Range"), "0-3999");

  // Out of order (a gap, or a repeat) -> 416, and the session is unchanged.
  for (const char* cr : {"5000-5999", "0-999", "junk"}) {
    Response bad = h.Call("PATCH", loc, std::string(1000, 'x'), {{"Content-Range", cr}});
    EXPECT_EQ(bad.status, 416) << cr;
    EXPECT_EQ(bad.Get("Range"), "0-3999") << cr;
  }
  // A Content-Range whose length disagrees with the body.
  Response len = h.Call("PATCH", loc, std::string(10, 'x'), {{"Content-Range", "4000-4999"}});
  EXPECT_EQ(len.status, 416);
  EXPECT_EQ(h.Call("GET", loc).Get("Range"), "0-3999");

  // A chunk without Content-Range continues at the end.
  Response p2 = h.Call("PATCH", loc, blob.substr(4000, 5000));
  ASSERT_EQ(p2.status, 202);
  EXPECT_EQ(p2.Get("Range"), "0-8999");

  // The closing PUT carries the last chunk.
  Response fin = h.Call("PUT", loc + "?digest=" + d, blob.substr(9000));
  ASSERT_EQ(fin.status, 201) << fin.body;
  EXPECT_EQ(fin.Get("Location"), "/v2/m/blobs/" + d);
  EXPECT_EQ(fin.Get("Docker-Content-Digest"), d);
  EXPECT_EQ(BodyOf(h.Call("GET", "/v2/m/blobs/" + d)), blob);
  // The session is gone.
  EXPECT_EQ(ErrorCodeOf(h.Call("GET", loc)), "BLOB_UPLOAD_UNKNOWN");
  EXPECT_EQ(h.UploadsCount(), 0u);
}

TEST(RegistryTest, UploadWithEmptyClosingPut) {
  Harness h;
  const std::string blob = Bytes(100, 5);
  Response start = h.Call("POST", "/v2/m/blobs/uploads");  // no trailing slash
  ASSERT_EQ(start.status, 202);
  const std::string loc = *start.Get("Location");
  ASSERT_EQ(h.Call("PATCH", loc, blob).status, 202);
  Response fin = h.Call("PUT", loc + "?digest=" + D(blob));
  EXPECT_EQ(fin.status, 201);
  EXPECT_TRUE(h.registry().blobs().Contains(D(blob)));
}

TEST(RegistryTest, PostThenPutWithTheWholeBlob) {
  // The blz client's upload: open a session, then one PUT carrying the whole blob.
  Harness h;
  const std::string blob = Bytes(70000, 8);
  Response start = h.Call("POST", "/v2/m/blobs/uploads/");
  ASSERT_EQ(start.status, 202);
  Response fin = h.Call("PUT", *start.Get("Location") + "?digest=" + D(blob), blob,
                        {{"Content-Type", "application/octet-stream"}});
  ASSERT_EQ(fin.status, 201) << fin.body;
  EXPECT_EQ(BodyOf(h.Call("GET", "/v2/m/blobs/" + D(blob))), blob);
  EXPECT_EQ(h.UploadsCount(), 0u);
  EXPECT_EQ(h.BlobCount(), 1u);
}

TEST(RegistryTest, ClosingPutWithWrongDigestStoresNothing) {
  Harness h;
  Response start = h.Call("POST", "/v2/m/blobs/uploads/");
  const std::string loc = *start.Get("Location");
  ASSERT_EQ(h.Call("PATCH", loc, "some bytes").status, 202);
  Response missing = h.Call("PUT", loc);
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(ErrorCodeOf(missing), "DIGEST_INVALID");
  Response wrong = h.Call("PUT", loc + "?digest=" + D("other bytes"));
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(ErrorCodeOf(wrong), "DIGEST_INVALID");
  EXPECT_EQ(h.BlobCount(), 0u);
  EXPECT_EQ(h.UploadsCount(), 0u);  // the session's data was discarded
  EXPECT_EQ(h.Call("GET", loc).status, 404);
}

TEST(RegistryTest, UnknownAndForeignSessions) {
  Harness h;
  const std::string fake = "/v2/m/blobs/uploads/01234567-89ab-cdef-0123-456789abcdef";
  for (const char* method : {"GET", "PATCH", "PUT", "DELETE"}) {
    Response r = h.Call(method, fake + (std::string(method) == "PUT" ? "?digest=" + D("") : ""), "x");
    EXPECT_EQ(r.status, 404) << method;
    EXPECT_EQ(ErrorCodeOf(r), "BLOB_UPLOAD_UNKNOWN") << method;
  }
  EXPECT_EQ(ErrorCodeOf(h.Call("PATCH", "/v2/m/blobs/uploads/..%2F..%2Fblz.db", "x")),
            "BLOB_UPLOAD_UNKNOWN");
  // A session belongs to its repository.
  Response start = h.Call("POST", "/v2/a/blobs/uploads/");
  const std::string uuid = *start.Get("Docker-Upload-UUID");
  EXPECT_EQ(h.Call("PATCH", "/v2/b/blobs/uploads/" + uuid, "x").status, 404);
  EXPECT_EQ(h.Call("GET", "/v2/b/blobs/uploads/" + uuid).status, 404);
}

TEST(RegistryTest, CancelUpload) {
  Harness h;
  Response start = h.Call("POST", "/v2/m/blobs/uploads/");
  const std::string loc = *start.Get("Location");
  ASSERT_EQ(h.Call("PATCH", loc, "abc").status, 202);
  // The chunk is a part in the blob store: fs keeps it under <data>/uploads (s3: the bucket).
  EXPECT_LE(h.UploadsCount(), 1u);
  EXPECT_EQ(h.Call("DELETE", loc).status, 204);
  EXPECT_EQ(h.UploadsCount(), 0u);
  EXPECT_EQ(h.Call("GET", loc).status, 404);
}

TEST(RegistryTest, SessionsSurviveARestartButTempFilesDoNot) {
  blz::testing::TempDir tmp;
  std::string loc;
  std::string token;
  {
    auto r = Registry::Open(tmp / "d", {});
    ASSERT_TRUE(r.ok());
    auto made = (*r)->EnsureAdminToken();
    ASSERT_TRUE(made.ok() && made->has_value());
    token = **made;
    Request req;
    req.head.method = "POST";
    req.head.target = "/v2/m/blobs/uploads/";
    req.head.headers = {{"Authorization", "Bearer " + token}};
    Response start = (*r)->Handle(req);
    ASSERT_EQ(start.status, 202);
    loc = *start.Get("Location");
    blz::testing::WriteFileBytes(tmp / "d/uploads/body-leftover", "junk");
    // A second EnsureAdminToken does not make another token.
    auto again = (*r)->EnsureAdminToken();
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(again->has_value());
  }
  auto r = Registry::Open(tmp / "d", {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(std::filesystem::exists(tmp / "d/uploads/body-leftover"));
  Request status;
  status.head.method = "GET";
  status.head.target = loc;
  status.head.headers = {{"Authorization", "Bearer " + token}};  // the session's status: push
  EXPECT_EQ((*r)->Handle(status).status, 204);
}

// Unfinished upload sessions older than upload_max_age are purged at Open (row and file), with
// session files that have no session; a recent session survives the same restart.
TEST(RegistryTest, StaleUploadSessionsArePurgedAtOpen) {
  Harness h;
  auto start = [&h]() {
    Response r = h.Call("POST", "/v2/m/blobs/uploads/");
    EXPECT_EQ(r.status, 202);
    return r.Get("Location").value_or("");
  };
  const std::string old_loc = start();
  ASSERT_FALSE(old_loc.empty());
  const std::string old_uuid = old_loc.substr(old_loc.rfind('/') + 1);
  ASSERT_EQ(h.Call("PATCH", old_loc, "abc").status, 202);
  // fs keeps a session's chunks as files of <data>/uploads/parts-<uuid> (s3: in the bucket).
  const std::string old_parts = h.data() + "/uploads/parts-" + old_uuid;
  const bool fs = std::filesystem::exists(old_parts);
  // Leftovers without a session: parts, and a session file of an older version.
  std::filesystem::create_directories(h.data() + "/uploads/parts-0000-orphan");
  blz::testing::WriteFileBytes(h.data() + "/uploads/parts-0000-orphan/00-x", "x");
  blz::testing::WriteFileBytes(h.data() + "/uploads/session-no-such-session", "");

  // Still young for the default age (a week): a restart keeps it; the orphans go.
  h.Reopen();
  Response kept = h.Call("GET", old_loc);
  EXPECT_EQ(kept.status, 204);
  EXPECT_EQ(kept.Get("Range"), "0-2");
  EXPECT_FALSE(std::filesystem::exists(h.data() + "/uploads/session-no-such-session"));
  if (fs) {
    EXPECT_FALSE(std::filesystem::exists(h.data() + "/uploads/parts-0000-orphan"));
  }

  // Everything is stale for an age of zero.
  RegistryOptions o;
  o.upload_max_age = std::chrono::seconds(0);
  h.Reopen(o);
  EXPECT_EQ(h.Call("GET", old_loc).status, 404);
  EXPECT_FALSE(std::filesystem::exists(old_parts));
  // New sessions still work (and a purge while starting one leaves them alone until stale).
  const std::string fresh = start();
  ASSERT_FALSE(fresh.empty());
  EXPECT_EQ(h.Call("PATCH", fresh, "abc", {{"Content-Range", "0-2"}}).status, 202);
}

TEST(RegistryTest, BodyLimits) {
  RegistryOptions o;
  o.max_blob_bytes = 1000;
  Harness h(o);
  RequestHead head;
  head.method = "POST";
  head.target = "/v2/m/blobs/uploads/?digest=" + D("x");
  head.headers = {{"Authorization", "Bearer " + h.token()}};
  head.content_length = 1001;
  BodyPlan plan = h.registry().PlanBody(head);
  ASSERT_TRUE(plan.reject.has_value());
  EXPECT_EQ(plan.reject->status, 413);
  EXPECT_EQ(ErrorCodeOf(*plan.reject), "SIZE_INVALID");
  head.content_length = 1000;
  plan = h.registry().PlanBody(head);
  EXPECT_FALSE(plan.reject.has_value());
  EXPECT_EQ(plan.kind, BodyPlan::Kind::kFile);
  EXPECT_EQ(plan.limit, 1000u);
  EXPECT_EQ(plan.file_path.rfind(h.data() + "/uploads/", 0), 0u);

  // Chunks may not add up past the limit either.
  Response start = h.Call("POST", "/v2/m/blobs/uploads/");
  const std::string loc = *start.Get("Location");
  ASSERT_EQ(h.Call("PATCH", loc, std::string(600, 'a')).status, 202);
  Response over = h.Call("PATCH", loc, std::string(600, 'b'));
  EXPECT_EQ(over.status, 413);
  EXPECT_EQ(h.Call("GET", loc).Get("Range"), "0-599");

  // Manifests: 4 MiB by default.
  Harness d;
  RequestHead mh;
  mh.method = "PUT";
  mh.target = "/v2/m/manifests/v1";
  mh.headers = {{"Authorization", "Bearer " + d.token()}};
  mh.content_length = kMaxManifestBytes + 1;
  plan = d.registry().PlanBody(mh);
  ASSERT_TRUE(plan.reject.has_value());
  EXPECT_EQ(plan.reject->status, 413);
  mh.content_length = kMaxManifestBytes;
  plan = d.registry().PlanBody(mh);
  EXPECT_FALSE(plan.reject.has_value());
  EXPECT_EQ(plan.kind, BodyPlan::Kind::kMemory);
  EXPECT_EQ(plan.limit, kMaxManifestBytes);
  Request big;
  big.head = mh;
  big.body = std::string(kMaxManifestBytes + 1, ' ');
  EXPECT_EQ(d.registry().Handle(big).status, 413);
}

// Slow handlers run on the bounded heavy pool, cheap ones on the light pool
// (registry/handler_pools.h).
TEST(RegistryTest, PlanBodySendsSlowRequestsToTheHeavyPool) {
  Harness h;
  Response start = h.Call("POST", "/v2/m/blobs/uploads/");
  const std::string session = *start.Get("Location");
  struct Case {
    const char* method;
    std::string target;
    bool heavy;
  };
  const Case cases[] = {
      {"GET", "/v2/", false},
      {"GET", "/v2/_catalog", false},
      {"GET", "/v2/m/tags/list", false},
      {"GET", "/v2/m/manifests/v1", false},
      {"HEAD", "/v2/m/manifests/v1", false},
      {"PUT", "/v2/m/manifests/v1", true},
      {"HEAD", "/v2/m/blobs/" + D("x"), false},
      {"GET", "/v2/m/blobs/" + D("x"), true},
      {"POST", "/v2/m/blobs/uploads/", false},
      {"POST", "/v2/m/blobs/uploads/?digest=" + D("x"), true},
      {"PATCH", session, false},
      {"GET", session, false},
      {"PUT", session + "?digest=" + D("x"), true},
      {"GET", "/v2/m/blz/patch?from=" + D("a") + "&to=" + D("b"), true},
      {"GET", "/v2/m/blz/diff?from=" + D("a") + "&to=" + D("b"), true},
  };
  for (const Case& c : cases) {
    RequestHead head;
    head.method = c.method;
    head.target = c.target;
    head.headers = {{"Authorization", "Bearer " + h.token()}};
    BodyPlan plan = h.registry().PlanBody(head);
    EXPECT_FALSE(plan.reject.has_value()) << c.method << " " << c.target;
    EXPECT_EQ(plan.heavy, c.heavy) << c.method << " " << c.target;
  }
}

TEST(RegistryTest, PlanBodyRefusesOutOfOrderChunksEarly) {
  Harness h;
  Response start = h.Call("POST", "/v2/m/blobs/uploads/");
  RequestHead head;
  head.method = "PATCH";
  head.target = *start.Get("Location");
  head.headers = {{"Authorization", "Bearer " + h.token()}, {"Content-Range", "100-199"}};
  head.content_length = 100;
  BodyPlan plan = h.registry().PlanBody(head);
  ASSERT_TRUE(plan.reject.has_value());
  EXPECT_EQ(plan.reject->status, 416);
  head.headers[1].value = "0-99";
  plan = h.registry().PlanBody(head);
  EXPECT_FALSE(plan.reject.has_value());
  EXPECT_EQ(plan.kind, BodyPlan::Kind::kFile);
}

// ---- manifests, tags, catalog ----

TEST(RegistryTest, PushAndPullManifest) {
  Harness h;
  const std::string archive = TinyArchive(6);
  const std::string manifest = h.ManifestFor("org/model", archive);
  const std::string md = D(manifest);
  Response put = h.PutManifest("org/model", "v1", manifest);
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(put.Get("Location"), "/v2/org/model/manifests/" + md);
  EXPECT_EQ(put.Get("Docker-Content-Digest"), md);

  for (const std::string& ref : {std::string("v1"), md}) {
    Response get = h.Call("GET", "/v2/org/model/manifests/" + ref, "", {}, false);
    ASSERT_EQ(get.status, 200) << ref;
    EXPECT_EQ(get.body, manifest);  // byte-exact
    EXPECT_EQ(get.Get("Content-Type"), kManifestType);
    EXPECT_EQ(get.Get("Docker-Content-Digest"), md);
    Response head = h.Call("HEAD", "/v2/org/model/manifests/" + ref, "", {}, false);
    EXPECT_EQ(head.status, 200);
    EXPECT_TRUE(head.head_only);
    EXPECT_EQ(head.BodySize(), manifest.size());
  }
  // The archive is now a version of the repository.
  auto v = h.registry().db().FindVersion("org/model", D(archive));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->manifest_digest, md);
  EXPECT_EQ(v->archive_size, archive.size());

  // Push by digest: no tag is created.
  const std::string m2 = h.ManifestFor("org/model", TinyArchive(7));
  Response by_digest = h.PutManifest("org/model", D(m2), m2);
  EXPECT_EQ(by_digest.status, 201);
  EXPECT_EQ(json::parse(h.Call("GET", "/v2/org/model/tags/list").body)["tags"],
            json::array({"v1"}));
  // Moving a tag.
  ASSERT_EQ(h.PutManifest("org/model", "v1", m2).status, 201);
  EXPECT_EQ(h.Call("GET", "/v2/org/model/manifests/v1").body, m2);
}

TEST(RegistryTest, MissingManifests) {
  Harness h;
  ASSERT_EQ(h.PutManifest("m", "v1", h.ManifestFor("m", TinyArchive(1))).status, 201);
  for (const std::string& target :
       {std::string("/v2/m/manifests/v2"), "/v2/m/manifests/" + D("nope"),
        std::string("/v2/m/manifests/-bad-tag")}) {
    Response r = h.Call("GET", target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_UNKNOWN") << target;
  }
  // A tag of a repository that does not exist: the repository is what is missing (issue 24).
  Response no_repo = h.Call("GET", "/v2/other/manifests/v1");
  EXPECT_EQ(no_repo.status, 404);
  EXPECT_EQ(ErrorCodeOf(no_repo), "NAME_UNKNOWN");
  EXPECT_NE(no_repo.body.find("no repository 'other'"), std::string::npos) << no_repo.body;
  Response bad = h.Call("GET", "/v2/m/manifests/sha256:1234");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ErrorCodeOf(bad), "DIGEST_INVALID");
}

TEST(RegistryTest, ManifestWithMissingBlobIsRefused) {
  Harness h;
  // Neither blob pushed.
  Response r = h.PutManifest("m", "v1", h.ManifestFor("m", "archive", /*push_blobs=*/false));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_BLOB_UNKNOWN");
  // Only the archive missing.
  const std::string config = "{\"archive_size\":7}";
  h.PushBlob("m", config);
  r = h.PutManifest("m", "v1", h.ManifestFor("m", "archive", /*push_blobs=*/false));
  EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_BLOB_UNKNOWN");
  EXPECT_NE(r.body.find(D("archive")), std::string::npos);
  // Nothing was recorded.
  EXPECT_EQ(ErrorCodeOf(h.Call("GET", "/v2/m/tags/list")), "NAME_UNKNOWN");
  EXPECT_EQ(h.Call("GET", "/v2/_catalog").body, "{\"repositories\":[]}");
}

TEST(RegistryTest, MalformedManifestsAreManifestInvalid) {
  Harness h;
  const std::string good = h.ManifestFor("m", TinyArchive(2));
  auto mutate = [&](auto fn) {
    json j = json::parse(good);
    fn(j);
    return j.dump();
  };
  const std::vector<std::string> bad = {
      "not json",
      "[]",
      mutate([](json& j) { j["schemaVersion"] = 1; }),
      mutate([](json& j) { j.erase("schemaVersion"); }),
      mutate([](json& j) { j["mediaType"] = "application/vnd.oci.image.index.v1+json"; }),
      mutate([](json& j) { j["artifactType"] = "application/something"; }),
      mutate([](json& j) { j.erase("config"); }),
      mutate([](json& j) { j["config"]["mediaType"] = "application/json"; }),
      mutate([](json& j) { j["config"]["digest"] = "sha256:short"; }),
      mutate([](json& j) { j["config"]["size"] = -1; }),
      mutate([](json& j) { j["config"]["size"] = "12"; }),
      mutate([](json& j) { j["layers"] = json::array(); }),
      mutate([](json& j) { j["layers"].push_back(j["layers"][0]); }),
      mutate([](json& j) { j["layers"][0]["mediaType"] = "application/octet-stream"; }),
      mutate([](json& j) { j["layers"][0]["size"] = 999999; }),  // disagrees with the blob
      mutate([](json& j) { j["layers"] = "model.blz"; }),
      // Issue 9, defect 3: nlohmann stops at a NUL, so valid JSON + NUL + junk used to be
      // stored and served (201).
      good + std::string("\0junk", 5),
      good + std::string(1, '\0'),
      // A key given twice: which one counts would depend on the parser.
      "{\"schemaVersion\": 2, " + good.substr(1),
  };
  for (const std::string& m : bad) {
    Response r = h.PutManifest("m", "v1", m);
    EXPECT_EQ(r.status, 400) << m;
    EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_INVALID") << m << "\n" << r.body;
  }
  // Content-Type that disagrees with mediaType.
  Response ct = h.Call("PUT", "/v2/m/manifests/v1", good,
                       {{"Content-Type", "application/vnd.docker.distribution.manifest.v2+json"}});
  EXPECT_EQ(ErrorCodeOf(ct), "MANIFEST_INVALID");
  // An invalid tag.
  EXPECT_EQ(ErrorCodeOf(h.PutManifest("m", ".bad", good)), "MANIFEST_INVALID");
  // A digest reference that is not the manifest's digest.
  Response wrong = h.PutManifest("m", D("other"), good);
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(ErrorCodeOf(wrong), "DIGEST_INVALID");
  EXPECT_EQ(ErrorCodeOf(h.Call("GET", "/v2/m/tags/list")), "NAME_UNKNOWN");
  // Without a Content-Type the body's mediaType decides; with parameters it still matches.
  EXPECT_EQ(h.Call("PUT", "/v2/m/manifests/v1", good).status, 201);
  EXPECT_EQ(h.Call("PUT", "/v2/m/manifests/v2", good,
                   {{"Content-Type", kManifestType + "; charset=utf-8"}})
                .status,
            201);
}

TEST(RegistryTest, TagsListAndPagination) {
  Harness h;
  const std::string m = h.ManifestFor("m", TinyArchive(1));
  for (const char* tag : {"v3", "v1", "latest", "v2", "A"}) {
    ASSERT_EQ(h.PutManifest("m", tag, m).status, 201);
  }
  Response all = h.Call("GET", "/v2/m/tags/list");
  ASSERT_EQ(all.status, 200);
  EXPECT_EQ(json::parse(all.body),
            (json{{"name", "m"}, {"tags", {"A", "latest", "v1", "v2", "v3"}}}));
  EXPECT_FALSE(all.Get("Link").has_value());

  Response p1 = h.Call("GET", "/v2/m/tags/list?n=2");
  EXPECT_EQ(json::parse(p1.body)["tags"], json::array({"A", "latest"}));
  EXPECT_EQ(p1.Get("Link"), "</v2/m/tags/list?n=2&last=latest>; rel=\"next\"");
  Response p2 = h.Call("GET", "/v2/m/tags/list?n=2&last=latest");
  EXPECT_EQ(json::parse(p2.body)["tags"], json::array({"v1", "v2"}));
  Response p3 = h.Call("GET", "/v2/m/tags/list?n=2&last=v2");
  EXPECT_EQ(json::parse(p3.body)["tags"], json::array({"v3"}));
  EXPECT_FALSE(p3.Get("Link").has_value());
  EXPECT_EQ(json::parse(h.Call("GET", "/v2/m/tags/list?n=0").body)["tags"], json::array());

  EXPECT_EQ(h.Call("GET", "/v2/m/tags/list?n=abc").status, 400);
  EXPECT_EQ(h.Call("GET", "/v2/m/tags/list?n=-1").status, 400);
  Response unknown = h.Call("GET", "/v2/nope/tags/list");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(ErrorCodeOf(unknown), "NAME_UNKNOWN");
}

TEST(RegistryTest, Catalog) {
  Harness h;
  uint64_t seed = 0;
  for (const char* repo : {"zeta", "alpha/one", "alpha"}) {
    ASSERT_EQ(h.PutManifest(repo, "v1", h.ManifestFor(repo, TinyArchive(++seed))).status, 201);
  }
  EXPECT_EQ(json::parse(h.Call("GET", "/v2/_catalog").body),
            (json{{"repositories", {"alpha", "alpha/one", "zeta"}}}));
  Response p = h.Call("GET", "/v2/_catalog?n=1&last=alpha");
  EXPECT_EQ(json::parse(p.body)["repositories"], json::array({"alpha/one"}));
  EXPECT_EQ(p.Get("Link"), "</v2/_catalog?n=1&last=alpha/one>; rel=\"next\"");
}

// ---- the blz patch endpoint (with a stand-in patch function) ----

class PatchEndpointTest : public ::testing::Test {
 protected:
  static RegistryOptions Options(std::atomic<int>* calls, bool fail = false) {
    RegistryOptions o;
    o.create_patch = [calls, fail](const std::string& base, const std::string& base_digest,
                                   const std::string& target, const std::string& target_digest,
                                   const std::string& out) -> Status {
      calls->fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // widen the race window
      if (fail) return Corruption(base + ": not an archive");
      auto b = Sha256FileHex(base);
      auto t = Sha256FileHex(target);
      if (!b.ok() || !t.ok()) return Internal("cannot hash inputs");
      // The digests handed over are the files' own (the patcher records them unhashed).
      if (MakeDigest(*b) != base_digest || MakeDigest(*t) != target_digest) {
        return Internal("digests " + base_digest + " / " + target_digest + " are not the files'");
      }
      return WriteFileAtomic(out, "PATCH " + *b + " -> " + *t);
    };
    return o;
  }
  void PushVersions(Harness* h) {
    ASSERT_EQ(h->PutManifest("m", "v1", h->ManifestFor("m", base_)).status, 201);
    ASSERT_EQ(h->PutManifest("m", "v2", h->ManifestFor("m", target_)).status, 201);
  }
  std::string Target() const { return "/v2/m/blz/patch?from=" + D(base_) + "&to=" + D(target_); }
  std::string Expected() const {
    return "PATCH " + Sha256Hex(base_) + " -> " + Sha256Hex(target_);
  }

  const std::string base_ = TinyArchive(10);
  const std::string target_ = TinyArchive(11);
};

TEST_F(PatchEndpointTest, ComputedOnceThenServedFromTheStore) {
  std::atomic<int> calls{0};
  Harness h(Options(&calls));
  PushVersions(&h);
  Response first = h.Call("GET", Target(), "", {}, false);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.Get("Blz-Patch-Cache"), "miss");
  EXPECT_EQ(first.Get("Content-Type"), "application/vnd.blz.patch.v1");
  EXPECT_EQ(BodyOf(first), Expected());
  EXPECT_EQ(first.Get("Docker-Content-Digest"), D(Expected()));

  Response second = h.Call("GET", Target(), "", {}, false);
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.Get("Blz-Patch-Cache"), "hit");
  EXPECT_EQ(BodyOf(second), Expected());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(h.registry().patches_computed(), 1u);
  // GET /metrics tells the computed patch from the one served from the cache.
  const std::string metrics = h.registry().metrics().Render();
  EXPECT_NE(metrics.find("blz_patches_served_total{result=\"computed\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("blz_patches_served_total{result=\"cache_hit\"} 1\n"),
            std::string::npos)
      << metrics;
  // Kept as a blob and in the patches table.
  EXPECT_TRUE(h.registry().blobs().Contains(D(Expected())));
  auto rec = h.registry().db().FindPatch(D(base_), D(target_));
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->patch_digest, D(Expected()));

  // Range works on patches too.
  Response part = h.Call("GET", Target(), "", {{"Range", "bytes=0-4"}}, false);
  EXPECT_EQ(part.status, 206);
  EXPECT_EQ(BodyOf(part), "PATCH");
  // The reverse direction is another patch.
  Response rev =
      h.Call("GET", "/v2/m/blz/patch?from=" + D(target_) + "&to=" + D(base_), "", {}, false);
  EXPECT_EQ(rev.Get("Blz-Patch-Cache"), "miss");
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(h.UploadsCount(), 0u);
}

TEST_F(PatchEndpointTest, ConcurrentIdenticalRequestsComputeOnce) {
  std::atomic<int> calls{0};
  Harness h(Options(&calls));
  PushVersions(&h);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, misses{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      Response r = h.Call("GET", Target(), "", {}, false);
      if (r.status == 200 && BodyOf(r) == Expected()) ok.fetch_add(1);
      if (r.Get("Blz-Patch-Cache") == "miss") misses.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(misses.load(), 1);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(PatchEndpointTest, BothDigestsMustBeVersionsOfTheRepository) {
  std::atomic<int> calls{0};
  Harness h(Options(&calls));
  PushVersions(&h);
  const std::string other_archive = TinyArchive(12);
  ASSERT_EQ(h.PutManifest("other", "v1", h.ManifestFor("other", other_archive)).status, 201);
  const std::string foreign = D(other_archive);
  // ?to= must be a version of the repository; ?from= one of any repository the caller may
  // read (a held base pulled from elsewhere: tests/registry/base_endpoint_test.cc).
  for (const std::string& q : {"from=" + D(base_) + "&to=" + foreign,
                               "from=" + D("nope") + "&to=" + D(target_)}) {
    Response r = h.Call("GET", "/v2/m/blz/patch?" + q);
    EXPECT_EQ(r.status, 404) << q;
    EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_UNKNOWN") << q;
  }
  for (const std::string& q : {std::string("from=") + D(base_), std::string(""),
                               "from=sha256:12&to=" + D(target_)}) {
    Response r = h.Call("GET", "/v2/m/blz/patch?" + q);
    EXPECT_EQ(r.status, 400) << q;
    EXPECT_EQ(ErrorCodeOf(r), "DIGEST_INVALID") << q;
  }
  Response unknown_repo = h.Call("GET", "/v2/nope/blz/patch?from=" + D(base_) + "&to=" + D(target_));
  EXPECT_EQ(ErrorCodeOf(unknown_repo), "MANIFEST_UNKNOWN");
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(h.Call("GET", "/v2/m/blz/patch?from=" + foreign + "&to=" + D(target_)).status, 200);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(PatchEndpointTest, FailureRecordsNothing) {
  std::atomic<int> calls{0};
  Harness h(Options(&calls, /*fail=*/true));
  PushVersions(&h);
  const size_t blobs = h.BlobCount();
  Response r = h.Call("GET", Target());
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(ErrorCodeOf(r), "UNKNOWN");
  EXPECT_EQ(h.BlobCount(), blobs);
  EXPECT_EQ(h.UploadsCount(), 0u);
  EXPECT_EQ(h.registry().db().FindPatch(D(base_), D(target_)).status().code(), Code::kNotFound);
}

TEST_F(PatchEndpointTest, WithoutAPatchFunctionItIsUnsupported) {
  Harness h;
  PushVersions(&h);
  Response r = h.Call("GET", Target());
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(ErrorCodeOf(r), "UNSUPPORTED");
}

// `blz serve --redirect`: a blob GET answers 307 to a presigned URL of the store when the
// driver has them (s3, under BLZ_TEST_STORAGE=s3), and is proxied as before when it has none
// (fs). HEAD is never redirected.
TEST(RegistryTest, RedirectSendsBlobGetsToPresignedUrlsWhereTheStoreHasThem) {
  RegistryOptions o;
  o.blob_redirect_expiry = std::chrono::seconds(600);
  Harness h(o);
  const std::string blob = "bytes a client may fetch from the store";
  const std::string d = h.PushBlob("m", blob);
  Response get = h.Call("GET", "/v2/m/blobs/" + d);
  if (testing::TestStorageIsS3()) {
    ASSERT_EQ(get.status, 307) << get.body;
    const std::string location = get.Get("Location").value_or("");
    EXPECT_EQ(location.rfind(blz::testing::CephS3Server::Get().endpoint() + "/blz-registry-tests/", 0),
              0u)
        << location;
    EXPECT_NE(location.find("X-Amz-Expires=600"), std::string::npos) << location;
    EXPECT_NE(location.find("/blobs/sha256/" + d.substr(7) + "?"), std::string::npos) << location;
  } else {
    ASSERT_EQ(get.status, 200) << get.body;
    EXPECT_EQ(testing::BodyOf(get), blob);
  }
  EXPECT_EQ(get.Get("Docker-Content-Digest"), d);
  EXPECT_EQ(h.Call("HEAD", "/v2/m/blobs/" + d).status, 200);
  // A blob of another repository is still refused before any redirect.
  EXPECT_EQ(h.Call("GET", "/v2/other/blobs/" + d).status, 404);
}

}  // namespace
}  // namespace blz::registry
