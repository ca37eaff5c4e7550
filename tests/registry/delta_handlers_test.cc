// GET /v2/<name>/blz/delta and /blz/delta-report (registry/delta_handlers.cc,
// docs/registry-api.md "Lossy deltas"): parameter checks, version resolution, caching, headers
// vs the sidecar, ?async=1 and garbage collection, with a stand-in DeltaFunction (counted and
// controllable). The real one (LossyDeltaFunction): tests/registry/delta_real_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "patcher/lossy/lossy_delta.h"
#include "registry/delta_function.h"
#include "registry/registry.h"
#include "tests/registry/handler_harness.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

using nlohmann::json;
using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::PollUntilDone;
using testing::PushVersion;
using testing::Json;
using testing::TinyArchive;

// A stand-in for CreateDelta: counts its calls, writes bytes that depend on the options and
// returns a fixed report.
struct FakeDelta {
  std::atomic<int> calls{0};
  std::atomic<bool> block{false};
  Status fail = Status::Ok();

  DeltaFunction Function() {
    return [this](const std::string& base, const std::string& target,
                  const lossy::CreateOptions& o, const std::string& out) -> Result<std::string> {
      ++calls;
      while (block.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!fail.ok()) return Status(fail.code(), fail.message() + " (" + base + ")");
      EXPECT_TRUE(formats::BlzArchive::Open(base).ok());
      EXPECT_TRUE(formats::BlzArchive::Open(target).ok());
      BLZ_RETURN_IF_ERROR(WriteFileAtomic(
          out, "wdelta-fake " + std::to_string(int(o.strategy)) + " " +
                   std::to_string(o.sparsity) + " " + std::to_string(o.max_error) + " " +
                   std::to_string(o.rank_energy)));
      nlohmann::ordered_json report = {
          {"path", out},
          {"version", 1},
          {"strategy", std::string(kDeltaStrategies[size_t(o.strategy)])},
          {"parent_hash", std::string(64, 'a')},
          {"lossy", true},
          {"file_bytes", 30},
          {"lossless_bytes", 1234},
          {"full_bytes", 99999},
          {"error",
           {{"rel_l2", 0.0123456789},
            {"delta_rel_l2", 0.5},
            {"cosine", 0.99991},
            {"max_abs", 0.25},
            {"nonfinite", 0}}},
          {"tensors", json::array()}};
      return report.dump();
    };
  }
};

struct Fixture {
  FakeDelta fake;
  std::unique_ptr<Harness> h;
  std::string v1, v2;

  explicit Fixture(RegistryOptions o = {}) {
    o.create_delta = fake.Function();
    o.storage.background = false;
    h = std::make_unique<Harness>(std::move(o));
    v1 = PushVersion(h.get(), "org/m", "v1", TinyArchive(1, 1));
    v2 = PushVersion(h.get(), "org/m", "v2", TinyArchive(1, 1, 0.01));
  }
  std::string Target(const std::string& query, const std::string& endpoint = "delta") const {
    return "/v2/org/m/blz/" + endpoint + "?from=" + v1 + "&to=" + v2 + query;
  }
};

