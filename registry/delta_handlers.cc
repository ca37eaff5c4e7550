// Lossy deltas (docs/registry-api.md, "Lossy deltas"):
//   GET|HEAD /v2/<name>/blz/delta?from=&to=&strategy=[&max_error=][&sparsity=][&rank_energy=]
//     the .wdelta (formats/wdelta.h) from -> to, computed once per (from, to, strategy and the
//     options that strategy reads) with RegistryOptions::create_delta and kept as a blob like
//     patches (table lossy_deltas), with the error it introduces in X-Blz-* headers;
//   GET|HEAD /v2/<name>/blz/delta-report?<the same query>
//     its report (lossy::DeltaReportJson + the delta's digest), the same numbers as the headers.
// Both take ?async=1 (Registry::Async). A lossy reconstruction is a different model from `to`:
// every answer says so (X-Blz-Lossy, "lossy") and nothing here records it as `to`.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iterator>
#include <span>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {

// A validated delta request (Registry::ParseDeltaQuery).
struct Registry::DeltaQuery {
  std::string from;
  std::string to;
  std::string paths[2];  // the archives' files
  std::string strategy;
  // The canonical key of the options: "strategy=<s>" then, in a fixed order, every option the
  // strategy reads (defaults filled in), so that equal requests share one cached delta.
  std::string params;
  lossy::CreateOptions options;
};

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using internal::ReplaceAll;
using internal::ServeFile;

constexpr char kUsage[] =
    "delta needs ?from=<archive digest>&to=<archive digest>&strategy=<strategy>";

