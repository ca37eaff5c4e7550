// GET /metrics of `blz serve`: the server's counters (registry/metrics.h) plus values read at
// scrape time (the archive storage's counters, bytes on disk by kind), in the Prometheus text
// exposition format 0.0.4. Served by the session (registry/http_session.cc) next to the
// registry's /v2/ routes, unless disabled (`blz serve --no-metrics`, SessionOptions::metrics).
// Unauthenticated, like a health check: it names no tag or digest (route kinds only), and
// repositories only on a public registry (StorageAccountFamilies). Pure: a RequestHead in, a
// Response out.
#ifndef BLZ_REGISTRY_METRICS_HANDLERS_H_
#define BLZ_REGISTRY_METRICS_HANDLERS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "registry/http_message.h"
#include "registry/metrics.h"
#include "registry/registry.h"
#include "registry/storage_accounting.h"

namespace blz::registry {

inline constexpr char kMetricsPath[] = "/metrics";
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Is the target's path (query ignored) /metrics?
bool IsMetricsTarget(std::string_view target);

// Bytes of the regular files under each part of a data directory: <data>/blobs, <data>/cache
// (archives rebuilt from full patches), <data>/uploads (upload sessions, request bodies in
// flight), <data>/quarantine (damaged blobs set aside) and the metadata DB (blz.db with its
// -wal and -shm files). Missing parts count 0; unreadable entries are skipped.
struct StorageBytes {
  uint64_t blobs = 0;
  uint64_t cache = 0;
  uint64_t uploads = 0;
  uint64_t quarantine = 0;
  uint64_t database = 0;
};
StorageBytes MeasureStorage(const std::string& data_dir);

// The families read at scrape time: blz_storage_bytes{kind} (from `bytes`) and the archive
// storage's status (registry/archive_storage.h StorageStatus).
std::vector<MetricFamily> ScrapeFamilies(const StorageStatus& status, const StorageBytes& bytes);

// The families of this replica's dependencies: blz_ready (gauge, 1 when /readyz would answer
// 200), blz_metadata_query_seconds (summary: statements run on the metadata database and their
// wall time), blz_metadata_query_errors_total, blz_blob_store_seconds{op} (summary over the
// driver calls by op: stat, get, put, delete, list; store/timed_blob_store.h) and
// blz_blob_store_errors_total{op}. `blobs` may be null (no timings: the blob families have no
// samples).
std::vector<MetricFamily> DependencyFamilies(bool ready, const store::sql::QueryStats& queries,
                                             const store::BlobStoreTimings* blobs);

// Bytes at rest against the models' own size (registry/storage_accounting.h):
// blz_storage_model_bytes and blz_storage_at_rest_bytes (gauges), one sample without labels
// for the total and, when `per_repository`, one per repository (label `repository`) for the
// kStorageRepositorySeries repositories with the most bytes at rest (ties by name) plus one
// labelled kStorageOtherRepositories summing the rest. HandleMetrics labels repositories only
// on a public registry (their names are public there); a private registry exports the total.
inline constexpr size_t kStorageRepositorySeries = 50;
// Not a valid repository name (names start with a lower-case letter or digit), so it cannot
// collide with one.
inline constexpr char kStorageOtherRepositories[] = "_other";
std::vector<MetricFamily> StorageAccountFamilies(const StorageAccount& account,
                                                 bool per_repository);

// GET or HEAD /metrics: 200 with the exposition text (Content-Type kMetricsContentType);
// another method: 405 with Allow: GET, HEAD. Walks the data directory (MeasureStorage): run it
// off the I/O threads.
Response HandleMetrics(Registry& registry, const RequestHead& head);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_METRICS_HANDLERS_H_