TEST(DeltaHandlersTest, BadParametersAre400BeforeAnyComputation) {
  Fixture f;
  Harness& h = *f.h;
  struct Case {
    std::string query;
    std::string code;
    std::string says;
  };
  const Case cases[] = {
      {"", "BAD_REQUEST", "missing ?strategy="},
      {"&strategy=zip", "BAD_REQUEST", "valid strategies: sparse, quantized, int4, bitdelta, "
                                       "lowrank, auto"},
      {"&strategy=BitDelta", "BAD_REQUEST", "unknown strategy 'BitDelta'"},
      {"&strategy=sparse&sparsity=1.5", "BAD_REQUEST", "sparsity must be a number in [0, 1)"},
      {"&strategy=sparse&sparsity=1", "BAD_REQUEST", "sparsity"},
      {"&strategy=sparse&sparsity=abc", "BAD_REQUEST", "not 'abc'"},
      {"&strategy=sparse&sparsity=0.5x", "BAD_REQUEST", "sparsity"},
      {"&strategy=sparse&sparsity=nan", "BAD_REQUEST", "sparsity"},
      {"&strategy=auto&max_error=0", "BAD_REQUEST", "max_error must be a number in (0, 1]"},
      {"&strategy=auto&max_error=inf", "BAD_REQUEST", "max_error"},
      {"&strategy=lowrank&rank_energy=-0.1", "BAD_REQUEST", "rank_energy"},
      {"&strategy=bitdelta&max_error=0.1", "BAD_REQUEST",
       "max_error does not apply to strategy bitdelta"},
      {"&strategy=quantized&sparsity=0.5", "BAD_REQUEST", "does not apply"},
      {"&strategy=bitdelta&colour=red", "BAD_REQUEST", "unknown query parameter 'colour'"},
  };
  for (const Case& c : cases) {
    for (const char* endpoint : {"delta", "delta-report"}) {
      Response r = h.Call("GET", f.Target(c.query, endpoint));
      EXPECT_EQ(r.status, 400) << c.query << " " << r.body;
      EXPECT_EQ(ErrorCodeOf(r), c.code) << c.query;
      EXPECT_NE(r.body.find(c.says), std::string::npos) << c.query << ": " << r.body;
    }
  }
  Response bad_from = h.Call("GET", "/v2/org/m/blz/delta?from=nope&to=" + f.v2 +
                                        "&strategy=bitdelta");
  EXPECT_EQ(bad_from.status, 400);
  EXPECT_EQ(ErrorCodeOf(bad_from), "DIGEST_INVALID");
  Response no_to = h.Call("GET", "/v2/org/m/blz/delta?from=" + f.v1 + "&strategy=bitdelta");
  EXPECT_EQ(no_to.status, 400);
  EXPECT_EQ(ErrorCodeOf(no_to), "DIGEST_INVALID");
  EXPECT_EQ(h.Call("DELETE", f.Target("&strategy=bitdelta")).status, 405);
  EXPECT_EQ(f.fake.calls.load(), 0);
  EXPECT_EQ(h.registry().deltas_computed(), 0u);
}

TEST(DeltaHandlersTest, UnknownVersionsAre404) {
  Fixture f;
  Harness& h = *f.h;
  const std::string unknown = MakeDigest(Sha256Hex(std::string("not a version")));
  Response to = h.Call("GET", "/v2/org/m/blz/delta?from=" + f.v1 + "&to=" + unknown +
                                  "&strategy=bitdelta");
  EXPECT_EQ(to.status, 404);
  EXPECT_EQ(ErrorCodeOf(to), "MANIFEST_UNKNOWN");
  Response from = h.Call("GET", "/v2/org/m/blz/delta-report?from=" + unknown + "&to=" + f.v2 +
                                    "&strategy=bitdelta");
  EXPECT_EQ(from.status, 404);
  EXPECT_EQ(ErrorCodeOf(from), "MANIFEST_UNKNOWN");
  // `to` must be a version of the repository asked.
  PushVersion(&h, "org/other", "v1", TinyArchive(7, 1));
  Response elsewhere = h.Call("GET", "/v2/org/other/blz/delta?from=" + f.v1 + "&to=" + f.v2 +
                                         "&strategy=bitdelta");
  EXPECT_EQ(elsewhere.status, 404);
  EXPECT_EQ(f.fake.calls.load(), 0);
}

