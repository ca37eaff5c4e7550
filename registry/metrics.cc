#include "registry/metrics.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace blz::registry {
namespace {

std::string_view PathOf(std::string_view target) {
  const size_t q = target.find_first_of("?#");
  return q == std::string_view::npos ? target : target.substr(0, q);
}

std::vector<std::string_view> Split(std::string_view path) {
  std::vector<std::string_view> parts;
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (true) {
    const size_t slash = path.find('/');
    parts.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

std::string_view MethodLabel(std::string_view m) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    if (m == known) return known;
  }
  return "other";
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    // The shortest of 15 or 17 significant digits that reads back as `v` ("0.005", not
    // "0.0050000000000000001").
    std::snprintf(buf, sizeof buf, "%.15g", v);
    if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  }
  return buf;
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Builds the exposition text one family at a time.
class Writer {
 public:
  void Family(std::string_view name, std::string_view help, std::string_view type) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    // HELP text escapes backslash and newline only.
    for (char c : help) {
      if (c == '\\') {
        out_ += "\\\\";
      } else if (c == '\n') {
        out_ += "\\n";
      } else {
        out_ += c;
      }
    }
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void Sample(std::string_view name,
              const std::vector<std::pair<std::string, std::string>>& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) out_ += ',';
        out_ += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += Number(value);
    out_ += '\n';
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string_view RouteKind(std::string_view target) {
  const std::string_view path = PathOf(target);
  if (path == "/metrics") return "metrics";
  if (path == "/healthz") return "healthz";
  if (path == "/readyz") return "readyz";
  const std::vector<std::string_view> c = Split(path);
  const size_t n = c.size();
  if (n == 0 || c[0] != "v2") return "other";
  if (n == 1 || (n == 2 && c[1].empty())) return "base";
  if (n == 2 && c[1] == "_catalog") return "catalog";
  if (c[1] == "_blz") {
    if (n >= 3 && c[2] == "storage") return "storage";
    if (n >= 3 && c[2] == "structures") return "structures";
    if (n == 3 && c[2] == "repositories") return "repositories";
    return "other";
  }
  // <name>/blobs/uploads/[<uuid>], <name>/tags/list, <name>/blz/(patch|diff),
  // <name>/(blobs|manifests|referrers)/<reference>: the name is everything before.
  if (n >= 4 && c[n - 3] == "blobs" && c[n - 2] == "uploads") return "upload";
  if (n >= 4 && c[n - 2] == "tags" && c[n - 1] == "list") return "tags";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "patch") return "patch";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "diff") return "value_diff";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "bases") return "bases";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "versions") return "versions";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "version") return "version";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "stats") return "stats";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "patch-report") return "patch_report";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "delta") return "delta";
  if (n >= 4 && c[n - 2] == "blz" && c[n - 1] == "delta-report") return "delta_report";
  if (n >= 4 && c[n - 2] == "blobs") return "blob";
  if (n >= 4 && c[n - 2] == "manifests") return "manifest";
  if (n >= 4 && c[n - 2] == "referrers") return "referrers";
  return "other";
}

