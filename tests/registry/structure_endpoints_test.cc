// Handler tests (no sockets) for structural identity in the registry: the structural hash
// recorded at push, GET /v2/_blz/structures/<hash>, GET /v2/<name>/blz/diff (value diffs,
// cached), and the backfill of hashes for versions of a schema-1 DB. docs/registry-api.md.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/gguf.h"
#include "formats/identify.h"
#include "formats/value_diff_json.h"
#include "store/fs/fs_blob_store.h"
#include "registry/registry.h"
#include "store/sqlite/sqlite.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::TinyArchive;

std::string D(const std::string& bytes) { return MakeDigest(Sha256Hex(bytes)); }

// The structural hash `blz id` gives for archive bytes.
std::string StructureOf(const std::string& archive) {
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "a.blz", archive);
  auto id = formats::IdentifyPath(tmp / "a.blz");
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? id->structural_hash : "";
}

// A .blz archive of one GGUF file (two F32 tensors; `scale` changes the values only).
std::string GgufArchive(float scale) {
  blz::testing::TempDir tmp;
  formats::GgufHeader header;
  header.metadata.push_back({"general.architecture", formats::GgufValue::String("llama")});
  header.tensors.push_back({"blk.0.ffn_up.weight", {4, 2}, formats::GgmlType::kF32, 0, 0});
  header.tensors.push_back({"output_norm.weight", {4}, formats::GgmlType::kF32, 0, 0});
  EXPECT_TRUE(formats::AssignGgufOffsets(&header).ok());
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {1, 1, 1, 1};
  for (float& x : a) x *= scale;
  const ByteSpan data[] = {{reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4},
                           {reinterpret_cast<const uint8_t*>(b.data()), b.size() * 4}};
  Status s = formats::WriteGgufFile(tmp / "m.gguf", header, data, {});
  EXPECT_TRUE(s.ok()) << s.ToString();
  formats::PackStats stats;
  s = formats::Pack(tmp / "m.gguf", tmp / "m.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "m.blz");
}

// Pushes `archive` as `ref` (a tag, or "" = by digest) of `repo`; returns the archive digest.
std::string Push(Harness* h, const std::string& repo, const std::string& ref,
                 const std::string& archive) {
  const std::string manifest = h->ManifestFor(repo, archive);
  Response r = h->PutManifest(repo, ref.empty() ? D(manifest) : ref, manifest);
  EXPECT_EQ(r.status, 201) << r.body;
  return D(archive);
}

// The value diff document the CLI would print for these archives, labelled with their digests.
std::string ExpectedDiff(const std::string& a, const std::string& b) {
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "a.blz", a);
  blz::testing::WriteFileBytes(tmp / "b.blz", b);
  formats::ValueDiffJsonOptions o;
  o.a_label = D(a);
  o.b_label = D(b);
  auto doc = formats::ComputeValueDiffJson(tmp / "a.blz", tmp / "b.blz", o);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  return doc.ok() ? *doc : "";
}

// ---- structural hash at push ----

TEST(StructureTest, PushRecordsTheStructuralHash) {
  Harness h;
  const std::string archive = TinyArchive(1);
  const std::string digest = Push(&h, "m", "v1", archive);
  auto v = h.registry().db().FindVersion("m", digest);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->structural_hash, StructureOf(archive));
  EXPECT_EQ(v->structural_hash.size(), 64u);
  // A GGUF archive too.
  const std::string gguf = GgufArchive(1);
  const std::string gd = Push(&h, "g", "v1", gguf);
  EXPECT_EQ(h.registry().db().FindVersion("g", gd)->structural_hash, StructureOf(gguf));
  EXPECT_NE(StructureOf(gguf), StructureOf(archive));
}