TEST(DeltaHandlersTest, PrivateRegistryNeedsReadAccessToBothVersions) {
  RegistryOptions o;
  o.private_mode = true;
  Fixture f(o);
  Harness& h = *f.h;
  const std::string secret = PushVersion(&h, "hidden/m", "v1", TinyArchive(3, 1));
  Response anon = h.Call("GET", f.Target("&strategy=bitdelta"), "", {}, /*auth=*/false);
  EXPECT_EQ(anon.status, 401);
  auto token = h.registry().db().CreateToken("reader", "org/*:pull", std::nullopt);
  ASSERT_TRUE(token.ok());
  const std::vector<Header> bearer = {{"Authorization", "Bearer " + *token}};
  Response other = h.Call("GET", "/v2/hidden/m/blz/delta?from=" + f.v1 + "&to=" + secret +
                                     "&strategy=bitdelta",
                          "", bearer, false);
  EXPECT_EQ(other.status, 403);
  // A base the caller may not read is not told apart from an unknown one.
  Response from_hidden = h.Call("GET", "/v2/org/m/blz/delta?from=" + secret + "&to=" + f.v2 +
                                           "&strategy=bitdelta",
                                "", bearer, false);
  EXPECT_EQ(from_hidden.status, 404);
  EXPECT_EQ(f.fake.calls.load(), 0);
  Response ok = h.Call("GET", f.Target("&strategy=bitdelta"), "", bearer, false);
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST(DeltaHandlersTest, ServesTheDeltaWithItsErrorOnceThenFromTheCache) {
  Fixture f;
  Harness& h = *f.h;
  Response miss = h.Call("GET", f.Target("&strategy=bitdelta"));
  ASSERT_EQ(miss.status, 200) << miss.body;
  const std::string bytes = BodyOf(miss);
  const std::string digest = MakeDigest(Sha256Hex(bytes));
  EXPECT_EQ(miss.Get("Content-Type"), "application/vnd.blz.wdelta");
  EXPECT_EQ(miss.Get("Docker-Content-Digest"), digest);
  EXPECT_EQ(miss.Get("ETag"), "\"" + digest + "\"");
  EXPECT_EQ(miss.Get("Blz-Delta-Cache"), "miss");
  EXPECT_EQ(miss.Get("X-Blz-Lossy"), "true");
  EXPECT_EQ(miss.Get("X-Blz-Strategy"), "bitdelta");
  EXPECT_EQ(miss.Get("X-Blz-Rel-L2"), "0.0123456789");
  EXPECT_EQ(miss.Get("X-Blz-Cosine"), "0.99991");
  EXPECT_EQ(miss.Get("X-Blz-Max-Abs"), "0.25");
  EXPECT_EQ(miss.Get("X-Blz-Lossless-Bytes"), "1234");
  EXPECT_EQ(miss.Get("X-Blz-Full-Bytes"), "99999");
  EXPECT_EQ(f.fake.calls.load(), 1);
  // The delta is a blob of the store, under its own digest; the row names it.
  EXPECT_TRUE(h.registry().blobs().Stat(digest).ok());
  auto row = h.registry().db().FindLossyDelta(f.v1, f.v2, "strategy=bitdelta");
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->delta_digest, digest);
  EXPECT_EQ(row->delta_size, bytes.size());

  Response hit = h.Call("GET", f.Target("&strategy=bitdelta"));
  ASSERT_EQ(hit.status, 200);
  EXPECT_EQ(hit.Get("Blz-Delta-Cache"), "hit");
  EXPECT_EQ(BodyOf(hit), bytes);
  EXPECT_EQ(hit.Get("X-Blz-Rel-L2"), "0.0123456789");
  Response head = h.Call("HEAD", f.Target("&strategy=bitdelta"));
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.head_only);
  EXPECT_EQ(head.Get("Docker-Content-Digest"), digest);
  Response ranged = h.Call("GET", f.Target("&strategy=bitdelta"), "", {{"Range", "bytes=0-5"}});
  EXPECT_EQ(ranged.status, 206);
  EXPECT_EQ(BodyOf(ranged), bytes.substr(0, 6));
  EXPECT_EQ(f.fake.calls.load(), 1);
  EXPECT_EQ(h.registry().deltas_computed(), 1u);
  // GET /metrics: one computed, three served from the cache (GET, HEAD, ranged GET).
  const std::string metrics = h.registry().metrics().Render();
  EXPECT_NE(metrics.find("blz_lossy_deltas_served_total{result=\"computed\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("blz_lossy_deltas_served_total{result=\"cache_hit\"} 3\n"),
            std::string::npos)
      << metrics;

  // Options are part of the key; defaults spelled out share the entry of their absence.
  ASSERT_EQ(h.Call("GET", f.Target("&strategy=sparse")).status, 200);
  EXPECT_EQ(f.fake.calls.load(), 2);
  EXPECT_EQ(h.Call("GET", f.Target("&strategy=sparse&sparsity=0.90")).Get("Blz-Delta-Cache"),
            "hit");
  Response other = h.Call("GET", f.Target("&strategy=sparse&sparsity=0.5"));
  EXPECT_EQ(other.Get("Blz-Delta-Cache"), "miss");
  EXPECT_NE(BodyOf(other), bytes);
  EXPECT_EQ(f.fake.calls.load(), 3);
  EXPECT_TRUE(
      h.registry().db().FindLossyDelta(f.v1, f.v2, "strategy=sparse&sparsity=0.5").ok());

  // The cache survives a restart.
  h.Reopen([&] {
    RegistryOptions o;
    o.create_delta = f.fake.Function();
    return o;
  }());
  EXPECT_EQ(h.Call("GET", f.Target("&strategy=bitdelta")).Get("Blz-Delta-Cache"), "hit");
  EXPECT_EQ(f.fake.calls.load(), 3);
}

