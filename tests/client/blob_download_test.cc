// Resumable downloads (client/blob_download.h), retries (client/retry.h) and the partial store
// (client/partial_download.h) against an in-test server that serves Range requests like the
// registry does, behind a FaultProxy that cuts or stalls connections.
#include "client/blob_download.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/partial_download.h"
#include "client/retry.h"
#include "core/digest.h"
#include "tests/client/fault_proxy.h"
#include "tests/client/test_server.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::FaultProxy;
using blz::testing::MakeResponse;
using blz::testing::OciError;
using blz::testing::ReadFileBytes;
using blz::testing::TempDir;
using blz::testing::TestRequest;
using blz::testing::TestResponse;
using blz::testing::TestServer;
using blz::testing::WriteFileBytes;
namespace http = boost::beast::http;
using std::chrono::milliseconds;

constexpr uint64_t kMiB = 1 << 20;

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = char(x);
  }
  return s;
}

// Serves one resource at any target with Range support (206 + Content-Range, 416), a
// Docker-Content-Digest, and the first `fail_first` requests answered with `fail_status`
// (and `retry_after` when set). Counts body bytes sent.
class RangeServer {
 public:
  explicit RangeServer(std::string body) : body_(std::move(body)) {}

  TestResponse Handle(const TestRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    if (fail_first_ > 0) {
      --fail_first_;
      TestResponse r = OciError(http::status(fail_status_), "UNAVAILABLE", "try later");
      if (!retry_after_.empty()) r.set(http::field::retry_after, retry_after_);
      return r;
    }
    if (not_found_) return OciError(http::status::not_found, "BLOB_UNKNOWN", "no such blob");
    TestResponse r = MakeResponse(http::status::ok, "", "application/octet-stream");
    r.set("Docker-Content-Digest", digest_override_.empty() ? MakeDigest(Sha256Hex(body_))
                                                            : digest_override_);
    std::string range(ignore_ranges_ ? "" : std::string(req[http::field::range]));
    uint64_t first = 0, last = body_.size() - 1;
    if (!range.empty()) {
      size_t dash = range.find('-');
      first = std::stoull(range.substr(6, dash - 6));
      if (dash + 1 < range.size()) last = std::min<uint64_t>(last, std::stoull(range.substr(dash + 1)));
      if (first >= body_.size()) {
        TestResponse e = OciError(http::status::range_not_satisfiable, "RANGE_INVALID", "bad");
        return e;
      }
      r.result(http::status::partial_content);
      r.set(http::field::content_range, "bytes " + std::to_string(first) + "-" +
                                            std::to_string(last) + "/" +
                                            std::to_string(body_.size()));
    }
    r.body() = body_.substr(first, last - first + 1);
    r.prepare_payload();
    body_bytes_ += r.body().size();
    return r;
  }

  void FailFirst(int n, int status, std::string retry_after = "") {
    std::lock_guard<std::mutex> lock(mu_);
    fail_first_ = n;
    fail_status_ = status;
    retry_after_ = std::move(retry_after);
  }
  void SetIgnoreRanges(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    ignore_ranges_ = v;
  }
  void SetNotFound(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    not_found_ = v;
  }
  void SetBody(std::string body, std::string digest_override = "") {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = std::move(body);
    digest_override_ = std::move(digest_override);
  }
  int requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  uint64_t body_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return body_bytes_;
  }

 private:
  std::mutex mu_;
  std::string body_;
  std::string digest_override_;
  int fail_first_ = 0;
  int fail_status_ = 503;
  std::string retry_after_;
  bool not_found_ = false;
  bool ignore_ranges_ = false;
  int requests_ = 0;
  uint64_t body_bytes_ = 0;
};

class BlobDownloadTest : public ::testing::Test {
 protected:
  BlobDownloadTest()
      : body_(Pattern(10 * kMiB + 12345, 7)),
        fake_(body_),
        server_([this](const TestRequest& r) { return fake_.Handle(r); }) {}

  DownloadRequest BlobRequest() const {
    DownloadRequest r;
    r.target = "/v2/m/blobs/" + MakeDigest(Sha256Hex(body_));
    r.kind = "blob";
    r.what = "blob " + MakeDigest(Sha256Hex(body_));
    r.key = Sha256Hex(body_);
    r.for_digest = MakeDigest(Sha256Hex(body_));
    r.expected_digest = r.for_digest;
    r.expected_size = body_.size();
    return r;
  }