TEST(StructureTest, ArchivesThatCannotBeIdentifiedAreRefused) {
  Harness h;
  const std::string real = TinyArchive(1);
  const std::vector<std::string> bad = {
      "not an archive",                            // no magic
      real.substr(0, real.size() / 2),             // layout: pieces past the end of the file
      "BLZARCH\n" + std::string(56, '\0'),         // header length 0: not JSON
  };
  for (const std::string& archive : bad) {
    Response r = h.PutManifest("m", "v1", h.ManifestFor("m", archive));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_INVALID") << r.body;
    const json err = json::parse(r.body)["errors"][0];
    EXPECT_NE(err["message"].get<std::string>().find("is not a model archive whose structure "
                                                     "blz can identify"),
              std::string::npos)
        << r.body;
    EXPECT_EQ(err["detail"]["digest"], D(archive));
    // Server paths never reach the client.
    EXPECT_EQ(r.body.find(h.data()), std::string::npos) << r.body;
  }
  // Nothing was recorded.
  EXPECT_EQ(ErrorCodeOf(h.Call("GET", "/v2/m/tags/list")), "NAME_UNKNOWN");
  EXPECT_EQ(h.Call("GET", "/v2/_catalog").body, "{\"repositories\":[]}");
}

// ---- GET /v2/_blz/structures/<hash> ----

class StructuresEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Structure S (one layer): a1 (m:v1 and m:latest), a2 (m, untagged), a1 again in
    // "alpha/other". Structure T (two layers): t1 (m:v3).
    a1_ = Push(&h_, "m", "v1", TinyArchive(1));
    Push(&h_, "m", "latest", TinyArchive(1));
    a2_ = Push(&h_, "m", "", TinyArchive(2));
    Push(&h_, "alpha/other", "x", TinyArchive(1));
    t1_ = Push(&h_, "m", "v3", TinyArchive(3, /*layers=*/2));
    s_ = StructureOf(TinyArchive(1));
    t_ = StructureOf(TinyArchive(3, 2));
  }
  json Entry(const std::string& repo, const std::optional<std::string>& tag,
             const std::string& digest) {
    auto v = h_.registry().db().FindVersion(repo, digest);
    EXPECT_TRUE(v.ok());
    return json{{"repository", repo},
                {"tag", tag ? json(*tag) : json(nullptr)},
                {"digest", digest},
                {"manifest_digest", v.ok() ? v->manifest_digest : ""}};
  }

  Harness h_;
  std::string a1_, a2_, t1_, s_, t_;
};

TEST_F(StructuresEndpointTest, ListsTheVersionsSharingAStructure) {
  Response r = h_.Call("GET", "/v2/_blz/structures/" + s_, "", {}, /*auth=*/false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Get("Content-Type"), "application/json");
  EXPECT_FALSE(r.Get("Link").has_value());
  const json want = {{"structure", s_},
                     {"versions",
                      {Entry("alpha/other", "x", a1_), Entry("m", std::nullopt, a2_),
                       Entry("m", "latest", a1_), Entry("m", "v1", a1_)}}};
  EXPECT_EQ(json::parse(r.body), want);
  // Keys in the documented order.
  EXPECT_EQ(r.body.rfind("{\"structure\":", 0), 0u) << r.body;
  EXPECT_NE(r.body.find("{\"repository\":\"alpha/other\",\"tag\":\"x\",\"digest\":"),
            std::string::npos)
      << r.body;

  // The other structure; a "sha256:" prefix (also percent-encoded) is accepted.
  const json t_want = {{"structure", t_}, {"versions", {Entry("m", "v3", t1_)}}};
  EXPECT_EQ(json::parse(h_.Call("GET", "/v2/_blz/structures/" + t_).body), t_want);
  EXPECT_EQ(json::parse(h_.Call("GET", "/v2/_blz/structures/sha256:" + t_).body), t_want);
  EXPECT_EQ(json::parse(h_.Call("GET", "/v2/_blz/structures/sha256%3A" + t_).body), t_want);

  // An unknown structure: 200 and no versions.
  Response none = h_.Call("GET", "/v2/_blz/structures/" + std::string(64, '0'));
  ASSERT_EQ(none.status, 200);
  EXPECT_EQ(json::parse(none.body),
            (json{{"structure", std::string(64, '0')}, {"versions", json::array()}}));
}