TEST(DeltaHandlersTest, SidecarStatesWhatTheHeadersSay) {
  Fixture f;
  Harness& h = *f.h;
  // The report first: it computes the delta, which the delta request then finds.
  Response report = h.Call("GET", f.Target("&strategy=auto&max_error=0.05", "delta-report"));
  ASSERT_EQ(report.status, 200) << report.body;
  EXPECT_EQ(report.Get("Content-Type"), "application/json");
  EXPECT_EQ(report.Get("Blz-Delta-Cache"), "miss");
  Response delta = h.Call("GET", f.Target("&strategy=auto&max_error=0.05"));
  ASSERT_EQ(delta.status, 200);
  EXPECT_EQ(delta.Get("Blz-Delta-Cache"), "hit");
  EXPECT_EQ(f.fake.calls.load(), 1);
  json j = Json(report);
  EXPECT_EQ(j["digest"], *delta.Get("Docker-Content-Digest"));
  EXPECT_EQ(j["size"], BodyOf(delta).size());
  EXPECT_EQ(j["from"], f.v1);
  EXPECT_EQ(j["to"], f.v2);
  EXPECT_EQ(j["params"], "strategy=auto&max_error=0.05&rank_energy=0.95");
  EXPECT_FALSE(j.contains("path"));  // the server's temporary path is never shown
  EXPECT_EQ(j["lossy"], true);
  EXPECT_EQ(j["strategy"], *delta.Get("X-Blz-Strategy"));
  EXPECT_EQ(j["error"]["rel_l2"].get<double>(), std::strtod(delta.Get("X-Blz-Rel-L2")->c_str(),
                                                            nullptr));
  EXPECT_EQ(j["error"]["cosine"].get<double>(),
            std::strtod(delta.Get("X-Blz-Cosine")->c_str(), nullptr));
  EXPECT_EQ(j["error"]["max_abs"].get<double>(),
            std::strtod(delta.Get("X-Blz-Max-Abs")->c_str(), nullptr));
  EXPECT_EQ(j["lossless_bytes"].get<uint64_t>(),
            std::stoull(*delta.Get("X-Blz-Lossless-Bytes")));
  EXPECT_EQ(j["full_bytes"].get<uint64_t>(), std::stoull(*delta.Get("X-Blz-Full-Bytes")));
  // The sidecar carries the same headers.
  EXPECT_EQ(report.Get("X-Blz-Rel-L2"), delta.Get("X-Blz-Rel-L2"));
  EXPECT_EQ(report.Get("Docker-Content-Digest"), delta.Get("Docker-Content-Digest"));
}