void Metrics::RecordRequest(std::string_view route, std::string_view method, int status,
                            uint64_t bytes_in, uint64_t bytes_out, double seconds,
                            bool aborted) {
  RequestKey key{std::string(route), std::string(MethodLabel(method)),
                 status == 0 ? std::string("none") : std::to_string(status)};
  size_t bucket = 0;
  while (bucket < kDurationBuckets.size() && seconds > kDurationBuckets[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[key];
  RouteStats& r = routes_[key.route];
  r.bytes_in += bytes_in;
  r.bytes_out += bytes_out;
  if (aborted) ++r.aborted;
  if (bucket < r.buckets.size()) ++r.buckets[bucket];
  ++r.count;
  r.seconds += seconds;
}

void Metrics::RecordComputed(Computed what, bool cache_hit) {
  const size_t i = static_cast<size_t>(what);
  (cache_hit ? cache_hits_ : computed_)[i].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordGc(uint64_t bytes_freed) {
  gc_runs_.fetch_add(1, std::memory_order_relaxed);
  gc_freed_bytes_.fetch_add(bytes_freed, std::memory_order_relaxed);
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  gc_last_run_ms_.store(now.count(), std::memory_order_relaxed);
}

std::string Metrics::Render(const std::vector<MetricFamily>& extra) const {
  Writer w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    w.Family("blz_http_requests_total",
             "HTTP requests that ended (answered or aborted), by route kind, method and status "
             "code (code=\"none\": aborted before a response was started).",
             "counter");
    for (const auto& [k, n] : requests_) {
      w.Sample("blz_http_requests_total",
               {{"route", k.route}, {"method", k.method}, {"code", k.code}}, double(n));
    }
    w.Family("blz_http_requests_aborted_total",
             "HTTP requests whose transfer did not complete: the client went away or stalled "
             "past the timeout while sending its body or receiving the response.",
             "counter");
    for (const auto& [route, r] : routes_) {
      w.Sample("blz_http_requests_aborted_total", {{"route", route}}, double(r.aborted));
    }
    w.Family("blz_http_received_bytes_total", "Request body bytes read, by route kind.",
             "counter");
    for (const auto& [route, r] : routes_) {
      w.Sample("blz_http_received_bytes_total", {{"route", route}}, double(r.bytes_in));
    }
    w.Family("blz_http_sent_bytes_total",
             "Response body bytes sent (for aborted transfers, those that left), by route kind.",
             "counter");
    for (const auto& [route, r] : routes_) {
      w.Sample("blz_http_sent_bytes_total", {{"route", route}}, double(r.bytes_out));
    }
    w.Family("blz_http_request_duration_seconds",
             "Time from a request's head to its response's last byte (or the abort), by route "
             "kind.",
             "histogram");
    for (const auto& [route, r] : routes_) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i < kDurationBuckets.size(); ++i) {
        cumulative += r.buckets[i];
        w.Sample("blz_http_request_duration_seconds_bucket",
                 {{"route", route}, {"le", Number(kDurationBuckets[i])}}, double(cumulative));
      }
      w.Sample("blz_http_request_duration_seconds_bucket", {{"route", route}, {"le", "+Inf"}},
               double(r.count));
      w.Sample("blz_http_request_duration_seconds_sum", {{"route", route}}, r.seconds);
      w.Sample("blz_http_request_duration_seconds_count", {{"route", route}}, double(r.count));
    }
  }
  struct Kind {
    Computed what;
    const char* name;
    const char* help;
  };
  for (const Kind& k :
       {Kind{Computed::kPatch, "blz_patches_served_total",
             "Patches served (GET /v2/<name>/blz/patch with from), by result: computed for the "
             "request or served from the cache of computed patches."},
        Kind{Computed::kValueDiff, "blz_value_diffs_served_total",
             "Value diffs served (GET /v2/<name>/blz/diff), by result: computed or cache_hit."},
        Kind{Computed::kFullPatch, "blz_full_patches_served_total",
             "Full patches served (GET /v2/<name>/blz/patch without from), by result: computed "
             "for the request or already stored (cache_hit)."},
        Kind{Computed::kStats, "blz_stats_served_total",
             "Tensor statistics served (GET /v2/<name>/blz/stats), by result: computed or "
             "cache_hit."},
        Kind{Computed::kLossyDelta, "blz_lossy_deltas_served_total",
             "Lossy deltas (.wdelta) served (GET /v2/<name>/blz/delta), by result: computed "
             "for the request or cache_hit."}}) {
    const size_t i = static_cast<size_t>(k.what);
    w.Family(k.name, k.help, "counter");
    w.Sample(k.name, {{"result", "computed"}}, double(computed_[i].load()));
    w.Sample(k.name, {{"result", "cache_hit"}}, double(cache_hits_[i].load()));
  }
  w.Family("blz_gc_runs_total", "Garbage collection runs finished.", "counter");
  w.Sample("blz_gc_runs_total", {}, double(gc_runs_.load()));
  w.Family("blz_gc_freed_bytes_total", "Bytes freed by garbage collection.", "counter");
  w.Sample("blz_gc_freed_bytes_total", {}, double(gc_freed_bytes_.load()));
  w.Family("blz_gc_last_run_timestamp_seconds",
           "Unix time of the last finished garbage collection run (0: none since start).",
           "gauge");
  w.Sample("blz_gc_last_run_timestamp_seconds", {}, double(gc_last_run_ms_.load()) / 1000.0);
  for (const MetricFamily& f : extra) {
    w.Family(f.name, f.help, f.type);
    for (const MetricSample& s : f.samples) w.Sample(f.name + s.suffix, s.labels, s.value);
  }
  return w.Take();
}

}  // namespace blz::registry
