// MetadataDb's shared state for replicas (store/metadata_db_replicas.cc): two MetadataDb
// connections on one SQLite file stand for two `blz serve` replicas.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/digest.h"
#include "store/metadata_db.h"
#include "store/postgres/connection.h"
#include "tests/store/postgres/postgres_fixture.h"
#include "tests/test_util.h"

namespace blz::store {
namespace {

std::string D(std::string_view seed) { return MakeDigest(Sha256Hex(seed)); }

class ReplicasDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* db : {&a_, &b_}) {
      auto opened = MetadataDb::Open(tmp_ / "blz.db");
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      *db = std::move(*opened);
    }
  }
  testing::TempDir tmp_;
  std::unique_ptr<MetadataDb> a_;  // replica A's connection
  std::unique_ptr<MetadataDb> b_;  // replica B's, same file
};

TEST_F(ReplicasDbTest, FirstSettingWinsOnEveryConnection) {
  EXPECT_EQ(a_->GetSetting("auth_secret").status().code(), Code::kNotFound);
  Result<std::string> first = a_->GetOrSetSetting("auth_secret", "from-a");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, "from-a");
  Result<std::string> second = b_->GetOrSetSetting("auth_secret", "from-b");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, "from-a");
  EXPECT_EQ(*b_->GetSetting("auth_secret"), "from-a");
}

TEST_F(ReplicasDbTest, RacingSettersAgree) {
  std::vector<std::string> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      MetadataDb* db = (i % 2 == 0 ? a_ : b_).get();
      Result<std::string> v = db->GetOrSetSetting("k", "value-" + std::to_string(i));
      got[i] = v.ok() ? *v : v.status().ToString();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(std::set<std::string>(got.begin(), got.end()).size(), 1u) << got[0] << " " << got[1];
  EXPECT_EQ(got[0].rfind("value-", 0), 0u) << got[0];
}

TEST_F(ReplicasDbTest, LeaseAcquireHeldFinish) {
  Result<JobAcquisition> a = a_->TryAcquireJob("patch:x>y", "A", 1000, 30);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->outcome, JobAcquire::kAcquired);
  EXPECT_EQ(a->job.owner, "A");
  EXPECT_EQ(a->job.lease_expires, 1030);
  EXPECT_EQ(a->job.attempts, 1);

  Result<JobAcquisition> b = b_->TryAcquireJob("patch:x>y", "B", 1010, 30);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->outcome, JobAcquire::kHeld);
  EXPECT_EQ(b->job.owner, "A");

  ASSERT_TRUE(a_->RenewJobLease("patch:x>y", "A", 1020, 30).ok());
  EXPECT_EQ(b_->GetJob("patch:x>y")->lease_expires, 1050);
  // B is not the holder: it may neither renew nor finish.
  EXPECT_EQ(b_->RenewJobLease("patch:x>y", "B", 1020, 30).code(), Code::kUnavailable);
  EXPECT_EQ(b_->FinishJob("patch:x>y", "B", "sha256:b", 1020).code(), Code::kUnavailable);

  ASSERT_TRUE(a_->FinishJob("patch:x>y", "A", "sha256:result", 1025).ok());
  b = b_->TryAcquireJob("patch:x>y", "B", 1030, 30);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->outcome, JobAcquire::kDone);
  EXPECT_EQ(b->job.result, "sha256:result");
  EXPECT_EQ(b->job.attempts, 1);
  // Redone on request (the result went missing): B takes it.
  b = b_->TryAcquireJob("patch:x>y", "B", 1030, 30, /*redo_done=*/true);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->outcome, JobAcquire::kAcquired);
  EXPECT_EQ(b->job.owner, "B");
  EXPECT_EQ(b->job.result, "");
  EXPECT_EQ(b->job.attempts, 2);
}