TEST_F(StructuresEndpointTest, PaginatesWithLinkLikeTheCatalog) {
  const json all = json::parse(h_.Call("GET", "/v2/_blz/structures/" + s_).body)["versions"];
  ASSERT_EQ(all.size(), 4u);
  Response p1 = h_.Call("GET", "/v2/_blz/structures/" + s_ + "?n=3");
  ASSERT_EQ(p1.status, 200);
  EXPECT_EQ(json::parse(p1.body)["versions"], json(std::vector<json>(all.begin(), all.begin() + 3)));
  const std::string link = "</v2/_blz/structures/" + s_ + "?n=3&last=m:latest@" + a1_ +
                           ">; rel=\"next\"";
  EXPECT_EQ(p1.Get("Link"), link);
  Response p2 = h_.Call("GET", link.substr(1, link.find('>') - 1));
  ASSERT_EQ(p2.status, 200) << p2.body;
  EXPECT_EQ(json::parse(p2.body)["versions"], json::array({all[3]}));
  EXPECT_FALSE(p2.Get("Link").has_value());
  // An untagged entry as the cursor: <repository>@<digest>.
  Response p3 = h_.Call("GET", "/v2/_blz/structures/" + s_ + "?n=1&last=m@" + a2_);
  EXPECT_EQ(json::parse(p3.body)["versions"], json::array({all[2]}));
  EXPECT_EQ(json::parse(h_.Call("GET", "/v2/_blz/structures/" + s_ + "?n=0").body)["versions"],
            json::array());
}

TEST_F(StructuresEndpointTest, MalformedHashesAndQueriesAreBadRequests) {
  for (const std::string& hash :
       {std::string("abc"), std::string(63, 'a'), std::string(65, 'a'), std::string(64, 'A'),
        std::string(63, 'a') + "g", "sha512:" + s_, "sha256:" + s_.substr(1), std::string("")}) {
    Response r = h_.Call("GET", "/v2/_blz/structures/" + hash);
    EXPECT_EQ(r.status, 400) << hash;
    EXPECT_EQ(ErrorCodeOf(r), "BAD_REQUEST") << hash;
    EXPECT_NE(r.body.find("64 lower-case hex digits"), std::string::npos) << r.body;
  }
  for (const std::string& q : {std::string("n=abc"), std::string("n=-1"),
                               std::string("last=m"), std::string("last=m@sha256:12"),
                               "last=M@" + a1_, "last=m:@" + a1_, "last=m:.bad@" + a1_}) {
    Response r = h_.Call("GET", "/v2/_blz/structures/" + s_ + "?" + q);
    EXPECT_EQ(r.status, 400) << q;
    EXPECT_EQ(ErrorCodeOf(r), "BAD_REQUEST") << q;
  }
  // Only GET; no such sub-paths.
  Response put = h_.Call("PUT", "/v2/_blz/structures/" + s_);
  EXPECT_EQ(put.status, 405);
  EXPECT_EQ(put.Get("Allow"), "GET");
  EXPECT_EQ(h_.Call("GET", "/v2/_blz/structures").status, 404);
  EXPECT_EQ(h_.Call("GET", "/v2/_blz/other/" + s_).status, 404);
}

// ---- GET /v2/<name>/blz/diff ----

class DiffEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = Push(&h_, "m", "v1", base_bytes_);
    ft_ = Push(&h_, "m", "v2", ft_bytes_);
  }
  std::string Target(const std::string& from, const std::string& to) const {
    return "/v2/m/blz/diff?from=" + from + "&to=" + to;
  }

  Harness h_;
  const std::string base_bytes_ = TinyArchive(1);
  const std::string ft_bytes_ = TinyArchive(1, 1, /*perturb=*/0.01);
  std::string base_, ft_;
};