// Shortest text that reads back as the same double ("0.9", "1e-05").
std::string NumberText(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string ValidStrategies() {
  std::string out;
  for (std::string_view s : kDeltaStrategies) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

// The values the registry computes and caches (docs/registry-api.md, "Lossy deltas"): each
// (from, to) pair has a bounded set of deltas, so that no caller can fill the disk by asking
// for new values. Each list holds lossy::CreateOptions' default.
constexpr double kMaxErrors[] = {0.001, 0.005, 0.01, 0.02, 0.05, 0.1};
constexpr double kSparsities[] = {0.5, 0.75, 0.9, 0.95, 0.99};
constexpr double kRankEnergies[] = {0.5, 0.8, 0.9, 0.95, 0.99};

// The options each strategy reads (besides the strategy itself).
struct OptionSpec {
  const char* name;
  double lossy::CreateOptions::*field;
  double min;  // allowed range
  double max;
  bool min_open;  // min excluded
  bool max_open;  // max excluded
  const char* strategies[2];  // the strategies that read it
  std::span<const double> allowed;  // the canonical values (a value in range but not here: 400)
};
constexpr OptionSpec kOptions[] = {
    {"max_error", &lossy::CreateOptions::max_error, 0, 1, true, false, {"auto", nullptr},
     kMaxErrors},
    {"sparsity", &lossy::CreateOptions::sparsity, 0, 1, false, true, {"sparse", nullptr},
     kSparsities},
    {"rank_energy", &lossy::CreateOptions::rank_energy, 0, 1, true, false, {"lowrank", "auto"},
     kRankEnergies},
};

std::string AllowedText(const OptionSpec& o) {
  std::string out;
  for (double v : o.allowed) out += (out.empty() ? "" : ", ") + NumberText(v);
  return out;
}

bool ReadBy(const OptionSpec& o, std::string_view strategy) {
  for (const char* s : o.strategies) {
    if (s != nullptr && strategy == s) return true;
  }
  return false;
}

std::string RangeText(const OptionSpec& o) {
  return std::string(o.min_open ? "(" : "[") + NumberText(o.min) + ", " + NumberText(o.max) +
         (o.max_open ? ")" : "]");
}

// The error figures sent as headers, from the report's "error" object (absent when null).
void SetDeltaHeaders(Response* res, const ojson& report, const std::string& strategy) {
  res->Set("X-Blz-Lossy", report.value("lossy", true) ? "true" : "false");
  res->Set("X-Blz-Strategy", strategy);
  auto number = [](const ojson& v) -> std::optional<std::string> {
    if (v.is_number_float()) return NumberText(v.get<double>());
    if (v.is_number()) return v.dump();
    return std::nullopt;
  };
  if (auto it = report.find("error"); it != report.end() && it->is_object()) {
    for (const auto& [key, header] : {std::pair{"rel_l2", "X-Blz-Rel-L2"},
                                      std::pair{"cosine", "X-Blz-Cosine"},
                                      std::pair{"max_abs", "X-Blz-Max-Abs"}}) {
      if (auto v = it->find(key); v != it->end()) {
        if (std::optional<std::string> text = number(*v)) res->Set(header, *text);
      }
    }
  }
  for (const auto& [key, header] : {std::pair{"lossless_bytes", "X-Blz-Lossless-Bytes"},
                                    std::pair{"full_bytes", "X-Blz-Full-Bytes"}}) {
    if (auto v = report.find(key); v != report.end()) {
      if (std::optional<std::string> text = number(*v)) res->Set(header, *text);
    }
  }
}

}  // namespace

bool Registry::ParseDeltaQuery(const Route& route, const RequestHead& head, DeltaQuery* query,
                               Response* error) {
  // Every parameter is checked before anything is resolved or computed.
  for (const auto& [key, value] : route.target.query) {
    if (key == "from" || key == "to" || key == "strategy" || key == "async") continue;
    bool known = false;
    for (const OptionSpec& o : kOptions) known = known || key == o.name;
    if (!known) {
      *error = ErrorResponse(OciError::kBadRequest,
                             "unknown query parameter '" + key +
                                 "' (delta takes from, to, strategy, max_error, sparsity, "
                                 "rank_energy and async)",
                             json{{"parameter", key}});
      return false;
    }
  }
  const std::optional<std::string> strategy = route.Query("strategy");
  size_t index = std::size(kDeltaStrategies);
  for (size_t i = 0; i < std::size(kDeltaStrategies); ++i) {
    if (strategy.has_value() && *strategy == kDeltaStrategies[i]) index = i;
  }
  if (index == std::size(kDeltaStrategies)) {
    *error = ErrorResponse(
        OciError::kBadRequest,
        (strategy.has_value() ? "unknown strategy '" + *strategy + "'"
                              : std::string("missing ?strategy=")) +
            "; valid strategies: " + ValidStrategies(),
        json{{"strategy", strategy.value_or("")},
             {"valid", std::vector<std::string>(std::begin(kDeltaStrategies),
                                                std::end(kDeltaStrategies))}});
    return false;
  }
  query->strategy = *strategy;
  query->params = "strategy=" + *strategy;
  lossy::CreateOptions& options = query->options;
  for (const OptionSpec& o : kOptions) {
    const std::optional<std::string> text = route.Query(o.name);
    const bool read = ReadBy(o, *strategy);
    if (text.has_value() && !read) {
      *error = ErrorResponse(OciError::kBadRequest,
                             std::string(o.name) + " does not apply to strategy " + *strategy,
                             json{{"parameter", o.name}, {"strategy", *strategy}});
      return false;
    }
    if (!read) continue;
    double value = options.*o.field;
    if (text.has_value()) {
      const char* begin = text->data();
      const char* end = begin + text->size();
      const auto r = std::from_chars(begin, end, value);
      const bool in_range = r.ec == std::errc() && r.ptr == end && std::isfinite(value) &&
                            (o.min_open ? value > o.min : value >= o.min) &&
                            (o.max_open ? value < o.max : value <= o.max);
      if (!in_range) {
        *error = ErrorResponse(OciError::kBadRequest,
                               std::string(o.name) + " must be a number in " + RangeText(o) +
                                   ", not '" + *text + "'",
                               json{{"parameter", o.name}, {"value", *text}});
        return false;
      }
      if (std::find(o.allowed.begin(), o.allowed.end(), value) == o.allowed.end()) {
        *error = ErrorResponse(OciError::kBadRequest,
                               std::string(o.name) + " must be one of " + AllowedText(o) +
                                   " (the values this registry computes and caches), not '" +
                                   *text + "'",
                               json{{"parameter", o.name},
                                    {"value", *text},
                                    {"allowed", std::vector<double>(o.allowed.begin(),
                                                                    o.allowed.end())}});
        return false;
      }
      options.*o.field = value;
    }
    query->params += "&" + std::string(o.name) + "=" + NumberText(value);
  }
  // kDeltaStrategies lists the names in lossy::Strategy's order.
  static_assert(size_t(lossy::Strategy::kSparse) == 0 && size_t(lossy::Strategy::kAuto) == 5 &&
                std::size(kDeltaStrategies) == 6);
  options.strategy = lossy::Strategy(index);
  const std::optional<std::string> from = route.Query("from");
  const std::optional<std::string> to = route.Query("to");
  if (!ResolveFromTo(route, head, from, to, kUsage, query->paths, error)) return false;
  query->from = *from;
  query->to = *to;
  return true;
}

Result<Registry::CachedBlob> Registry::CachedDelta(const DeltaQuery& query, std::string* report,
                                                   bool* compute_failed) {
  auto compute = [&]() {
    return ComputeCached(
        &delta_locks_, query.from + ">" + query.to + "?" + query.params, "wdelta",
        [&]() -> Result<std::string> {
          BLZ_ASSIGN_OR_RETURN(store::LossyDeltaRecord cached,
                               db_->FindLossyDelta(query.from, query.to, query.params));
          *report = std::move(cached.report);
          return cached.delta_digest;
        },
        [&](const std::string& out) -> Status {
          if (!options_.create_delta) {
            return Unsupported("this server cannot compute lossy deltas");
          }
          Result<std::string> made =
              options_.create_delta(query.paths[0], query.paths[1], query.options, out);
          if (!made.ok()) {
            // Name the archives by digest, never by the server's paths.
            return Status(made.status().code(),
                          ReplaceAll(ReplaceAll(ReplaceAll(made.status().message(),
                                                           query.paths[0], query.from),
                                                query.paths[1], query.to),
                                     out, "the delta"));
          }
          *report = std::move(*made);
          return Status::Ok();
        },
        [&](const store::BlobInfo& blob) {
          return db_->RecordLossyDelta(store::LossyDeltaRecord{
              query.from, query.to, query.params, blob.digest, blob.size, *report});
        },
        compute_failed);
  };
  Result<CachedBlob> computed = RecomputeIfDamaged(compute);
  if (computed.ok()) {
    if (computed->hit) {
      (void)db_->TouchLossyDelta(query.from, query.to, query.params);  // LRU order only
    } else {
      deltas_computed_.fetch_add(1);
      EvictLossyDeltas(store::LossyDeltaRecord{query.from, query.to, query.params, "", 0, ""});
    }
  }
  return computed;
}

void Registry::EvictLossyDeltas(const store::LossyDeltaRecord& keep) {
  if (options_.delta_cache_bytes == 0) return;
  // Deleted the way garbage collection deletes (registry/garbage_collector.h), so that it is
  // safe across replicas: the epoch is taken before the rows go, and each blob goes in the
  // database's conditional delete (MetadataDb::DeleteBlobUnlessTouched), which keeps it when
  // a push on any replica touched it since (an upload or a recomputation of the same bytes)
  // or something references it (young links too: an upload whose manifest is on its way).
  // This process's pushes also hold the blob's lock, as for garbage collection.
  Result<int64_t> mark = db_->StartGcMark();
  if (!mark.ok()) return;  // over budget until the next computation
  Result<std::vector<store::LossyDeltaRecord>> evicted =
      db_->EvictLossyDeltas(options_.delta_cache_bytes, keep.from_digest, keep.to_digest,
                            keep.params);
  if (!evicted.ok()) return;
  const auto young = std::chrono::system_clock::now() - options_.gc_grace;
  const int64_t young_after = int64_t(std::chrono::system_clock::to_time_t(young));
  for (const store::LossyDeltaRecord& row : *evicted) {
    if (options_.before_delta_blob_delete) options_.before_delta_blob_delete(row.delta_digest);
    KeyedMutex::Lock lock(&blob_locks_, row.delta_digest);
    uint64_t freed = 0;
    // Any age (the blob is a cached computation); a failed removal stays recorded in
    // gc_deletions for the next collection.
    (void)db_->DeleteBlobUnlessTouched(
        row.delta_digest, young_after, *mark, "lossy-delta-eviction",
        int64_t(std::time(nullptr)),
        [&]() {
          return blobs_->RemoveIfOlder(
              row.delta_digest, std::chrono::system_clock::now() + std::chrono::hours(1));
        },
        &freed);
  }
}

namespace {

Response DeltaError(const Status& status, bool compute_failed, bool can_compute) {
  if (!compute_failed) return ErrorResponse(status, ErrorContext::kPatch);
  if (!can_compute) return ErrorResponse(OciError::kUnsupported, status.message());
  if (status.code() == Code::kInvalidArgument || status.code() == Code::kUnsupported) {
    return ErrorResponse(OciError::kBadRequest,
                         "cannot compute this lossy delta: " + status.message());
  }
  return ErrorResponse(OciError::kUnknown, "computing the lossy delta failed: " +
                                               status.ToString());
}

// The stored report text, parsed (a row written by this code always parses).
ojson ParseReport(const std::string& text) {
  ojson doc = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) doc = ojson::object();
  return doc;
}

}  // namespace