TEST_F(ReplicasDbTest, ExpiredLeaseIsTakenOverAndTheDeadOwnerCannotFinish) {
  ASSERT_EQ(a_->TryAcquireJob("stats:z", "A", 1000, 30)->outcome, JobAcquire::kAcquired);
  // Still live one second before expiry.
  EXPECT_EQ(b_->TryAcquireJob("stats:z", "B", 1029, 30)->outcome, JobAcquire::kHeld);
  // A died: at its expiry B takes over.
  Result<JobAcquisition> b = b_->TryAcquireJob("stats:z", "B", 1030, 30);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->outcome, JobAcquire::kAcquired);
  EXPECT_EQ(b->job.owner, "B");
  EXPECT_EQ(b->job.attempts, 2);
  // A comes back late: its renewal and result are refused, B's stand.
  EXPECT_EQ(a_->RenewJobLease("stats:z", "A", 1031, 30).code(), Code::kUnavailable);
  EXPECT_EQ(a_->FinishJob("stats:z", "A", "sha256:late", 1031).code(), Code::kUnavailable);
  ASSERT_TRUE(b_->FinishJob("stats:z", "B", "sha256:b", 1032).ok());
  EXPECT_EQ(a_->GetJob("stats:z")->result, "sha256:b");
}

TEST_F(ReplicasDbTest, FailedJobIsRetriedByTheNextCaller) {
  ASSERT_EQ(a_->TryAcquireJob("diff:p", "A", 1000, 30)->outcome, JobAcquire::kAcquired);
  ASSERT_TRUE(a_->FailJob("diff:p", "A", "out of memory", 1001).ok());
  Result<JobRecord> row = b_->GetJob("diff:p");
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->state, "failed");
  EXPECT_EQ(row->error, "out of memory");
  Result<JobAcquisition> b = b_->TryAcquireJob("diff:p", "B", 1002, 30);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->outcome, JobAcquire::kAcquired);
  EXPECT_EQ(b->job.error, "");
  EXPECT_EQ(b->job.attempts, 2);
  EXPECT_EQ(b_->GetJob("nothing").status().code(), Code::kNotFound);
}

