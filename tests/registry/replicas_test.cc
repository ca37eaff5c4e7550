// Two replicas of one registry (issue 25): two Registry instances with their own data
// directories sharing one SQLite metadata file (WAL) and one blob directory (Harness's replica
// constructor links them), each with its own in-process locks, job pool, caches and files, as
// two `blz serve` processes sharing a database would have. What they must
// share goes through the database: the token secret and revocations, computations (computed
// once, a dead holder's job taken over), and garbage collection (one at a time).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "registry/auth.h"
#include "registry/background_jobs.h"
#include "registry/registry.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::BodyOf;
using testing::Harness;
using testing::TinyArchive;

constexpr bool kAnon = false;  // Harness::Call's `auth`: do not add the admin token

Header Basic(const std::string& user, const std::string& password) {
  return {"Authorization", "Basic " + Base64Encode(user + ":" + password, /*url=*/false)};
}
Header Bearer(const std::string& token) { return {"Authorization", "Bearer " + token}; }
std::string D(const std::string& bytes) { return MakeDigest(Sha256Hex(bytes)); }

RegistryOptions Private() {
  RegistryOptions o;
  o.private_mode = true;
  return o;
}

// ---- tokens ----

TEST(ReplicasTest, TokensIssuedOnOneReplicaWorkOnTheOtherAndRevocationIsImmediate) {
  Harness a(Private());
  Harness b(a, Private());  // started after A: finds A's secret in the database
  ASSERT_EQ(a.PutManifest("org/m", "v1", a.ManifestFor("org/m", TinyArchive(1))).status, 201);

  Response created = a.Call("POST", "/v2/_blz/tokens", R"({"name":"ci","scope":"org/*:pull"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string ci = json::parse(created.body)["token"];
  // An access token minted by A (signed with the shared secret) is accepted by B.
  Response issued = a.Call("GET", std::string(kTokenEndpointPath) + "?scope=repository:org/m:pull",
                           "", {Basic("u", ci)}, kAnon);
  ASSERT_EQ(issued.status, 200) << issued.body;
  const std::string access = json::parse(issued.body)["token"];
  EXPECT_EQ(b.Call("GET", "/v2/org/m/manifests/v1", "", {Bearer(access)}, kAnon).status, 200);
  EXPECT_EQ(b.Call("GET", "/v2/org/m/tags/list", "", {Basic("u", ci)}, kAnon).status, 200);
  // And the other way round.
  Response from_b = b.Call("GET", std::string(kTokenEndpointPath) + "?scope=repository:org/m:pull",
                           "", {Basic("u", ci)}, kAnon);
  ASSERT_EQ(from_b.status, 200) << from_b.body;
  const std::string access_b = json::parse(from_b.body)["token"];
  EXPECT_EQ(a.Call("GET", "/v2/org/m/manifests/v1", "", {Bearer(access_b)}, kAnon).status, 200);

  // Revoked on A: refused on B at the next request (API token and the access tokens minted
  // from it).
  ASSERT_EQ(a.Call("DELETE", "/v2/_blz/tokens/ci").status, 204);
  EXPECT_EQ(b.Call("GET", "/v2/org/m/tags/list", "", {Basic("u", ci)}, kAnon).status, 401);
  EXPECT_EQ(b.Call("GET", "/v2/org/m/manifests/v1", "", {Bearer(access)}, kAnon).status, 401);
  EXPECT_EQ(b.Call("GET", "/v2/org/m/manifests/v1", "", {Bearer(access_b)}, kAnon).status, 401);
}

TEST(ReplicasTest, TheSecretLivesInTheDatabaseAndAnOldSecretFileIsImported) {
  blz::testing::TempDir tmp;
  const std::string data = tmp / "data";
  std::filesystem::create_directories(data);
  std::filesystem::permissions(data, std::filesystem::perms::owner_all);
  const std::string old_secret(64, 'a');  // what an older blz wrote
  blz::testing::WriteFileBytes(data + "/" + kAuthSecretFile, old_secret + "\n");
  {
    auto reg = Registry::Open(data, Private());
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    Result<std::string> stored = (*reg)->db().GetSetting(kAuthSecretSetting);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    EXPECT_EQ(*stored, old_secret);  // so access tokens issued before the upgrade stay valid
  }
  // From now on the database decides: a changed file is ignored.
  blz::testing::WriteFileBytes(data + "/" + kAuthSecretFile, std::string(64, 'b') + "\n");
  auto again = Registry::Open(data, Private());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*(*again)->db().GetSetting(kAuthSecretSetting), old_secret);
}

// ---- computations ----

// A patch function that counts its calls and, when `gate` is set, blocks the first call until
// released: long enough for the other replica to ask for the same patch.
struct SlowPatch {
  std::atomic<int> calls{0};
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool released = false;

  PatchFunction Function() {
    return [this](const std::string& base, const std::string&, const std::string& target,
                  const std::string&, const std::string& out) -> Status {
      if (calls.fetch_add(1) == 0) {
        std::unique_lock lock(mu);
        entered = true;
        cv.notify_all();
        cv.wait_for(lock, std::chrono::seconds(20), [&] { return released; });
      }
      auto b = Sha256FileHex(base);
      auto t = Sha256FileHex(target);
      if (!b.ok() || !t.ok()) return Internal("cannot hash inputs");
      return WriteFileAtomic(out, "PATCH " + *b + " -> " + *t);
    };
  }
  void WaitEntered() {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(20), [&] { return entered; });
  }
  void Release() {
    std::lock_guard lock(mu);
    released = true;
    cv.notify_all();
  }
};

// `lease`: short where a test needs a dead holder's lease to expire; long where a renewal that a
// loaded machine delays must not let the other replica take a live job over.
RegistryOptions Computing(SlowPatch* patch,
                          std::chrono::seconds lease = std::chrono::seconds(1)) {
  RegistryOptions o;
  o.create_patch = patch->Function();
  o.job_leases.lease = lease;
  o.job_leases.poll = std::chrono::milliseconds(20);
  return o;
}

class ReplicaPatchTest : public ::testing::Test {
 protected:
  void Push(Harness* h) {
    ASSERT_EQ(h->PutManifest("m", "v1", h->ManifestFor("m", base_)).status, 201);
    ASSERT_EQ(h->PutManifest("m", "v2", h->ManifestFor("m", target_)).status, 201);
  }
  std::string Target() const { return "/v2/m/blz/patch?from=" + D(base_) + "&to=" + D(target_); }
  std::string JobKey() const { return "patch:" + D(base_) + ">" + D(target_); }
  std::string Expected() const { return "PATCH " + Sha256Hex(base_) + " -> " + Sha256Hex(target_); }

  const std::string base_ = TinyArchive(10);
  const std::string target_ = TinyArchive(11);
};

TEST_F(ReplicaPatchTest, APatchRequestedOnBothReplicasIsComputedOnce) {
  SlowPatch patch;
  // A 1 s lease flaked here under CI load: A's renewal came late, B took the job over and
  // computed it too (attempts 2). Expiry is the next test's subject, not this one's.
  Harness a(Computing(&patch, std::chrono::seconds(30)));
  Harness b(a, Computing(&patch, std::chrono::seconds(30)));
  Push(&a);
  Response ra, rb;
  std::thread first([&] { ra = a.Call("GET", Target(), "", {}, kAnon); });
  patch.WaitEntered();  // A holds the job and is computing
  std::thread second([&] { rb = b.Call("GET", Target(), "", {}, kAnon); });
  // B either waits for A's lease or (without the lease) computes on its own.
  for (int i = 0; i < 2000 && b.registry().shared_jobs().waits() == 0 && patch.calls.load() < 2;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  patch.Release();
  first.join();
  second.join();
  ASSERT_EQ(ra.status, 200) << ra.body;
  ASSERT_EQ(rb.status, 200) << rb.body;
  EXPECT_EQ(BodyOf(ra), Expected());
  EXPECT_EQ(BodyOf(rb), Expected());
  EXPECT_EQ(patch.calls.load(), 1);
  EXPECT_EQ(a.registry().patches_computed() + b.registry().patches_computed(), 1u);
  EXPECT_EQ(rb.Get("Blz-Patch-Cache"), "hit");  // B served A's result
  Result<store::JobRecord> job = b.registry().db().GetJob(JobKey());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state, "done");
  EXPECT_EQ(job->attempts, 1);
}

TEST_F(ReplicaPatchTest, AJobWhoseHolderDiedIsTakenOverAndCompleted) {
  SlowPatch patch;
  patch.Release();  // no gate
  Harness a(Computing(&patch));
  Harness b(a, Computing(&patch));
  Push(&a);
  // A replica took the job and died (kill -9): its lease, never renewed, expires in 1 s.
  Result<store::JobAcquisition> dead = a.registry().db().TryAcquireJob(
      JobKey(), "dead-replica", int64_t(std::time(nullptr)), /*lease_seconds=*/1);
  ASSERT_TRUE(dead.ok()) << dead.status().ToString();
  ASSERT_EQ(dead->outcome, store::JobAcquire::kAcquired);

  Response r = b.Call("GET", Target(), "", {}, kAnon);  // waits for the lease, then takes over
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(BodyOf(r), Expected());
  EXPECT_EQ(patch.calls.load(), 1);
  EXPECT_EQ(b.registry().patches_computed(), 1u);
  Result<store::JobRecord> job = a.registry().db().GetJob(JobKey());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state, "done");
  EXPECT_NE(job->owner, "dead-replica");
  EXPECT_EQ(job->attempts, 2);  // the dead holder's, then the takeover
  // The dead replica's late result is refused: the job is B's.
  EXPECT_EQ(a.registry().db().FinishJob(JobKey(), "dead-replica", "x", std::time(nullptr)).code(),
            Code::kUnavailable);
}