TEST_F(DiffEndpointTest, ComputedOnceThenServedFromTheStore) {
  Response first = h_.Call("GET", Target(base_, ft_), "", {}, /*auth=*/false);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.Get("Content-Type"), "application/json");
  EXPECT_EQ(first.Get("Blz-Diff-Cache"), "miss");
  const std::string body = BodyOf(first);
  // Exactly the document of `blz diff --values --json`, naming the archives by digest.
  EXPECT_EQ(body, ExpectedDiff(base_bytes_, ft_bytes_));
  EXPECT_EQ(first.Get("Docker-Content-Digest"), D(body));
  const json doc = json::parse(body);
  EXPECT_EQ(doc["schema"], 1);
  EXPECT_EQ(doc["structure"]["hash_equal"], true);
  EXPECT_GT(doc["values"]["model"]["changed"].get<uint64_t>(), 0u);
  EXPECT_EQ(doc["values"]["inputs"]["a"]["path"], base_);
  EXPECT_EQ(doc["values"]["inputs"]["b"]["path"], ft_);
  EXPECT_EQ(body.find(h_.data()), std::string::npos);

  Response second = h_.Call("GET", Target(base_, ft_), "", {}, false);
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.Get("Blz-Diff-Cache"), "hit");
  EXPECT_EQ(BodyOf(second), body);
  EXPECT_EQ(h_.registry().value_diffs_computed(), 1u);
  // Kept as a blob and in the value_diffs table.
  EXPECT_TRUE(h_.registry().blobs().Contains(D(body)));
  auto rec = h_.registry().db().FindValueDiff(base_, ft_);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->diff_digest, D(body));
  EXPECT_EQ(rec->diff_size, body.size());

  // HEAD gives the size without the body.
  Response head = h_.Call("HEAD", Target(base_, ft_));
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.head_only);
  EXPECT_EQ(head.BodySize(), body.size());
  // The reverse direction is another diff.
  Response rev = h_.Call("GET", Target(ft_, base_));
  ASSERT_EQ(rev.status, 200);
  EXPECT_EQ(rev.Get("Blz-Diff-Cache"), "miss");
  EXPECT_EQ(BodyOf(rev), ExpectedDiff(ft_bytes_, base_bytes_));
  EXPECT_EQ(h_.registry().value_diffs_computed(), 2u);
  // A cached diff whose blob went missing is computed again.
  ASSERT_TRUE(h_.registry().blobs().RemoveIfOlder(D(body), std::chrono::system_clock::time_point::max()).ok());
  Response again = h_.Call("GET", Target(base_, ft_));
  EXPECT_EQ(again.Get("Blz-Diff-Cache"), "miss");
  EXPECT_EQ(BodyOf(again), body);
  EXPECT_EQ(h_.UploadsCount(), 0u);
}

TEST_F(DiffEndpointTest, ConcurrentIdenticalRequestsComputeOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, misses{0};
  const std::string expected = ExpectedDiff(base_bytes_, ft_bytes_);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      Response r = h_.Call("GET", Target(base_, ft_), "", {}, false);
      if (r.status == 200 && BodyOf(r) == expected) ok.fetch_add(1);
      if (r.Get("Blz-Diff-Cache") == "miss") misses.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(misses.load(), 1);
  EXPECT_EQ(h_.registry().value_diffs_computed(), 1u);
}