TEST_F(ReplicasDbTest, RacingAcquirersGetOneLease) {
  std::atomic<int> acquired{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      MetadataDb* db = (i % 2 == 0 ? a_ : b_).get();
      Result<JobAcquisition> r = db->TryAcquireJob("race", "owner-" + std::to_string(i), 1000, 30);
      if (r.ok() && r->outcome == JobAcquire::kAcquired) acquired.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(acquired.load(), 1);
}

// ---- garbage collection's delete ----

TEST_F(ReplicasDbTest, DeleteOfAnUntouchedUnreferencedBlob) {
  const std::string d = D("old");
  ASSERT_TRUE(a_->RecordBlob(d, 10).ok());  // touched in epoch 0
  int removes = 0;
  uint64_t freed = 0;
  auto remove = [&]() -> Result<uint64_t> { ++removes; return uint64_t(10); };
  const int64_t later = int64_t(std::time(nullptr)) + 100;  // every link is old
  // A collection of epoch 0 (marked before the record): kept, nothing removed.
  Result<BlobDeletion> r = a_->DeleteBlobUnlessTouched(d, later, 0, "gc-A", later, remove, &freed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, BlobDeletion::kKept);
  EXPECT_EQ(removes, 0);
  // A collection that marks after the record and the link: deleted; its link and row go.
  ASSERT_TRUE(a_->LinkBlob("repo", d).ok());
  Result<int64_t> mark = b_->StartGcMark();
  ASSERT_TRUE(mark.ok()) << mark.status().ToString();
  EXPECT_EQ(*mark, 1);
  r = b_->DeleteBlobUnlessTouched(d, later, *mark, "gc-B", later, remove, &freed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, BlobDeletion::kDeleted);
  EXPECT_EQ(removes, 1);
  EXPECT_EQ(freed, 10u);
  EXPECT_FALSE(*a_->BlobLinked("repo", d));
  EXPECT_TRUE(a_->ListGcDeletions()->empty());
  EXPECT_EQ(*a_->StartGcMark(), 2);  // one counter for every connection
}

TEST_F(ReplicasDbTest, TouchByAnotherReplicaAfterMarkingKeepsTheBlob) {
  const std::string d = D("retouched");
  ASSERT_TRUE(a_->RecordBlob(d, 10).ok());
  Result<int64_t> mark = a_->StartGcMark();  // A's collection marks
  ASSERT_TRUE(mark.ok());
  ASSERT_TRUE(b_->TouchBlob(d).ok());  // B's push relies on the blob, after the marking
  const int64_t later = int64_t(std::time(nullptr)) + 100;
  int removes = 0;
  uint64_t freed = 0;
  Result<BlobDeletion> r = a_->DeleteBlobUnlessTouched(
      d, later, *mark, "gc-A", later,
      [&]() -> Result<uint64_t> { ++removes; return uint64_t(10); }, &freed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, BlobDeletion::kKept);
  EXPECT_EQ(removes, 0);
  EXPECT_TRUE(a_->ListGcDeletions()->empty());
}

TEST_F(ReplicasDbTest, ReferencedBlobIsKeptAndTooYoungIsKept) {
  const std::string d = D("referenced");
  ManifestPut put;
  put.repository = "repo";
  put.digest = D("manifest");
  put.media_type = "application/vnd.oci.image.manifest.v1+json";
  put.content = "{}";
  put.blobs = {d};
  ASSERT_TRUE(a_->RecordBlob(d, 10).ok());
  ASSERT_TRUE(b_->PutManifest(put).ok());
  const int64_t mark = *a_->StartGcMark();
  const int64_t later = int64_t(std::time(nullptr)) + 100;
  uint64_t freed = 0;
  int removes = 0;
  auto remove = [&]() -> Result<uint64_t> { ++removes; return uint64_t(10); };
  EXPECT_EQ(*a_->DeleteBlobUnlessTouched(d, later, mark, "gc-A", later, remove, &freed),
            BlobDeletion::kKept);
  EXPECT_EQ(removes, 0);
  const std::string y = D("young file");
  EXPECT_EQ(*a_->DeleteBlobUnlessTouched(
                y, later, mark, "gc-A", later,
                []() -> Result<uint64_t> { return Unavailable("written 1 s ago"); }, &freed),
            BlobDeletion::kTooYoung);
  EXPECT_TRUE(a_->ListGcDeletions()->empty());
}

TEST_F(ReplicasDbTest, FailedDeleteStaysRecorded) {
  const std::string d = D("stuck");
  ASSERT_TRUE(a_->RecordBlob(d, 10).ok());
  const int64_t mark = *a_->StartGcMark();
  const int64_t later = int64_t(std::time(nullptr)) + 100;
  uint64_t freed = 0;
  Result<BlobDeletion> r = a_->DeleteBlobUnlessTouched(
      d, later, mark, "gc-A", later,
      []() -> Result<uint64_t> { return IOError("unlink blobs/sha256/..: permission denied"); },
      &freed);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIOError);
  Result<std::vector<GcDeletionRecord>> recorded = b_->ListGcDeletions();
  ASSERT_TRUE(recorded.ok());
  ASSERT_EQ(recorded->size(), 1u);
  EXPECT_EQ((*recorded)[0].digest, d);
  EXPECT_EQ((*recorded)[0].state, "failed");
  EXPECT_EQ((*recorded)[0].collector, "gc-A");
  EXPECT_NE((*recorded)[0].error.find("permission denied"), std::string::npos);
  // The blob's row was rolled back with the failed delete: the next collection retries.
  const int64_t next = *b_->StartGcMark();
  r = b_->DeleteBlobUnlessTouched(d, later, next, "gc-B", later + 1,
                                  []() -> Result<uint64_t> { return uint64_t(10); }, &freed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, BlobDeletion::kDeleted);
  EXPECT_TRUE(a_->ListGcDeletions()->empty());
}

// The touch race on PostgreSQL (READ COMMITTED): a touch while a collection's epoch increment
// is uncommitted must wait for it and write the new epoch. With a plain subquery the touch's
// statement read the old epoch from its snapshot, so the collection that had just marked saw
// the blob as untouched and could delete it under a push.
class GcEpochPostgresTest : public blz::testing::PostgresTest {};

