// Garbage collection (registry/garbage_collector.h) through the registry: what is removed,
// what stays, the dry run, and GC running while pushes go on.
#include "store/fs/fs_blob_store.h"
#include "registry/garbage_collector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::Harness;

// Makes a stored blob look written `age` ago (GC keeps younger unreferenced blobs). A blob a
// concurrent collection removed already stays removed.
void Backdate(Harness* h, const std::string& digest, std::chrono::seconds age) {
  auto path = dynamic_cast<store::FsBlobStore&>(h->registry().blobs().unwrapped()).PathFor(digest);
  ASSERT_TRUE(path.ok());
  std::error_code ec;
  std::filesystem::last_write_time(*path, std::filesystem::file_time_type::clock::now() - age,
                                   ec);
}

bool Stored(Harness* h, const std::string& digest) {
  return h->registry().blobs().Contains(digest);
}

// An image manifest over a config and a layer pushed to `repo`; returns the manifest body.
std::string PushImage(Harness* h, const std::string& repo, const std::string& tag,
                      const std::string& salt, std::vector<std::string>* digests = nullptr) {
  const std::string config = "{\"os\":\"linux\",\"salt\":\"" + salt + "\"}";
  const std::string layer = "layer " + salt;
  const std::string cd = h->PushBlob(repo, config);
  const std::string ld = h->PushBlob(repo, layer);
  if (digests != nullptr) *digests = {cd, ld};
  json m = {{"schemaVersion", 2},
            {"mediaType", testing::kManifestType},
            {"config",
             {{"mediaType", "application/vnd.oci.image.config.v1+json"},
              {"digest", cd},
              {"size", config.size()}}},
            {"layers", json::array({{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                                     {"digest", ld},
                                     {"size", layer.size()}}})}};
  const std::string body = m.dump();
  Response r = h->PutManifest(repo, tag, body);
  EXPECT_EQ(r.status, 201) << r.body;
  return body;
}

RegistryOptions Grace(std::chrono::milliseconds grace) {
  RegistryOptions o;
  o.gc_grace = grace;
  return o;
}

TEST(GarbageCollectorTest, RemovesUnreferencedOldBlobsOnly) {
  Harness h(Grace(std::chrono::hours(1)));
  std::vector<std::string> kept;
  PushImage(&h, "org/app", "v1", "kept", &kept);
  const std::string unlinked = h.PushBlob("org/app", "deleted later");
  ASSERT_EQ(h.Call("DELETE", "/v2/org/app/blobs/" + unlinked).status, 202);
  const std::string young = h.PushBlob("org/app", "young garbage");
  ASSERT_EQ(h.Call("DELETE", "/v2/org/app/blobs/" + young).status, 202);
  // Linked a moment ago, no manifest yet: a push in progress.
  const std::string in_flight = h.PushBlob("org/app", "manifest still to come");
  for (const std::string& d : {kept[0], kept[1], unlinked, in_flight}) {
    Backdate(&h, d, std::chrono::hours(2));
  }

  // The dry run tells, and removes nothing.
  Response dry = h.Call("POST", "/v2/_blz/gc?dry_run=true");
  ASSERT_EQ(dry.status, 200) << dry.body;
  json d = json::parse(dry.body);
  EXPECT_EQ(d["dry_run"], true);
  EXPECT_EQ(d["blobs_removed"], 1);
  EXPECT_EQ(d["removed"], json::array({unlinked}));
  EXPECT_EQ(d["bytes_freed"], std::string("deleted later").size());
  EXPECT_EQ(d["blobs_too_young"], 1);
  EXPECT_TRUE(Stored(&h, unlinked));

  Response run = h.Call("POST", "/v2/_blz/gc");
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_EQ(json::parse(run.body)["blobs_removed"], 1);
  EXPECT_FALSE(Stored(&h, unlinked));
  EXPECT_TRUE(Stored(&h, young));      // written within the grace period
  EXPECT_TRUE(Stored(&h, in_flight));  // linked within the grace period
  EXPECT_TRUE(Stored(&h, kept[0]));
  EXPECT_TRUE(Stored(&h, kept[1]));
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/v1").status, 200);
  // GC needs a token; a bad dry_run value is refused.
  EXPECT_EQ(h.Call("POST", "/v2/_blz/gc", "", {}, /*auth=*/false).status, 401);
  EXPECT_EQ(h.Call("POST", "/v2/_blz/gc?dry_run=maybe").status, 400);
}

