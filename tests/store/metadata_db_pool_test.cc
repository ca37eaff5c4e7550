// MetadataDb's connection pool on PostgreSQL (store/metadata_db.h, "Thread safety";
// store/sql_pool.h): calls of one process run on several connections at once, correctly, with
// a bounded wait, and a connection whose backend was killed is replaced.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/digest.h"
#include "store/metadata_db.h"
#include "store/postgres/connection.h"
#include "store/sql.h"
#include "tests/store/postgres/postgres_fixture.h"

namespace blz::store {
namespace {

std::string D(std::string_view seed) { return MakeDigest(Sha256Hex(seed)); }

class MetadataPoolTest : public testing::PostgresTest {
 protected:
  // A MetadataDb on a fresh database; `params` appended to its URL after '?'.
  std::unique_ptr<MetadataDb> OpenDb(const std::string& params) {
    url_ = FreshDatabase();
    EXPECT_FALSE(url_.empty());
    auto db = MetadataDb::Open(url_ + "?" + params);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(*db) : nullptr;
  }

  // Runs `during` on another thread while one call of `db` holds a connection (the remove()
  // of a DeleteBlobUnlessTouched runs inside that call's transaction). Returns what `during`
  // returned, or nullopt when it had not returned after 30 s (it waited for the held call).
  std::optional<Status> WhileOneCallHoldsAConnection(MetadataDb* db,
                                                     std::function<Status()> during) {
    std::optional<Status> got;
    std::thread other;
    uint64_t freed = 0;
    auto remove = [&]() -> Result<uint64_t> {
      std::packaged_task<Status()> task(during);
      std::future<Status> done = task.get_future();
      other = std::thread(std::move(task));
      if (done.wait_for(std::chrono::seconds(30)) == std::future_status::ready) {
        got = done.get();
      }
      return uint64_t(7);
    };
    Result<BlobDeletion> deleted =
        db->DeleteBlobUnlessTouched(D("held"), 0, 0, "test", 1, remove, &freed);
    EXPECT_TRUE(deleted.ok()) << deleted.status().ToString();
    if (other.joinable()) other.join();  // the held call has ended: `during` can finish
    return got;
  }