  DownloadRequest PatchRequest() const {
    DownloadRequest r;
    r.target = "/v2/m/blz/patch?from=a&to=b";
    r.kind = "patch";
    r.what = "patch a -> b";
    r.key = PatchKey("sha256:a", "sha256:b");
    r.for_digest = MakeDigest(Sha256Hex("b"));
    return r;
  }

  DownloadOptions Options(uint16_t port, int parallel = 3) {
    DownloadOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.registry = "127.0.0.1:" + std::to_string(port);
    o.retry.base_delay = milliseconds(5);
    o.retry.max_delay = milliseconds(50);
    o.retry.stall_timeout = milliseconds(5000);
    o.parallel = parallel;
    o.min_part_bytes = 1 * kMiB;
    o.max_part_bytes = 2 * kMiB;
    o.on_retry = [this](const RetryEvent& e) {
      std::lock_guard<std::mutex> lock(log_mu_);
      events_.push_back(e);
    };
    return o;
  }

  std::string Dest(const std::string& name) { return tmp_ / name; }

  std::string body_;
  RangeServer fake_;
  TestServer server_;
  TempDir tmp_;
  std::string store_ = tmp_ / "store";
  std::mutex log_mu_;
  std::vector<RetryEvent> events_;
};

TEST(PlanPartsTest, SplitsLikeOllama) {
  // Below the minimum part: one stream.
  auto one = PlanParts(0, 50 * kMiB, 4, 64 * kMiB, 512 * kMiB);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].end, 50 * kMiB);
  // 1 GiB in 4: 256 MiB parts.
  auto four = PlanParts(0, 1024 * kMiB, 4, 64 * kMiB, 512 * kMiB);
  ASSERT_EQ(four.size(), 4u);
  EXPECT_EQ(four[1].begin, 256 * kMiB);
  // 100 MiB in 4: clamped up to 64 MiB parts, the last shorter.
  auto up = PlanParts(0, 100 * kMiB, 4, 64 * kMiB, 512 * kMiB);
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(up[1].end - up[1].begin, 36 * kMiB);
  // 15 GiB in 4: clamped down to 512 MiB parts.
  auto down = PlanParts(0, 15360 * kMiB, 4, 64 * kMiB, 512 * kMiB);
  EXPECT_EQ(down.size(), 30u);
  // Contiguous and complete, from an offset too.
  auto off = PlanParts(7, 10 * kMiB + 3, 3, kMiB, 2 * kMiB);
  EXPECT_EQ(off.front().begin, 7u);
  EXPECT_EQ(off.back().end, 10 * kMiB + 3);
  for (size_t i = 1; i < off.size(); ++i) EXPECT_EQ(off[i].begin, off[i - 1].end);
  EXPECT_EQ(PlanParts(0, 10 * kMiB, 1, kMiB, 2 * kMiB).size(), 1u);
  EXPECT_TRUE(PlanParts(5, 5, 4, kMiB, kMiB).empty());
}