// A manifest may name non-distributable layers that were never pushed: collection walks it
// without error, keeps its present blobs, and a pushed foreign layer it references stays.
TEST(GarbageCollectorTest, ForeignLayersNeverPushedAreTolerated) {
  Harness h(Grace(std::chrono::milliseconds(0)));
  std::vector<std::string> digests;
  json m = json::parse(PushImage(&h, "org/app", "v1", "base", &digests));
  const std::string foreign_type = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
  const std::string absent = "foreign, never pushed";
  const std::string pushed = "foreign, pushed anyway";
  digests.push_back(h.PushBlob("org/app", pushed));
  for (const std::string& bytes : {absent, pushed}) {
    m["layers"].push_back({{"mediaType", foreign_type},
                           {"digest", MakeDigest(Sha256Hex(bytes))},
                           {"size", bytes.size()},
                           {"urls", json::array({"https://example.com/l"})}});
  }
  m["mediaType"] = "application/vnd.docker.distribution.manifest.v2+json";
  Response put = h.Call("PUT", "/v2/org/app/manifests/foreign", m.dump(),
                        {{"Content-Type", "application/vnd.docker.distribution.manifest.v2+json"}});
  ASSERT_EQ(put.status, 201) << put.body;
  auto report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->errors.empty());
  EXPECT_TRUE(report->removed.empty());
  for (const std::string& d : digests) EXPECT_TRUE(Stored(&h, d)) << d;
  EXPECT_EQ(h.Call("GET", "/v2/org/app/manifests/foreign").status, 200);
}

TEST(GarbageCollectorTest, OldLinksWithoutAManifestAreCollectedWithTheirLinks) {
  Harness h(Grace(std::chrono::milliseconds(0)));
  const std::string abandoned = h.PushBlob("org/app", "uploaded, never referenced");
  std::vector<std::string> kept;
  PushImage(&h, "org/app", "v1", "kept", &kept);
  auto report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->removed, std::vector<std::string>{abandoned});
  EXPECT_EQ(h.Call("HEAD", "/v2/org/app/blobs/" + abandoned).status, 404);
  auto linked = h.registry().db().BlobLinked("org/app", abandoned);
  ASSERT_TRUE(linked.ok());
  EXPECT_FALSE(*linked);
  for (const std::string& k : kept) EXPECT_EQ(h.Call("HEAD", "/v2/org/app/blobs/" + k).status, 200);
}