std::optional<Registry::CachedBlob> Registry::DeltaFor(const Route& route,
                                                      const RequestHead& head, DeltaQuery* query,
                                                      std::string* report, Response* error) {
  if (!ParseDeltaQuery(route, head, query, error)) return std::nullopt;
  if (std::optional<Response> throttled = ThrottleComputation(
          route, db_->FindLossyDelta(query->from, query->to, query->params).ok())) {
    *error = std::move(*throttled);
    return std::nullopt;
  }
  bool compute_failed = false;
  Result<CachedBlob> computed = CachedDelta(*query, report, &compute_failed);
  if (!computed.ok()) {
    *error = DeltaError(computed.status(), compute_failed, bool(options_.create_delta));
    return std::nullopt;
  }
  return std::move(*computed);
}

Response Registry::GetDelta(const Route& route, const RequestHead& head) {
  DeltaQuery query;
  std::string report;
  Response error;
  const std::optional<CachedBlob> computed = DeltaFor(route, head, &query, &report, &error);
  if (!computed) return error;
  metrics_.RecordComputed(Metrics::Computed::kLossyDelta, computed->hit);
  Response res = ServeFile(computed->blob.path, computed->blob.size, head, kBlzWdeltaMediaType);
  if (res.status < 300) {
    res.Set("Docker-Content-Digest", computed->blob.digest);
    res.Set("ETag", "\"" + computed->blob.digest + "\"");
    res.Set("Blz-Delta-Cache", computed->hit ? "hit" : "miss");
    SetDeltaHeaders(&res, ParseReport(report), query.strategy);
  }
  return res;
}

Response Registry::GetDeltaReport(const Route& route, const RequestHead& head) {
  DeltaQuery query;
  std::string report;
  Response error;
  const std::optional<CachedBlob> computed = DeltaFor(route, head, &query, &report, &error);
  if (!computed) return error;
  const ojson parsed = ParseReport(report);
  ojson doc = {{"digest", computed->blob.digest},
               {"size", computed->blob.size},
               {"from", query.from},
               {"to", query.to},
               {"params", query.params}};
  for (const auto& [key, value] : parsed.items()) {
    if (key != "path" && !doc.contains(key)) doc[key] = value;
  }
  Response res;
  res.body = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  res.Set("Content-Type", "application/json");
  res.Set("Docker-Content-Digest", computed->blob.digest);
  res.Set("ETag", "\"" + computed->blob.digest + "\"");
  res.Set("Blz-Delta-Cache", computed->hit ? "hit" : "miss");
  SetDeltaHeaders(&res, parsed, query.strategy);
  return res;
}

}  // namespace blz::registry