TEST(DeltaHandlersTest, FailuresAreNotCachedAndNameNoServerPaths) {
  Fixture f;
  Harness& h = *f.h;
  f.fake.fail = IOError("disk on fire");
  Response failed = h.Call("GET", f.Target("&strategy=int4"));
  EXPECT_EQ(failed.status, 500);
  EXPECT_EQ(ErrorCodeOf(failed), "UNKNOWN");
  EXPECT_NE(failed.body.find("disk on fire"), std::string::npos);
  EXPECT_EQ(failed.body.find(h.data()), std::string::npos) << failed.body;
  EXPECT_NE(failed.body.find(f.v1), std::string::npos) << failed.body;
  f.fake.fail = InvalidArgument("tensor x: dtype I8 cannot be decoded");
  Response refused = h.Call("GET", f.Target("&strategy=int4"));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(ErrorCodeOf(refused), "BAD_REQUEST");
  EXPECT_EQ(f.fake.calls.load(), 2);
  EXPECT_EQ(h.registry().deltas_computed(), 0u);
  f.fake.fail = Status::Ok();
  EXPECT_EQ(h.Call("GET", f.Target("&strategy=int4")).status, 200);
  EXPECT_EQ(f.fake.calls.load(), 3);
  EXPECT_EQ(h.UploadsCount(), 0u);  // no temporary file left behind

  // A server without a DeltaFunction does not serve deltas.
  Harness plain;
  const std::string a = PushVersion(&plain, "org/m", "v1", TinyArchive(1, 1));
  const std::string b = PushVersion(&plain, "org/m", "v2", TinyArchive(1, 1, 0.01));
  Response none = plain.Call("GET", "/v2/org/m/blz/delta?from=" + a + "&to=" + b +
                                        "&strategy=bitdelta");
  EXPECT_EQ(none.status, 405);
  EXPECT_EQ(ErrorCodeOf(none), "UNSUPPORTED");
}

TEST(DeltaHandlersTest, AsyncAnswers202WhileComputingThenTheDelta) {
  RegistryOptions o;
  o.async_wait = std::chrono::milliseconds(0);
  Fixture f(o);
  Harness& h = *f.h;
  struct Release {
    std::atomic<bool>* flag;
    ~Release() { *flag = false; }
  } release_at_exit{&f.fake.block};
  f.fake.block = true;
  const std::string target = f.Target("&strategy=lowrank&rank_energy=0.5&async=1");
  Response first = h.Call("GET", target);
  ASSERT_EQ(first.status, 202) << first.body;
  // Queued, then running (the computation is blocked): its phase names it.
  std::string phase = Json(first)["phase"];
  for (int i = 0; i < 6000 && phase == "queued"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Response again = h.Call("GET", target);
    ASSERT_EQ(again.status, 202);
    phase = Json(again)["phase"];
  }
  EXPECT_EQ(phase, "computing the lossy delta");
  // The report of the same delta waits for the same computation (one per key).
  Response report_first = h.Call("GET", f.Target("&strategy=lowrank&rank_energy=0.5&async=1",
                                                 "delta-report"));
  EXPECT_EQ(report_first.status, 202);
  EXPECT_EQ(h.Call("GET", target).status, 202);
  f.fake.block = false;
  Response done = PollUntilDone(&h, target);
  ASSERT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(done.Get("X-Blz-Strategy"), "lowrank");
  Response report = PollUntilDone(
      &h, f.Target("&strategy=lowrank&rank_energy=0.5&async=1", "delta-report"));
  ASSERT_EQ(report.status, 200) << report.body;
  EXPECT_EQ(Json(report)["digest"], *done.Get("Docker-Content-Digest"));
  EXPECT_EQ(f.fake.calls.load(), 1);
  // Bad parameters answer 400 through the job as well.
  EXPECT_EQ(PollUntilDone(&h, f.Target("&strategy=nope&async=1")).status, 400);
}

TEST(DeltaHandlersTest, GarbageCollectionKeepsDeltasOfLiveVersionsAndForgetsTheOthers) {
  RegistryOptions o;
  o.gc_grace = std::chrono::milliseconds(0);
  Fixture f(o);
  Harness& h = *f.h;
  Response delta = h.Call("GET", f.Target("&strategy=bitdelta"));
  ASSERT_EQ(delta.status, 200);
  const std::string digest = *delta.Get("Docker-Content-Digest");
  auto kept = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->derived_forgotten, 0u);
  EXPECT_TRUE(h.registry().blobs().Stat(digest).ok());
  EXPECT_EQ(h.Call("GET", f.Target("&strategy=bitdelta")).Get("Blz-Delta-Cache"), "hit");

  // v2 deleted: nobody can ask for the delta any more; its row and blob go.
  Response v2 = h.Call("GET", "/v2/org/m/manifests/v2");
  ASSERT_EQ(h.Call("DELETE", "/v2/org/m/manifests/" + *v2.Get("Docker-Content-Digest")).status,
            202);
  auto dry = h.registry().CollectGarbage(/*dry_run=*/true);
  ASSERT_TRUE(dry.ok());
  EXPECT_GE(dry->derived_forgotten, 1u);
  EXPECT_TRUE(h.registry().db().FindLossyDelta(f.v1, f.v2, "strategy=bitdelta").ok());
  auto run = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(run.ok());
  EXPECT_GE(run->derived_forgotten, 1u);
  EXPECT_EQ(h.registry().db().FindLossyDelta(f.v1, f.v2, "strategy=bitdelta").status().code(),
            Code::kNotFound);
  EXPECT_FALSE(h.registry().blobs().Stat(digest).ok());
  EXPECT_EQ(h.Call("GET", f.Target("&strategy=bitdelta")).status, 404);
}