// A dead chain goes in one collection, links before their parents, whatever depths its rows
// record. Here Y was chained on X before X was chained on P (as blz did before it refused to
// chain an archive others are stored against), so both rows say depth 1; X's digest sorts
// first. Before, X's link came first, was kept as Y's parent, and outlived the collection
// together with P's full patch (the churn test, seed 635881302).
TEST(GarbageCollectorTest, ADeadChainGoesInOneCollectionWhateverItsRecordedDepths) {
  Harness h(Grace(std::chrono::milliseconds(0)));
  store::MetadataDb& db = h.registry().db();
  const std::string p = MakeDigest(Sha256Hex("archive P"));
  std::string x = MakeDigest(Sha256Hex("archive 1")), y = MakeDigest(Sha256Hex("archive 2"));
  if (y < x) std::swap(x, y);
  for (const std::string& archive : {p, x, y}) {
    store::ManifestPut put;
    put.repository = "org/model";
    put.digest = MakeDigest(Sha256Hex("manifest of " + archive));
    put.media_type = testing::kManifestType;
    put.content = "{}";
    put.tag = "v-" + archive.substr(7, 8);
    put.archive_digest = archive;
    put.archive_size = 1000;
    ASSERT_TRUE(db.PutManifest(put).ok());
  }
  auto stored = [&](const std::string& bytes) {
    Result<store::BlobInfo> blob = h.registry().blobs().PutBytes(bytes);
    EXPECT_TRUE(blob.ok()) << blob.status().ToString();
    EXPECT_TRUE(db.RecordBlob(blob->digest, blob->size).ok());
    return *blob;
  };
  const store::BlobInfo full = stored("full patch of P");
  const store::BlobInfo link_x = stored("patch P -> X");
  const store::BlobInfo link_y = stored("patch X -> Y");
  ASSERT_TRUE(db.RecordPatch("", {"", p, full.digest, full.size}).ok());
  ASSERT_TRUE(db.RecordChainLink({x, p, link_x.digest, link_x.size, 1, 100}, "").ok());
  ASSERT_TRUE(db.RecordChainLink({y, x, link_y.digest, link_y.size, 2, 200}, "").ok());
  {
    Result<store::sql::Database> sql = h.OpenMetadataSql();
    ASSERT_TRUE(sql.ok()) << sql.status().ToString();
    ASSERT_TRUE(sql->Exec("UPDATE archive_chains SET depth = 1").ok());
  }
  for (const std::string& archive : {p, x, y}) {
    ASSERT_TRUE(
        db.DeleteManifest("org/model", MakeDigest(Sha256Hex("manifest of " + archive))).ok());
  }
  for (const store::BlobInfo* b : {&full, &link_x, &link_y}) {
    Backdate(&h, b->digest, std::chrono::hours(2));
  }

  Result<GcReport> report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->errors.empty());
  for (const store::BlobInfo* b : {&full, &link_x, &link_y}) {
    EXPECT_FALSE(Stored(&h, b->digest)) << b->digest;
  }
  Result<std::vector<store::ChainLink>> links = db.ListChainLinks();
  ASSERT_TRUE(links.ok());
  EXPECT_TRUE(links->empty());
  EXPECT_EQ(db.FindPatch("", p).status().code(), Code::kNotFound);
}

TEST(GarbageCollectorTest, DeletedVersionFreesItsUnsharedBlobsOthersStillPull) {
  RegistryOptions o = Grace(std::chrono::milliseconds(0));
  o.storage.background = false;  // no full patch recorded behind the collection's back
  Harness h(o);
  const std::string a = testing::TinyArchive(1);
  const std::string b = testing::TinyArchive(2);
  ASSERT_EQ(h.PutManifest("org/model", "v1", h.ManifestFor("org/model", a)).status, 201);
  ASSERT_EQ(h.PutManifest("org/model", "v2", h.ManifestFor("org/model", b)).status, 201);
  // The same archive also in another repository: shared, so it stays.
  ASSERT_EQ(h.PutManifest("org/copy", "v1", h.ManifestFor("org/copy", a)).status, 201);
  const std::string ad = MakeDigest(Sha256Hex(a));
  const std::string bd = MakeDigest(Sha256Hex(b));
  // A patch between the two versions is computed and cached.
  Response patch = h.Call("GET", "/v2/org/model/blz/patch?from=" + ad + "&to=" + bd);
  const bool patches_served = patch.status == 200;

  Response v2 = h.Call("GET", "/v2/org/model/manifests/v2");
  const std::string v2_digest = v2.Get("Docker-Content-Digest").value_or("");
  ASSERT_EQ(h.Call("DELETE", "/v2/org/model/manifests/" + v2_digest).status, 202);

  auto report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GE(report->blobs_removed, 1u);
  EXPECT_FALSE(h.registry().storage().Stat(bd).ok());
  if (patches_served) {
    EXPECT_GE(report->derived_forgotten, 1u);
  }
  // Every other version still serves the same bytes.
  for (const std::string repo : {"org/model", "org/copy"}) {
    Response got = h.Call("GET", "/v2/" + repo + "/blobs/" + ad);
    ASSERT_EQ(got.status, 200) << repo << ": " << got.body;
    EXPECT_EQ(testing::BodyOf(got), a) << repo;
  }
  EXPECT_EQ(h.Call("GET", "/v2/org/model/manifests/v1").status, 200);
}