// ---- garbage collection ----

TEST(ReplicasTest, OneGarbageCollectionAtATimeAcrossReplicas) {
  Harness a;
  Harness b(a, RegistryOptions{});
  // A's collection is running: it holds the "gc" lease.
  Result<std::unique_ptr<SharedJobs::Hold>> running = a.registry().shared_jobs().TryHold("gc");
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  Result<GcReport> refused = b.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kUnavailable);
  EXPECT_NE(refused.status().message().find((*running)->owner()), std::string::npos)
      << refused.status().message();
  Response post = b.Call("POST", "/v2/_blz/gc");
  EXPECT_EQ(post.status, 503) << post.body;
  // A dry run only reads: it needs no lease.
  EXPECT_TRUE(b.registry().CollectGarbage(/*dry_run=*/true).ok());

  (*running)->Finish("done");
  Result<GcReport> ran = b.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  Result<store::JobRecord> gc = a.registry().db().GetJob("gc");
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->state, "done");
  EXPECT_EQ(gc->attempts, 2);
}

TEST(ReplicasTest, ABlobPushedOnAnotherReplicaDuringACollectionIsKept) {
  RegistryOptions o;
  o.gc_grace = std::chrono::milliseconds(0);  // every unreferenced blob is garbage at once
  Harness a(o);
  Harness b(a, o);
  const std::string bytes = "layer bytes pushed twice";
  const std::string digest = a.PushBlob("m", bytes);
  ASSERT_EQ(a.Call("DELETE", "/v2/m/blobs/" + digest).status, 202);  // now garbage
  // A's collection marks; before it sweeps, B's client pushes the same blob again (its bytes
  // are already stored, so B only touches and links them). A's in-process blob locks cannot
  // see B's push: only the database can order them.
  KeyedMutex a_locks;
  GcOptions gc;
  gc.grace = o.gc_grace;
  gc.after_mark = [&] { EXPECT_EQ(b.PushBlob("m", bytes), digest); };
  Result<GcReport> report = registry::CollectGarbage(a.registry().blobs(), &a.registry().db(),
                                                     &a_locks, gc);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->blobs_removed, 0u);
  // B answered 201 for the push: the blob must stay readable there.
  Response head = b.Call("HEAD", "/v2/m/blobs/" + digest);
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(b.registry().blobs().Contains(digest));
}

}  // namespace
}  // namespace blz::registry