// Issue 23: any reader could ask for a new sparsity (max_error, rank_energy) value per request,
// and each was computed and kept. Only the canonical values are served (and so cached).
TEST(DeltaHandlersTest, NonCanonicalValuesAre400NamingTheAllowedOnes) {
  Fixture f;
  Harness& h = *f.h;
  const size_t blobs = h.BlobCount();
  struct Case {
    std::string query;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"&strategy=sparse&sparsity=0.93",
            "sparsity must be one of 0.5, 0.75, 0.9, 0.95, 0.99 (the values this registry "
            "computes and caches), not '0.93'"},
           {"&strategy=sparse&sparsity=0.900001", "not '0.900001'"},
           {"&strategy=auto&max_error=0.03",
            "max_error must be one of 0.001, 0.005, 0.01, 0.02, 0.05, 0.1"},
           {"&strategy=lowrank&rank_energy=0.7",
            "rank_energy must be one of 0.5, 0.8, 0.9, 0.95, 0.99"}}) {
    for (const char* endpoint : {"delta", "delta-report"}) {
      Response r = h.Call("GET", f.Target(c.query, endpoint));
      EXPECT_EQ(r.status, 400) << c.query << ": " << r.body;
      EXPECT_EQ(ErrorCodeOf(r), "BAD_REQUEST") << c.query;
      EXPECT_NE(r.body.find(c.says), std::string::npos) << c.query << ": " << r.body;
    }
  }
  EXPECT_EQ(f.fake.calls.load(), 0);
  EXPECT_EQ(h.BlobCount(), blobs);
  // Canonical values, spelled any way that reads back as the same number, are served.
  EXPECT_EQ(h.Call("GET", f.Target("&strategy=sparse&sparsity=0.950")).status, 200);
  EXPECT_EQ(h.Call("GET", f.Target("&strategy=auto&max_error=1e-3")).status, 200);
  EXPECT_EQ(f.fake.calls.load(), 2);
}

TEST(DeltaHandlersTest, CacheBudgetEvictsTheLeastRecentlyUsedAndRemovesTheirBlobs) {
  // The stand-in writes 40-byte deltas: two fit in 100 bytes, a third does not.
  RegistryOptions o;
  o.delta_cache_bytes = 100;
  Fixture f(std::move(o));
  Harness& h = *f.h;
  auto get = [&](const std::string& sparsity) {
    return h.Call("GET", f.Target("&strategy=sparse&sparsity=" + sparsity));
  };
  const std::string a_params = "strategy=sparse&sparsity=0.5";
  const std::string b_params = "strategy=sparse&sparsity=0.75";
  Response a = get("0.5");
  Response b = get("0.75");
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  ASSERT_EQ(BodyOf(a).size(), 40u);
  const std::string b_digest = b.Get("Docker-Content-Digest").value_or("");
  EXPECT_EQ(get("0.5").Get("Blz-Delta-Cache"), "hit");  // a is now the most recently used
  Response c = get("0.9");
  ASSERT_EQ(c.status, 200);
  EXPECT_EQ(c.Get("Blz-Delta-Cache"), "miss");

  // b, the least recently used, is gone: its row and its blob.
  store::MetadataDb& db = h.registry().db();
  EXPECT_EQ(db.FindLossyDelta(f.v1, f.v2, b_params).status().code(), Code::kNotFound);
  EXPECT_FALSE(h.registry().blobs().Contains(b_digest));
  EXPECT_TRUE(db.FindLossyDelta(f.v1, f.v2, a_params).ok());
  EXPECT_TRUE(db.FindLossyDelta(f.v1, f.v2, "strategy=sparse&sparsity=0.9").ok());
  EXPECT_EQ(get("0.5").Get("Blz-Delta-Cache"), "hit");
  // Asked again, b is computed again (and evicts the next least recently used: c).
  EXPECT_EQ(get("0.75").Get("Blz-Delta-Cache"), "miss");
  EXPECT_EQ(f.fake.calls.load(), 4);
  EXPECT_EQ(db.FindLossyDelta(f.v1, f.v2, "strategy=sparse&sparsity=0.9").status().code(),
            Code::kNotFound);

  // A budget lowered later is applied by the next garbage collection.
  h.Reopen([&] {
    RegistryOptions lower;
    lower.create_delta = f.fake.Function();
    lower.delta_cache_bytes = 50;
    return lower;
  }());
  ASSERT_TRUE(h.registry().CollectGarbage(/*dry_run=*/false).ok());
  store::MetadataDb& reopened = h.registry().db();
  EXPECT_EQ(reopened.FindLossyDelta(f.v1, f.v2, a_params).status().code(), Code::kNotFound);
  EXPECT_TRUE(reopened.FindLossyDelta(f.v1, f.v2, b_params).ok());
}