TEST_F(DiffEndpointTest, DifferentStructuresGiveTheAddedAndRemovedTensors) {
  const std::string bigger_bytes = TinyArchive(1, /*layers=*/2);
  const std::string bigger = Push(&h_, "m", "v3", bigger_bytes);
  Response r = h_.Call("GET", Target(base_, bigger));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(BodyOf(r), ExpectedDiff(base_bytes_, bigger_bytes));
  const json doc = json::parse(BodyOf(r));
  EXPECT_EQ(doc["structure"]["hash_equal"], false);
  ASSERT_FALSE(doc["structure"]["tensors_added"].empty());
  ASSERT_FALSE(doc["values"]["added"].empty());
  EXPECT_EQ(doc["values"]["added"][0]["name"].get<std::string>().rfind("model.layers.1.", 0), 0u);
  EXPECT_TRUE(doc["values"]["removed"].empty());
}

TEST_F(DiffEndpointTest, GgufArchives) {
  const std::string a = GgufArchive(1), b = GgufArchive(2);
  const std::string da = Push(&h_, "g", "v1", a), db = Push(&h_, "g", "v2", b);
  Response r = h_.Call("GET", "/v2/g/blz/diff?from=" + da + "&to=" + db);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(BodyOf(r), ExpectedDiff(a, b));
  const json doc = json::parse(BodyOf(r));
  EXPECT_EQ(doc["structure"]["hash_equal"], true);
  // blk.0.ffn_up.weight doubled (8 elements changed), output_norm.weight unchanged.
  EXPECT_EQ(doc["values"]["model"]["changed"], 8);
  EXPECT_EQ(doc["values"]["layers"][0]["name"], "blk.0");
}

TEST_F(DiffEndpointTest, BothDigestsMustBeVersionsOfTheRepository) {
  const std::string foreign = Push(&h_, "other", "v1", TinyArchive(5));
  // ?from= may be a version of another readable repository (base_endpoint_test.cc).
  EXPECT_EQ(h_.Call("GET", "/v2/m/blz/diff?from=" + foreign + "&to=" + ft_).status, 200);
  for (const std::string& q : {"from=" + base_ + "&to=" + foreign,
                               "from=" + D("nope") + "&to=" + ft_}) {
    Response r = h_.Call("GET", "/v2/m/blz/diff?" + q);
    EXPECT_EQ(r.status, 404) << q;
    EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_UNKNOWN") << q;
  }
  for (const std::string& q : {"from=" + base_, std::string(""), "to=" + ft_,
                               "from=sha256:12&to=" + ft_, "from=" + base_ + "&to=md5:00"}) {
    Response r = h_.Call("GET", "/v2/m/blz/diff?" + q);
    EXPECT_EQ(r.status, 400) << q;
    EXPECT_EQ(ErrorCodeOf(r), "DIGEST_INVALID") << q;
  }
  EXPECT_EQ(ErrorCodeOf(h_.Call("GET", "/v2/nope/" + Target(base_, ft_).substr(6))),
            "MANIFEST_UNKNOWN");
  EXPECT_EQ(ErrorCodeOf(h_.Call("GET", "/v2/UPPER/blz/diff?from=" + base_ + "&to=" + ft_)),
            "NAME_INVALID");
  Response post = h_.Call("POST", Target(base_, ft_));
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.Get("Allow"), "GET, HEAD");
  // A version whose archive blob is gone.
  ASSERT_TRUE(h_.registry().blobs().RemoveIfOlder(ft_, std::chrono::system_clock::time_point::max()).ok());
  EXPECT_EQ(ErrorCodeOf(h_.Call("GET", Target(base_, ft_))), "BLOB_UNKNOWN");
  EXPECT_EQ(h_.registry().value_diffs_computed(), 1u);  // the one from `foreign`
  EXPECT_EQ(h_.UploadsCount(), 0u);
}

// ---- private mode ----

