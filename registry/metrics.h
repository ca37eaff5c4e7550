// The counters of `blz serve`, exposed at GET /metrics (registry/metrics_handlers.h) in the
// Prometheus text exposition format, version 0.0.4: for every metric family a "# HELP" and a
// "# TYPE" line, then its samples `name{label="value",...} value`; counters end in "_total".
// The families and their meanings are listed in docs/operating.md ("Metrics").
//
// Metrics holds what only the server sees as it happens: HTTP requests (by route kind, method
// and status), body bytes, request durations, cache hits of computed blobs, GC runs. Values
// that live elsewhere (archive storage counters, bytes on disk) are read at scrape time and
// passed to Render as extra families.
//
// Thread safety: every member function may be called concurrently (atomics, and one mutex for
// the labeled maps).
#ifndef BLZ_REGISTRY_METRICS_H_
#define BLZ_REGISTRY_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace blz::registry {

// The kind of route a request target addresses, a bounded label value: "base" (/v2/),
// "catalog", "blob", "upload", "manifest", "referrers", "tags", "patch", "value_diff",
// "structures", "storage", "repositories" (/v2/_blz/...), "bases", "versions", "version",
// "stats", "patch_report", "delta", "delta_report" (/v2/<name>/blz/...), "metrics", "healthz", "readyz", or "other". Looks only at the path's
// shape (no validation): "/v2/org/m/blobs/uploads/<uuid>?..." -> "upload".
std::string_view RouteKind(std::string_view target);

// One sample of an extra family: its labels (name, value; in order) and its value.
struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  // Appended to the family's name for this sample: "_sum" / "_count" of a summary.
  std::string suffix;
};
// A metric family computed at scrape time. `type`: "counter", "gauge" or "summary" (samples
// with suffix "_sum" and "_count").
struct MetricFamily {
  std::string name;
  std::string help;
  std::string type;
  std::vector<MetricSample> samples;
};

// Upper bounds (seconds) of blz_http_request_duration_seconds' buckets (+Inf is implicit).
inline constexpr std::array<double, 10> kDurationBuckets = {0.005, 0.025, 0.1, 0.25, 1,
                                                            5,     15,    60,  300,  1800};

class Metrics {
 public:
  // A request that ended: answered (`aborted` false), or cut off (the client went away or
  // timed out; `status` is the status being sent, 0 when none was). `method` outside the
  // standard HTTP methods counts as "other"; status 0 as code "none".
  void RecordRequest(std::string_view route, std::string_view method, int status,
                     uint64_t bytes_in, uint64_t bytes_out, double seconds, bool aborted);

  // A blob computed on demand and cached (Registry::ComputeCached, the full patches): served
  // from the cache (`cache_hit`) or computed for this request. kLossyDelta counts the .wdelta
  // files served (GET /blz/delta), not their reports.
  enum class Computed : uint8_t { kPatch, kValueDiff, kFullPatch, kStats, kLossyDelta };
  static constexpr size_t kComputedKinds = 5;
  void RecordComputed(Computed what, bool cache_hit);

  // The garbage collector's hook: call once per finished GC run with the bytes it freed
  // (through Registry::metrics()). Counts blz_gc_runs_total and blz_gc_freed_bytes_total and
  // sets blz_gc_last_run_timestamp_seconds.
  void RecordGc(uint64_t bytes_freed);

  // The exposition text: this object's families, then `extra` (in order). Label values are
  // escaped (backslash, double quote, newline) as the format requires.
  std::string Render(const std::vector<MetricFamily>& extra = {}) const;

 private:
  struct RequestKey {
    std::string route, method, code;
    bool operator<(const RequestKey& o) const {
      return std::tie(route, method, code) < std::tie(o.route, o.method, o.code);
    }
  };
  struct RouteStats {
    uint64_t bytes_in = 0;
    uint64_t bytes_out = 0;
    uint64_t aborted = 0;
    std::array<uint64_t, kDurationBuckets.size()> buckets{};  // non-cumulative
    uint64_t count = 0;
    double seconds = 0;
  };

  mutable std::mutex mu_;
  std::map<RequestKey, uint64_t> requests_;   // guarded by mu_
  std::map<std::string, RouteStats> routes_;  // guarded by mu_
  std::array<std::atomic<uint64_t>, kComputedKinds> computed_{};
  std::array<std::atomic<uint64_t>, kComputedKinds> cache_hits_{};
  std::atomic<uint64_t> gc_runs_{0};
  std::atomic<uint64_t> gc_freed_bytes_{0};
  std::atomic<int64_t> gc_last_run_ms_{0};  // unix milliseconds, 0 = never
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_METRICS_H_