TEST(RetryPolicyTest, BackoffStaysWithinBounds) {
  RetryPolicy p;
  p.base_delay = milliseconds(500);
  p.max_delay = milliseconds(30'000);
  EXPECT_EQ(BackoffDelay(p, 1, 0.0).count(), 250);
  EXPECT_EQ(BackoffDelay(p, 1, 1.0).count(), 500);
  EXPECT_EQ(BackoffDelay(p, 3, 1.0).count(), 2000);
  EXPECT_EQ(BackoffDelay(p, 3, 0.0).count(), 1000);
  EXPECT_EQ(BackoffDelay(p, 20, 1.0).count(), 30'000);  // capped
  EXPECT_EQ(BackoffDelay(p, 60, 0.0).count(), 15'000);  // no overflow
  for (int i = 0; i < 200; ++i) {
    auto d = BackoffDelay(p, 2, RandomUnit());
    EXPECT_GE(d.count(), 500);
    EXPECT_LE(d.count(), 1000);
  }
  bool from = false;
  EXPECT_EQ(RetryDelay(p, 1, milliseconds(120'000), &from).count(), 30'000);
  EXPECT_TRUE(from);
}

TEST(RetryPolicyTest, ParsesRetryAfter) {
  const auto now = std::chrono::system_clock::from_time_t(1445412480);  // 2015-10-21 07:28:00
  EXPECT_EQ(ParseRetryAfter("120", now)->count(), 120'000);
  EXPECT_EQ(ParseRetryAfter(" 0 ", now)->count(), 0);
  EXPECT_EQ(ParseRetryAfter("Wed, 21 Oct 2015 07:28:30 GMT", now)->count(), 30'000);
  EXPECT_EQ(ParseRetryAfter("Wed, 21 Oct 2015 07:00:00 GMT", now)->count(), 0);  // past
  // Found by fuzz_reference: a date centuries ahead overflowed the clock (UBSan); now capped
  // at a year.
  EXPECT_EQ(ParseRetryAfter("Wed, 21 Oct 4030 07:28:00 GMT", now)->count(), 365LL * 86400 * 1000);
  EXPECT_FALSE(ParseRetryAfter("", now).has_value());
  EXPECT_FALSE(ParseRetryAfter("-5", now).has_value());
  EXPECT_FALSE(ParseRetryAfter("12abc", now).has_value());
  EXPECT_FALSE(ParseRetryAfter("Wed, 21 Foo 2015 07:28:30 GMT", now).has_value());
  EXPECT_FALSE(ParseRetryAfter("Wednesday, 21-Oct-15 07:28:30 GMT", now).has_value());
  EXPECT_TRUE(IsRetryableHttpStatus(503));
  EXPECT_TRUE(IsRetryableHttpStatus(429));
  EXPECT_TRUE(IsRetryableHttpStatus(408));
  EXPECT_FALSE(IsRetryableHttpStatus(404));
  EXPECT_FALSE(IsRetryableHttpStatus(501));
  EXPECT_FALSE(IsRetryableHttpStatus(401));
  RetryEvent e;
  e.retry = 2;
  e.max_retries = 5;
  e.delay = milliseconds(1300);
  e.reason = "connection reset";
  EXPECT_EQ(FormatRetryEvent(e), "retry 2/5 after 1.3 s: connection reset");
}

TEST(RetryPolicyTest, RetryTransientRetriesOnlyTransientFailures) {
  RetryPolicy p;
  p.max_attempts = 4;
  p.base_delay = milliseconds(1);
  p.max_delay = milliseconds(2);
  std::vector<RetryEvent> events;
  RetryLogFn log = [&](const RetryEvent& e) { events.push_back(e); };
  int calls = 0;
  Result<int> ok = RetryTransient(p, log, "manifest", [&]() -> Result<int> {
    return ++calls < 3 ? Result<int>(Unavailable("503")) : Result<int>(42);
  });
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 42);
  EXPECT_EQ(calls, 3);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].reason, "manifest: 503");
  calls = 0;
  Status gone = RetryTransient(p, log, "x", [&] {
    ++calls;
    return IOError("reset");
  });
  EXPECT_EQ(gone.code(), Code::kIOError);
  EXPECT_EQ(calls, 4);
  calls = 0;
  Status missing = RetryTransient(p, log, "x", [&] {
    ++calls;
    return NotFound("404");
  });
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_EQ(calls, 1);
}

TEST_F(BlobDownloadTest, ParallelPartsSurviveCutsAndCostOnlyTheMissingBytes) {
  FaultProxy::Options po;
  po.cut_after = 1536 * 1024;  // every connection dies before a 2 MiB part is through
  FaultProxy proxy(server_.port(), po);
  Result<DownloadResult> r =
      DownloadResumable(store_, BlobRequest(), Options(proxy.port(), 3), Dest("out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("out")), body_);
  EXPECT_EQ(r->digest, MakeDigest(Sha256Hex(body_)));
  EXPECT_EQ(r->parts, 6);
  EXPECT_GT(proxy.cuts(), 0);
  EXPECT_GT(r->retries, 0);
  // What the server sent: the blob, plus at most one part lost in flight (the proxy drops what
  // it read past a cut), plus headers.
  EXPECT_LE(proxy.upstream_bytes_read(), body_.size() + 2 * kMiB + 64 * 1024)
      << "cuts " << proxy.cuts();
  EXPECT_EQ(r->bytes_received, body_.size());
  // Nothing is left in partial/.
  EXPECT_FALSE(std::filesystem::exists(PartialStore(store_).SidecarPath(BlobRequest().key)));
  EXPECT_FALSE(std::filesystem::exists(PartialStore(store_).DataPath(BlobRequest().key)));
}

TEST_F(BlobDownloadTest, SingleStreamResumesWithRange) {
  FaultProxy::Options po;
  po.cut_after = 3 * kMiB;
  FaultProxy proxy(server_.port(), po);
  DownloadOptions o = Options(proxy.port(), 1);
  Result<DownloadResult> r = DownloadResumable(store_, BlobRequest(), o, Dest("out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("out")), body_);
  EXPECT_EQ(r->parts, 1);
  EXPECT_GE(proxy.cuts(), 3);
  // Per cut, at most what was in flight is lost: the proxy's 64 KiB read past the cut and the
  // client's last read buffer (HttpClient drops the bytes of a read that ends in an error, at
  // most 256 KiB). A client that restarted from zero would need size + 3 * 3 MiB at least.
  EXPECT_LE(proxy.upstream_bytes_read(),
            body_.size() + uint64_t(proxy.cuts()) * (256 + 64) * 1024 + 8 * 1024);
  ASSERT_FALSE(events_.empty());
  EXPECT_NE(events_[0].reason.find("at byte"), std::string::npos) << events_[0].reason;
}

TEST_F(BlobDownloadTest, InterruptedDownloadIsKeptAndResumedByTheNextRun) {
  {
    FaultProxy::Options po;
    po.cut_after = 4 * kMiB;
    FaultProxy proxy(server_.port(), po);
    DownloadOptions o = Options(proxy.port(), 1);
    o.retry.max_attempts = 1;  // the first cut ends the run, as a kill would
    Result<DownloadResult> r = DownloadResumable(store_, BlobRequest(), o, Dest("out"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("partial download is kept"), std::string::npos)
        << r.status().ToString();
  }
  std::optional<PartialState> kept = PartialStore(store_).Load(BlobRequest().key);
  ASSERT_TRUE(kept.has_value());
  EXPECT_GT(kept->Done(), 3 * kMiB);
  const uint64_t before = fake_.body_bytes();
  Result<DownloadResult> r =
      DownloadResumable(store_, BlobRequest(), Options(server_.port(), 1), Dest("out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("out")), body_);
  EXPECT_EQ(r->resumed_from, kept->Done());
  EXPECT_EQ(r->bytes_received, body_.size() - kept->Done());
  EXPECT_EQ(fake_.body_bytes() - before, body_.size() - kept->Done());
}

TEST_F(BlobDownloadTest, CorruptPartialIsDetectedDeletedAndDownloadedAgain) {
  {
    FaultProxy::Options po;
    po.cut_after = 4 * kMiB;
    FaultProxy proxy(server_.port(), po);
    DownloadOptions o = Options(proxy.port(), 1);
    o.retry.max_attempts = 1;
    ASSERT_FALSE(DownloadResumable(store_, BlobRequest(), o, Dest("out")).ok());
  }
  // Flip a byte inside the kept prefix.
  const std::string data = PartialStore(store_).DataPath(BlobRequest().key);
  std::string bytes = ReadFileBytes(data);
  bytes[1000] = char(bytes[1000] ^ 0x5a);
  WriteFileBytes(data, bytes);
  Result<DownloadResult> r =
      DownloadResumable(store_, BlobRequest(), Options(server_.port(), 1), Dest("out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("out")), body_);
  bool reported = false;
  for (const std::string& n : r->notes) reported |= n.find("corrupt") != std::string::npos;
  EXPECT_TRUE(reported);
}

TEST_F(BlobDownloadTest, FreshDownloadWithWrongBytesFailsAndKeepsNothing) {
  DownloadRequest req = BlobRequest();
  req.expected_digest = MakeDigest(Sha256Hex("something else"));
  req.key = Sha256Hex("something else");
  Result<DownloadResult> r =
      DownloadResumable(store_, req, Options(server_.port(), 3), Dest("out"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDigestMismatch) << r.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(Dest("out")));
  EXPECT_FALSE(std::filesystem::exists(PartialStore(store_).DataPath(req.key)));
}

TEST_F(BlobDownloadTest, Retries503And429WithRetryAfter) {
  fake_.FailFirst(2, 503);
  Result<DownloadResult> r =
      DownloadResumable(store_, BlobRequest(), Options(server_.port(), 1), Dest("a"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->retries, 2);
  events_.clear();

  fake_.FailFirst(1, 429, "1");
  DownloadOptions o = Options(server_.port(), 1);
  o.retry.max_delay = milliseconds(5000);
  Result<DownloadResult> r2 = DownloadResumable(store_, BlobRequest(), o, Dest("b"));
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_TRUE(events_[0].from_retry_after);
  EXPECT_EQ(events_[0].delay.count(), 1000);
  EXPECT_NE(events_[0].reason.find("429"), std::string::npos) << events_[0].reason;
}

TEST_F(BlobDownloadTest, GivesUpAfterMaxAttempts) {
  fake_.FailFirst(100, 503);
  DownloadOptions o = Options(server_.port(), 1);
  o.retry.max_attempts = 3;
  Result<DownloadResult> r = DownloadResumable(store_, BlobRequest(), o, Dest("a"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(fake_.requests(), 3);
  EXPECT_EQ(events_.size(), 2u);
}

TEST_F(BlobDownloadTest, NotFoundIsNotRetried) {
  fake_.SetNotFound(true);
  Result<DownloadResult> r =
      DownloadResumable(store_, BlobRequest(), Options(server_.port(), 1), Dest("a"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(fake_.requests(), 1);
  EXPECT_TRUE(events_.empty());
}

TEST_F(BlobDownloadTest, StallIsRetried) {
  FaultProxy::Options po;
  po.stall_after_total = 2 * kMiB;
  po.stall_for = milliseconds(1000);
  FaultProxy proxy(server_.port(), po);
  DownloadOptions o = Options(proxy.port(), 1);
  o.retry.stall_timeout = milliseconds(300);
  Result<DownloadResult> r = DownloadResumable(store_, BlobRequest(), o, Dest("a"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("a")), body_);
  ASSERT_FALSE(events_.empty());
  EXPECT_NE(events_[0].reason.find("timed out"), std::string::npos) << events_[0].reason;
}

TEST_F(BlobDownloadTest, PatchOfUnknownSizeIsProbedThenFetchedInParts) {
  const std::string patch = Pattern(5 * kMiB + 77, 3);
  fake_.SetBody(patch);
  FaultProxy::Options po;
  po.cut_after = 1536 * 1024;
  FaultProxy proxy(server_.port(), po);
  DownloadRequest req = PatchRequest();
  req.max_bytes = 6 * kMiB;
  Result<DownloadResult> r = DownloadResumable(store_, req, Options(proxy.port(), 2), Dest("p"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("p")), patch);
  EXPECT_EQ(r->digest, MakeDigest(Sha256Hex(patch)));
  EXPECT_GE(r->parts, 3);

  // Larger than allowed: refused before the body.
  req.max_bytes = 4 * kMiB;
  Result<DownloadResult> big =
      DownloadResumable(store_, req, Options(server_.port(), 2), Dest("p2"));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kTooLarge) << big.status().ToString();
}

TEST_F(BlobDownloadTest, ChangedPatchRestartsFromZero) {
  const std::string first = Pattern(3 * kMiB, 11);
  fake_.SetBody(first);
  {
    FaultProxy::Options po;
    po.cut_after = 2 * kMiB;
    FaultProxy proxy(server_.port(), po);
    DownloadOptions o = Options(proxy.port(), 1);
    o.retry.max_attempts = 1;
    ASSERT_FALSE(DownloadResumable(store_, PatchRequest(), o, Dest("p")).ok());
  }
  ASSERT_TRUE(PartialStore(store_).Load(PatchRequest().key).has_value());
  // The registry now serves different bytes under the same from/to (same size even).
  const std::string second = Pattern(3 * kMiB, 12);
  fake_.SetBody(second);
  Result<DownloadResult> r =
      DownloadResumable(store_, PatchRequest(), Options(server_.port(), 1), Dest("p"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("p")), second);
  bool reported = false;
  for (const std::string& n : r->notes) reported |= n.find("changed") != std::string::npos;
  EXPECT_TRUE(reported);
}

TEST_F(BlobDownloadTest, RegistryIgnoringRangeStillWorks) {
  fake_.SetIgnoreRanges(true);
  Result<DownloadResult> r =
      DownloadResumable(store_, BlobRequest(), Options(server_.port(), 3), Dest("a"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(Dest("a")), body_);
  EXPECT_EQ(r->parts, 1);  // started again as one stream
  ASSERT_FALSE(r->notes.empty());
  EXPECT_NE(r->notes.back().find("ignores Range"), std::string::npos) << r->notes.back();
}

TEST(FetchLockTest, SecondHolderWaits) {
  TempDir tmp;
  const std::string digest = MakeDigest(Sha256Hex("x"));
  bool waited = false;
  Result<FetchLock> first = FetchLock::Acquire(tmp.path(), digest, &waited);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(waited);
  std::atomic<bool> got{false};
  bool second_waited = false;
  std::thread t([&] {
    Result<FetchLock> second = FetchLock::Acquire(tmp.path(), digest, &second_waited);
    got = second.ok();
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(got.load());
  { FetchLock release = std::move(*first); }
  t.join();
  EXPECT_TRUE(got.load());
  EXPECT_TRUE(second_waited);
}

}  // namespace
}  // namespace blz::client