  // Terminates every backend whose application_name is `app` and waits until those are gone
  // (the pool may have opened new ones meanwhile).
  void KillBackends(const std::string& app) {
    auto admin = postgres::Connection::Open(server().url());
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    auto killed = admin->Query(
        "WITH p AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE application_name = $1) "
        "SELECT string_agg(pid::text, ',') FROM p WHERE pg_terminate_backend(pid)",
        {postgres::Param::Text(app)});
    ASSERT_TRUE(killed.ok()) << killed.status().ToString();
    const std::string pids = killed->Text(0, 0);
    if (pids.empty()) return;
    for (int i = 0; i < 500; ++i) {
      auto left = admin->Query(
          "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(('{' || $1 || '}')::int[])",
          {postgres::Param::Text(pids)});
      ASSERT_TRUE(left.ok()) << left.status().ToString();
      if (*left->Int(0, 0) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "backends " << pids << " of " << app << " still alive";
  }

  // Pushes manifest `i` of `repo` (tagged "t<i>") and reads it back by tag and digest.
  static Status PutAndRead(MetadataDb* db, const std::string& repo, int i) {
    ManifestPut put;
    put.repository = repo;
    put.content = "{\"n\":" + std::to_string(i) + ",\"repo\":\"" + repo + "\"}";
    put.digest = D(put.content);
    put.media_type = "application/vnd.oci.image.manifest.v1+json";
    put.tag = "t" + std::to_string(i);
    put.blobs = {D("layer-" + std::to_string(i))};
    // A link needs the blob's row (a blob collected meanwhile fails the PUT).
    BLZ_RETURN_IF_ERROR(db->RecordBlob(put.blobs[0], 1));
    BLZ_RETURN_IF_ERROR(db->PutManifest(put));
    BLZ_ASSIGN_OR_RETURN(std::string digest, db->ResolveTag(repo, put.tag));
    if (digest != put.digest) return Internal(repo + ":" + put.tag + " -> " + digest);
    BLZ_ASSIGN_OR_RETURN(ManifestRecord m, db->GetManifest(repo, digest));
    if (m.content != put.content) return Internal(repo + "@" + digest + ": other content");
    BLZ_ASSIGN_OR_RETURN(bool linked, db->BlobLinked(repo, put.blobs[0]));
    if (!linked) return Internal(repo + ": " + put.blobs[0] + " not linked");
    return Status::Ok();
  }

  std::string url_;
};

// With the old single connection behind a mutex, the second call waits for the first, which
// waits for the second: this reports nullopt (after 30 s) instead of the tag.
TEST_F(MetadataPoolTest, CallsRunInParallelOnSeveralConnections) {
  auto db = OpenDb("pool=4");
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(PutAndRead(db.get(), "r", 1).ok());
  std::optional<Status> during = WhileOneCallHoldsAConnection(db.get(), [&]() -> Status {
    return PutAndRead(db.get(), "r", 2);
  });
  ASSERT_TRUE(during.has_value()) << "a call waited for another call's connection";
  EXPECT_TRUE(during->ok()) << during->ToString();
  EXPECT_EQ(db->max_connections(), 4u);
  EXPECT_EQ(db->open_connections(), 2u);
}

TEST_F(MetadataPoolTest, WaitingForAFreeConnectionIsBounded) {
  auto db = OpenDb("pool=1&pool_timeout=1");
  ASSERT_NE(db, nullptr);
  std::optional<Status> during = WhileOneCallHoldsAConnection(db.get(), [&]() -> Status {
    return db->GetManifest("r", D("m")).status();
  });
  ASSERT_TRUE(during.has_value()) << "the wait for the one connection was not bounded";
  EXPECT_EQ(during->code(), Code::kUnavailable) << during->ToString();
  EXPECT_NE(during->message().find("pool"), std::string::npos) << during->ToString();
  EXPECT_EQ(db->open_connections(), 1u);
  EXPECT_TRUE(db->Ping().ok());  // the connection came back
}

TEST_F(MetadataPoolTest, BadPoolParametersAreRefused) {
  for (const char* params : {"pool=0", "pool=abc", "pool=", "pool_timeout=-1", "pool=1001"}) {
    auto db = MetadataDb::Open(FreshDatabase() + "?" + params);
    ASSERT_FALSE(db.ok()) << params;
    EXPECT_EQ(db.status().code(), Code::kInvalidArgument) << db.status().ToString();
  }
  // libpq's own parameters still reach libpq.
  auto db = MetadataDb::Open(FreshDatabase() + "?application_name=x&pool=2&connect_timeout=5");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ((*db)->max_connections(), 2u);
  // So do the other openers of a metadata URL (blz admin migrate's sql::OpenDatabase).
  auto plain = sql::OpenDatabase(FreshDatabase() + "?pool=3&pool_timeout=2");
  EXPECT_TRUE(plain.ok()) << plain.status().ToString();
}

// Many threads push and read through one MetadataDb with fewer connections than threads;
// capped upload sessions (a counted insert under an advisory lock) never exceed their cap.
TEST_F(MetadataPoolTest, ManyThreadsReadAndWriteCorrectly) {
  auto db = OpenDb("pool=4");
  ASSERT_NE(db, nullptr);
  constexpr int kThreads = 12;
  constexpr int kRounds = 15;
  std::vector<std::string> errors(kThreads);
  std::atomic<int> uploads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds && errors[t].empty(); ++i) {
        // Each thread its own repository, and one repository every thread shares.
        Status s = PutAndRead(db.get(), "repo" + std::to_string(t), i);
        if (s.ok()) s = PutAndRead(db.get(), "shared", t * kRounds + i);
        if (s.ok()) {
          Status up = db->CreateUpload("u" + std::to_string(t) + "-" + std::to_string(i),
                                       "capped", "", 0, 10);
          if (up.ok()) {
            ++uploads;
          } else if (up.code() != Code::kTooLarge) {
            s = up;
          }
        }
        if (!s.ok()) errors[t] = s.ToString();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  EXPECT_EQ(uploads.load(), 10);
  auto tags = db->ListTags("shared", std::nullopt, "");
  ASSERT_TRUE(tags.ok()) << tags.status().ToString();
  EXPECT_EQ(tags->items.size(), size_t(kThreads * kRounds));
  EXPECT_LE(db->open_connections(), 4u);
}

// A killed backend is replaced: after every pooled backend was terminated while idle, every
// call succeeds (the old code failed the first statement on each dead connection); killed
// while busy, calls fail with kUnavailable only, and the pool works again afterwards.
TEST_F(MetadataPoolTest, KilledConnectionsAreReplaced) {
  auto db = OpenDb("pool=3&application_name=blz_pool_kill");
  ASSERT_NE(db, nullptr);
  auto round = [&](int threads, int base, bool strict) {
    std::vector<std::string> errors(static_cast<size_t>(threads));
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = 0; i < 6; ++i) {
          // A read first (PutManifest alone would retry a transaction that lost its
          // connection), of the tag round 0 pushed.
          Status s = base == 0 ? Status::Ok()
                               : db->ResolveTag("r" + std::to_string(t), "t0").status();
          if (s.ok()) s = PutAndRead(db.get(), "r" + std::to_string(t), base + i);
          if (!s.ok() && (strict || s.code() != Code::kUnavailable)) {
            errors[size_t(t)] = s.ToString();
          }
        }
      });
    }
    for (std::thread& w : workers) w.join();
    for (int t = 0; t < threads; ++t) EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
  };
  round(6, 0, true);
  const size_t open = db->open_connections();
  ASSERT_GE(open, 1u);
  ASSERT_NO_FATAL_FAILURE(KillBackends("blz_pool_kill"));
  round(6, 100, true);  // idle connections were killed: none of this may fail
  EXPECT_EQ(db->open_connections(), open);
  EXPECT_LE(open, 3u);