// Issue 25: eviction deletes a delta's blob as garbage collection does, through the database
// (MetadataDb::DeleteBlobUnlessTouched), not under this process's blob lock alone. Another
// replica pushing the same bytes between the eviction's choice and its delete (an upload
// linked into a repository, its manifest still to come) keeps the blob.
TEST(DeltaHandlersTest, EvictionKeepsABlobAnotherReplicaPushedMeanwhile) {
  std::function<void(const std::string&)> hook;
  RegistryOptions o;
  o.delta_cache_bytes = 100;
  o.before_delta_blob_delete = [&](const std::string& digest) {
    if (hook) hook(digest);
  };
  Fixture f(std::move(o));
  Harness& a = *f.h;
  RegistryOptions other;
  other.create_delta = f.fake.Function();
  other.storage.background = false;
  Harness b(a, std::move(other));
  auto get = [&](const std::string& sparsity) {
    return a.Call("GET", f.Target("&strategy=sparse&sparsity=" + sparsity));
  };
  ASSERT_EQ(get("0.5").status, 200);
  Response evicted = get("0.75");
  ASSERT_EQ(evicted.status, 200);
  const std::string digest = evicted.Get("Docker-Content-Digest").value_or("");
  const std::string bytes = BodyOf(evicted);
  ASSERT_EQ(get("0.5").Get("Blz-Delta-Cache"), "hit");  // 0.75 is the least recently used

  int pushed = 0;
  hook = [&](const std::string& d) {
    if (d != digest) return;
    ++pushed;
    EXPECT_EQ(b.PushBlob("org/copy", bytes), digest);
  };
  ASSERT_EQ(get("0.9").status, 200);  // evicts 0.75
  hook = nullptr;
  ASSERT_EQ(pushed, 1);
  EXPECT_EQ(a.registry().db().FindLossyDelta(f.v1, f.v2, "strategy=sparse&sparsity=0.75")
                .status()
                .code(),
            Code::kNotFound);
  // The replica's push stands: its blob is still there, on both replicas.
  EXPECT_TRUE(a.registry().blobs().Contains(digest));
  Response pulled = b.Call("GET", "/v2/org/copy/blobs/" + digest);
  ASSERT_EQ(pulled.status, 200) << pulled.body;
  EXPECT_TRUE(BodyOf(pulled) == bytes);

  // Without such a push, an evicted delta's blob goes (the next least recently used: 0.5).
  Response first = get("0.5");
  const std::string first_digest = first.Get("Docker-Content-Digest").value_or("");
  ASSERT_EQ(get("0.9").Get("Blz-Delta-Cache"), "hit");
  ASSERT_EQ(get("0.95").status, 200);
  EXPECT_FALSE(a.registry().blobs().Contains(first_digest));
}

}  // namespace
}  // namespace blz::registry