TEST_F(GcEpochPostgresTest, TouchDuringAnUncommittedMarkWritesTheNewEpoch) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  auto opened = MetadataDb::Open(url);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<MetadataDb> replica = std::move(*opened);
  const std::string d = D("touched-while-marking");
  ASSERT_TRUE(replica->RecordBlob(d, 10).ok());
  ASSERT_TRUE(replica->StartGcMark().ok());  // epoch 1

  // A collector's StartGcMark, held open: the epoch row is updated to 2, not yet committed.
  auto collector = postgres::Connection::Open(url);
  ASSERT_TRUE(collector.ok()) << collector.status().ToString();
  ASSERT_TRUE(collector->Exec("BEGIN").ok());
  ASSERT_TRUE(collector->Exec("UPDATE settings SET value = '2' WHERE name = 'gc_epoch'").ok());

  std::atomic<bool> done{false};
  Status touched;
  std::thread toucher([&] {
    touched = replica->TouchBlob(d);
    done = true;
  });
  // Wait (bounded) until the touch either finished or waits for a lock.
  auto watcher = postgres::Connection::Open(url);
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  for (int i = 0; i < 200 && !done; ++i) {
    auto rows = watcher->Query(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'");
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    if (*rows->Int(0, 0) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(collector->Exec("COMMIT").ok());
  toucher.join();
  ASSERT_TRUE(touched.ok()) << touched.ToString();
  auto rows = watcher->Query("SELECT touched FROM blobs WHERE digest = $1",
                             {postgres::Param::Text(d)});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1);
  EXPECT_EQ(*rows->Int(0, 0), 2) << "the touch wrote the epoch the collection had just left";

  // And so the collection that marked epoch 2 keeps the blob.
  const int64_t later = int64_t(std::time(nullptr)) + 100;
  uint64_t freed = 0;
  Result<BlobDeletion> r = replica->DeleteBlobUnlessTouched(
      d, later, 2, "gc-A", later, [&]() -> Result<uint64_t> { return uint64_t(10); }, &freed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, BlobDeletion::kKept);
}

// The first touch ever (no epoch row yet) on PostgreSQL writes 0, as on SQLite, and a
// collection's first mark after it is 1.
TEST_F(GcEpochPostgresTest, TouchBeforeAnyCollectionWritesEpochZero) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  auto opened = MetadataDb::Open(url);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const std::string d = D("first-touch");
  ASSERT_TRUE((*opened)->RecordBlob(d, 10).ok());
  ASSERT_TRUE((*opened)->TouchBlob(d).ok());
  ASSERT_TRUE((*opened)->LinkBlob("team/m", d).ok());
  Result<int64_t> mark = (*opened)->StartGcMark();
  ASSERT_TRUE(mark.ok()) << mark.status().ToString();
  EXPECT_EQ(*mark, 1);
}

// Raw archive reads (table raw_archive_reads, migration 0013): a read recorded by one replica
// keeps another's drop away until its time; a read during a drop is refused until the drop
// ends; two drops exclude each other; a later, shorter mark never shortens an earlier one.
void CheckRawArchiveReads(MetadataDb& a, MetadataDb& b) {
  const std::string d = D("raw archive");
  Result<bool> marked = b.MarkRawArchiveServed(d, 1000, 2000);
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  EXPECT_TRUE(*marked);
  Result<std::optional<int64_t>> begun = a.BeginRawArchiveDrop(d, 1000, 31000);
  ASSERT_TRUE(begun.ok()) << begun.status().ToString();
  ASSERT_TRUE(begun->has_value()) << "dropped while B reads it";
  EXPECT_EQ(**begun, 2000);

  begun = a.BeginRawArchiveDrop(d, 2000, 32000);
  ASSERT_TRUE(begun.ok());
  EXPECT_FALSE(begun->has_value()) << "B's read is over";
  EXPECT_FALSE(*b.MarkRawArchiveServed(d, 2500, 4500)) << "a read during the drop";
  Result<std::optional<int64_t>> second = b.BeginRawArchiveDrop(d, 2500, 32500);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ(**second, 32000);
  ASSERT_TRUE(a.EndRawArchiveDrop(d, 32000, 3000).ok());

  EXPECT_TRUE(*b.MarkRawArchiveServed(d, 3000, 5000));
  EXPECT_TRUE(*a.MarkRawArchiveServed(d, 3000, 4000));
  begun = a.BeginRawArchiveDrop(d, 4500, 34500);
  ASSERT_TRUE(begun.ok() && begun->has_value());
  EXPECT_EQ(**begun, 5000);
  // Another digest is not affected.
  begun = a.BeginRawArchiveDrop(D("other"), 4500, 34500);
  ASSERT_TRUE(begun.ok());
  EXPECT_FALSE(begun->has_value());
}

TEST_F(ReplicasDbTest, RawArchiveReadsKeepDropsAwayAcrossReplicas) {
  CheckRawArchiveReads(*a_, *b_);
}

TEST_F(GcEpochPostgresTest, RawArchiveReadsKeepDropsAwayAcrossReplicas) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  auto a = MetadataDb::Open(url);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = MetadataDb::Open(url);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  CheckRawArchiveReads(**a, **b);
}

}  // namespace
}  // namespace blz::store