TEST(GarbageCollectorTest, PushesDuringRepeatedCollectionsLoseNothing) {
  // A short grace period: blobs published but not yet linked are protected by it alone, and
  // garbage made during the run (backdated) is really removed while pushes go on.
  Harness h(Grace(std::chrono::seconds(2)));
  constexpr int kPushes = 60;
  std::atomic<bool> done{false};
  std::atomic<int> collections{0};
  std::atomic<uint64_t> removed{0};
  std::thread collector([&] {
    while (!done.load()) {
      auto r = h.registry().CollectGarbage(/*dry_run=*/false);
      EXPECT_TRUE(r.ok());
      if (r.ok()) {
        removed += r->blobs_removed;
        EXPECT_TRUE(r->errors.empty()) << r->errors.front();
      }
      ++collections;
    }
  });
  std::vector<std::string> bodies;
  std::vector<std::string> garbage;
  for (int i = 0; i < kPushes; ++i) {
    bodies.push_back(PushImage(&h, "org/race", "t" + std::to_string(i), std::to_string(i)));
    const std::string g = h.PushBlob("org/race", "garbage " + std::to_string(i));
    EXPECT_EQ(h.Call("DELETE", "/v2/org/race/blobs/" + g).status, 202);
    Backdate(&h, g, std::chrono::hours(2));
    garbage.push_back(g);
  }
  done = true;
  collector.join();
  ASSERT_FALSE(HasFailure());
  EXPECT_GT(collections.load(), 1);
  // Everything pushed is complete: manifests, and every blob they reference, byte for byte.
  for (int i = 0; i < kPushes; ++i) {
    Response m = h.Call("GET", "/v2/org/race/manifests/t" + std::to_string(i));
    ASSERT_EQ(m.status, 200);
    EXPECT_EQ(m.body, bodies[i]);
    json parsed = json::parse(m.body);
    for (const json& d : {parsed["config"], parsed["layers"][0]}) {
      Response b = h.Call("GET", "/v2/org/race/blobs/" + d["digest"].get<std::string>());
      ASSERT_EQ(b.status, 200) << "push " << i << " lost " << d["digest"];
      EXPECT_EQ(MakeDigest(Sha256Hex(testing::BodyOf(b))), d["digest"]);
    }
  }
  // And the garbage is gone once a last collection has run.
  ASSERT_TRUE(h.registry().CollectGarbage(false).ok());
  for (const std::string& g : garbage) EXPECT_FALSE(Stored(&h, g)) << g;
}

TEST(GarbageCollectorTest, AManifestPushThatSucceedsNeverLosesABlobToACollection) {
  // No grace at all: blobs are unprotected until a manifest references them, so collections
  // race every manifest PUT's check of its blobs against its commit. A PUT may fail
  // (MANIFEST_BLOB_UNKNOWN: the blob was collected first); one that succeeds must leave every
  // blob it references in place.
  Harness h(Grace(std::chrono::milliseconds(0)));
  std::atomic<bool> done{false};
  std::thread collector([&] {
    while (!done.load()) EXPECT_TRUE(h.registry().CollectGarbage(false).ok());
  });
  std::vector<std::string> stored;
  for (int i = 0; i < 150; ++i) {
    const std::string config = "{\"i\":" + std::to_string(i) + "}";
    const std::string cd = h.PushBlob("org/put", config);
    Backdate(&h, cd, std::chrono::hours(2));
    json m = {{"schemaVersion", 2},
              {"mediaType", testing::kManifestType},
              {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                          {"digest", cd},
                          {"size", config.size()}}},
              {"layers", json::array()}};
    Response r = h.PutManifest("org/put", "t" + std::to_string(i), m.dump());
    if (r.status == 201) {
      stored.push_back(cd);
    } else {
      EXPECT_EQ(testing::ErrorCodeOf(r), "MANIFEST_BLOB_UNKNOWN") << r.body;
    }
  }
  done = true;
  collector.join();
  for (const std::string& cd : stored) {
    EXPECT_EQ(h.Call("HEAD", "/v2/org/put/blobs/" + cd).status, 200) << cd;
  }
  std::printf("%zu of 150 manifest PUTs succeeded\n", stored.size());
}

}  // namespace
}  // namespace blz::registry