TEST(StructureTest, PrivateModeNeedsATokenForBothEndpoints) {
  RegistryOptions o;
  o.private_mode = true;
  Harness h(o);
  const std::string a = TinyArchive(1);
  const std::string d = Push(&h, "m", "v1", a);
  for (const std::string& target :
       {"/v2/_blz/structures/" + StructureOf(a), "/v2/m/blz/diff?from=" + d + "&to=" + d,
        std::string("/v2/_blz/structures/bad")}) {
    Response anon = h.Call("GET", target, "", {}, /*auth=*/false);
    EXPECT_EQ(anon.status, 401) << target;
    EXPECT_EQ(ErrorCodeOf(anon), "UNAUTHORIZED") << target;
    EXPECT_EQ(anon.Get("WWW-Authenticate").value_or("").rfind("Bearer realm=\"http://", 0), 0u);
    Response bad_token = h.Call("GET", target, "",
                                {{"Authorization", "Bearer " + std::string(64, 'a')}}, false);
    EXPECT_EQ(bad_token.status, 401) << target;
  }
  EXPECT_EQ(h.Call("GET", "/v2/_blz/structures/" + StructureOf(a)).status, 200);
  EXPECT_EQ(h.Call("GET", "/v2/m/blz/diff?from=" + d + "&to=" + d).status, 200);
  // Without --private both are anonymous reads (tested above with auth=false).
}

// ---- schema-1 data: backfill at Open ----

TEST(StructureTest, OpenBackfillsHashesOfOlderVersions) {
  SkipUnlessFsStorage();  // writes an older data directory's blob files
  SkipUnlessSqliteMetadata("edits a copied data directory's blz.db into schema-1 rows");
  blz::testing::TempDir keep;
  std::string data;
  const std::string archive = TinyArchive(1);
  std::string digest, junk_digest;
  {
    Harness h;
    digest = Push(&h, "m", "v1", archive);
    data = keep / "data";
    std::filesystem::copy(h.data(), data, std::filesystem::copy_options::recursive);
  }
  {
    // What a schema-1 registry could hold: a version without a hash, and one whose "archive"
    // is not an archive (accepted before identification was required).
    auto db = store::sqlite::Database::Open(data + "/blz.db");
    ASSERT_TRUE(db.ok());
    junk_digest = D("junk");
    auto blobs = store::FsBlobStore::Open(data);
    ASSERT_TRUE(blobs.ok());
    blz::testing::WriteFileBytes(data + "/uploads/junk", "junk");
    ASSERT_TRUE((*blobs)->Publish(data + "/uploads/junk", junk_digest).ok());
    Status s = db->Exec("UPDATE versions SET structural_hash = NULL; "
                        "INSERT INTO versions (repository_id, archive_digest, manifest_digest, "
                        "archive_size, created) SELECT repository_id, '" + junk_digest +
                        "', manifest_digest, 4, 1 FROM versions");
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto r = Registry::Open(data, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->db().FindVersion("m", digest)->structural_hash, StructureOf(archive));
  // The junk version stays without a structure (and listed nowhere); Open still succeeds.
  EXPECT_EQ((*r)->db().FindVersion("m", junk_digest)->structural_hash, "");
  EXPECT_EQ(*(*r)->db().ArchivesWithoutStructure(), std::vector<std::string>{junk_digest});
  Request req;
  req.head.method = "GET";
  req.head.target = "/v2/_blz/structures/" + StructureOf(archive);
  Response listed = (*r)->Handle(req);
  ASSERT_EQ(listed.status, 200);
  const json versions = json::parse(listed.body)["versions"];
  ASSERT_EQ(versions.size(), 1u);
  EXPECT_EQ(versions[0]["digest"], digest);
  // Diffing against the junk version fails cleanly, naming digests rather than server paths.
  req.head.target = "/v2/m/blz/diff?from=" + digest + "&to=" + junk_digest;
  Response diff = (*r)->Handle(req);
  EXPECT_EQ(diff.status, 500);
  EXPECT_EQ(ErrorCodeOf(diff), "UNKNOWN");
  EXPECT_EQ(diff.body.find(data), std::string::npos) << diff.body;
  EXPECT_EQ((*r)->value_diffs_computed(), 0u);
}

}  // namespace
}  // namespace blz::registry