  // Killed in the middle of calls.
  std::atomic<bool> stop{false};
  std::thread killer([&] {
    for (int k = 0; k < 5 && !stop; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      KillBackends("blz_pool_kill");
    }
  });
  round(6, 200, false);
  stop = true;
  killer.join();
  round(6, 300, true);
  EXPECT_TRUE(db->Ping().ok());
}

// The server restarts under a pool: calls fail kUnavailable while it is down (none hangs, no
// connection is lost for good), and every connection works again once it is back.
TEST_F(MetadataPoolTest, ServerRestartIsSurvived) {
  auto db = OpenDb("pool=3");
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(PutAndRead(db.get(), "r", 0).ok());
  std::optional<Status> during = WhileOneCallHoldsAConnection(db.get(), [&]() -> Status {
    return PutAndRead(db.get(), "r", 1);  // a second connection is open
  });
  ASSERT_TRUE(during.has_value() && during->ok());
  ASSERT_TRUE(server().Halt().ok());
  Status down = db->ResolveTag("r", "t0").status();
  EXPECT_EQ(down.code(), Code::kUnavailable) << down.ToString();
  EXPECT_EQ(db->Ping().code(), Code::kUnavailable);
  ASSERT_TRUE(server().Resume().ok());
  std::vector<std::thread> threads;
  std::vector<std::string> errors(3);
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      Status s = PutAndRead(db.get(), "after" + std::to_string(t), 0);
      if (s.ok()) s = db->ResolveTag("r", "t1").status();
      if (!s.ok()) errors[size_t(t)] = s.ToString();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 3; ++t) EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
  EXPECT_LE(db->open_connections(), 3u);
}

}  // namespace
}  // namespace blz::store
