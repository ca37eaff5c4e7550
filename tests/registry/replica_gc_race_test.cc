// Garbage collection on one replica against a manifest PUT on another (issue 25): within one
// process the blob locks (registry/keyed_mutex.h) keep a collector from removing a blob
// between a PUT's check of it and the PUT's commit; across replicas the metadata store's
// conditional write does (MetadataDb::PutManifest fails when a referenced blob's row is gone).
// Two Registry instances on one PostgreSQL database and one blob store; the PUT is held
// between its checks and its transaction with the repository's advisory lock, taken from a
// third connection, while the other replica collects.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "store/fs/fs_blob_store.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::ErrorCodeOf;
using testing::Harness;

RegistryOptions NoGrace() {
  RegistryOptions o;
  o.gc_grace = std::chrono::milliseconds(0);
  o.storage.background = false;
  return o;
}

// Older than any cutoff: fs by its mtime; on S3 (Last-Modified, whole seconds) by waiting.
void Age(Harness* h, const std::string& digest) {
  if (testing::TestStorageIsS3()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    return;
  }
  auto path = dynamic_cast<store::FsBlobStore&>(h->registry().blobs().unwrapped()).PathFor(digest);
  ASSERT_TRUE(path.ok());
  std::error_code ec;
  std::filesystem::last_write_time(
      *path, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2), ec);
}

TEST(ReplicaGcRaceTest, ACollectionOnOneReplicaCannotRemoveABlobAPutOnAnotherCommits) {
  const std::string skip = testing::PostgresSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  RegistryOptions options = NoGrace();
  options.metadata_url = testing::FreshTestDatabase();
  ASSERT_FALSE(options.metadata_url.empty());
  Harness a(options);
  Harness b(a, NoGrace());

  const std::string config = R"({"architecture":"amd64","os":"linux"})";
  const std::string cd = a.PushBlob("org/m", config);
  ASSERT_NO_FATAL_FAILURE(Age(&a, cd));
  const json manifest = {{"schemaVersion", 2},
                         {"mediaType", testing::kManifestType},
                         {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                                     {"digest", cd},
                                     {"size", config.size()}}},
                         {"layers", json::array()}};

  // Holds the repository's advisory lock, as another PUT of org/m would: B's PUT passes its
  // checks, then waits at the start of its transaction.
  auto holder = store::sql::OpenDatabase(a.metadata_url());
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  auto tx = store::sql::Transaction::Begin(&*holder);
  ASSERT_TRUE(tx.ok()) << tx.status().ToString();
  ASSERT_TRUE(tx->LockKey("repository:org/m").ok());

  Response put;
  std::thread pushing([&] { put = b.PutManifest("org/m", "v1", manifest.dump()); });
  auto watcher = store::sql::OpenDatabase(a.metadata_url());
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  bool waiting = false;
  for (int i = 0; i < 2000 && !waiting; ++i) {
    auto st = watcher->Prepare(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    auto row = st->Step();
    ASSERT_TRUE(row.ok() && *row);
    waiting = st->ColumnInt(0) > 0;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(waiting) << "B's PUT never reached its transaction";

  // Meanwhile replica A collects: nothing references the config yet, so it goes.
  Result<GcReport> report = a.registry().CollectGarbage(false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->blobs_removed, 1u);
  EXPECT_FALSE(a.registry().blobs().Contains(cd));

  ASSERT_TRUE(tx->Commit().ok());
  pushing.join();
  // The PUT learns that its blob is gone; before, it answered 201 for a manifest whose config
  // nobody could fetch.
  EXPECT_EQ(put.status, 400) << put.body;
  EXPECT_EQ(ErrorCodeOf(put), "MANIFEST_BLOB_UNKNOWN") << put.body;
  EXPECT_EQ(b.Call("GET", "/v2/org/m/manifests/v1").status, 404);
  if (put.status == 201) {
    EXPECT_EQ(b.Call("HEAD", "/v2/org/m/blobs/" + cd).status, 200) << "a tag points at a lost blob";
  }
  // Pushed again, the PUT goes through.
  a.PushBlob("org/m", config);
  EXPECT_EQ(b.PutManifest("org/m", "v1", manifest.dump()).status, 201);
}

// A cross-repository mount on one replica of a blob another replica's collection removed after
// the mount's checks is no mount (the client uploads the blob), not a link to nothing.
TEST(ReplicaGcRaceTest, ALinkToABlobWhoseRowIsGoneFails) {
  Harness a(NoGrace());  // either engine
  const std::string d = a.PushBlob("org/src", "some bytes");
  {
    auto db = a.OpenMetadataSql();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE(db->Exec("DELETE FROM blobs").ok());  // what a collection's commit leaves
  }
  Status linked = a.registry().db().LinkBlob("org/dst", d);
  EXPECT_EQ(linked.code(), Code::kNotFound) << linked.ToString();
  Result<bool> there = a.registry().db().BlobLinked("org/dst", d);
  ASSERT_TRUE(there.ok());
  EXPECT_FALSE(*there);
}

}  // namespace
}  // namespace blz::registry
