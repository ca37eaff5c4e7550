#include "registry/metrics_handlers.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>

#include "registry/errors.h"

namespace blz::registry {
namespace {

namespace fs = std::filesystem;

// Bytes of the regular files below `dir` (symlinks not followed); 0 when it is missing.
uint64_t TreeBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec)) {
      const uintmax_t size = it->file_size(fec);
      if (!fec) total += size;
    }
  }
  return total;
}

uint64_t FileBytes(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  return ec ? 0 : size;
}

MetricFamily Single(std::string name, std::string help, std::string type, double value) {
  return MetricFamily{std::move(name), std::move(help), std::move(type), {{{}, value}}};
}

}  // namespace

bool IsMetricsTarget(std::string_view target) {
  const size_t q = target.find('?');
  return target.substr(0, q) == kMetricsPath;
}

StorageBytes MeasureStorage(const std::string& data_dir) {
  StorageBytes b;
  b.blobs = TreeBytes(data_dir + "/blobs");
  b.cache = TreeBytes(data_dir + "/cache");
  b.uploads = TreeBytes(data_dir + "/uploads");
  b.quarantine = TreeBytes(data_dir + "/quarantine");
  for (const char* f : {"/blz.db", "/blz.db-wal", "/blz.db-shm"}) {
    b.database += FileBytes(data_dir + f);
  }
  return b;
}

std::vector<MetricFamily> ScrapeFamilies(const StorageStatus& st, const StorageBytes& bytes) {
  std::vector<MetricFamily> out;
  MetricFamily storage{"blz_storage_bytes",
                       "Bytes on disk in the data directory by kind: blobs (stored blobs), "
                       "cache (archives rebuilt from full patches), uploads (upload sessions "
                       "and bodies in flight), quarantine (damaged blobs set aside), database "
                       "(the metadata DB). Measured at scrape time.",
                       "gauge",
                       {}};
  for (const auto& [kind, n] : {std::pair<const char*, uint64_t>{"blobs", bytes.blobs},
                                {"cache", bytes.cache},
                                {"uploads", bytes.uploads},
                                {"quarantine", bytes.quarantine},
                                {"database", bytes.database}}) {
    storage.samples.push_back({{{"kind", kind}}, double(n)});
  }
  out.push_back(std::move(storage));
  out.push_back(Single("blz_archive_cache_bytes",
                       "Bytes of the archives rebuilt into <data>/cache, as the archive storage "
                       "accounts them.",
                       "gauge", double(st.cache_bytes)));
  out.push_back(Single("blz_archive_cache_entries", "Archives held in <data>/cache.", "gauge",
                       double(st.cache_entries)));
  out.push_back(Single("blz_archive_cache_limit_bytes",
                       "The soft bound on <data>/cache (blz serve --cache-size).", "gauge",
                       double(st.cache_limit)));
  out.push_back(Single("blz_archives_pending",
                       "Archives queued (or being) compressed into full patches.", "gauge",
                       double(st.pending)));
  out.push_back(Single("blz_archives_compressed_total",
                       "Raw archive blobs replaced by their verified full patch.", "counter",
                       double(st.compressed)));
  out.push_back(Single("blz_archive_compressions_failed_total",
                       "Archive compressions that failed (the raw blob was kept).", "counter",
                       double(st.failed)));
  out.push_back(Single("blz_full_patches_computed_total",
                       "Full patches computed (in the background or on request).", "counter",
                       double(st.full_patches_computed)));
  out.push_back(Single("blz_archive_rebuilds_total",
                       "Archives rebuilt from their full patch into the cache.", "counter",
                       double(st.rebuilds)));
  out.push_back(Single("blz_archives_chained_total",
                       "Archives stored as a chain link (a patch from a parent archive).",
                       "counter", double(st.chained)));
  out.push_back(Single("blz_chain_links_rebased_total",
                       "Chain links re-based onto a new parent or their full patch.", "counter",
                       double(st.rebased)));
  out.push_back(Single("blz_chain_rebuilds_total",
                       "Archives rebuilt from their chain into the cache.", "counter",
                       double(st.chain_rebuilds)));
  out.push_back(Single("blz_blobs_quarantined_total",
                       "Stored blobs found damaged on read and moved to <data>/quarantine.",
                       "counter", double(st.quarantined)));
  return out;
}

std::vector<MetricFamily> DependencyFamilies(bool ready, const store::sql::QueryStats& queries,
                                             const store::BlobStoreTimings* blobs) {
  std::vector<MetricFamily> out;
  out.push_back(Single("blz_ready",
                       "1 when the metadata database and the blob store answer (GET /readyz "
                       "is 200), else 0. Probed at most once a second.",
                       "gauge", ready ? 1 : 0));
  out.push_back(MetricFamily{"blz_metadata_query_seconds",
                             "Statements run on the metadata database by this replica and "
                             "their wall time (transaction BEGIN, COMMIT and lock waits "
                             "included).",
                             "summary",
                             {{{}, queries.seconds, "_sum"}, {{}, double(queries.count), "_count"}}});
  out.push_back(Single("blz_metadata_query_errors_total",
                       "Statements on the metadata database that failed (a lost connection, a "
                       "constraint, a serialization failure).",
                       "counter", double(queries.errors)));
  MetricFamily seconds{"blz_blob_store_seconds",
                       "Calls of this replica to the blob store driver and their wall time, by "
                       "operation: stat, get (a download or re-hash), put, delete, list.",
                       "summary",
                       {}};
  MetricFamily errors{"blz_blob_store_errors_total",
                      "Blob store driver calls that returned an error (not-found included), by "
                      "operation.",
                      "counter",
                      {}};
  if (blobs != nullptr) {
    for (const auto& [op, t] :
         {std::pair<const char*, const store::BlobStoreTimings::Op*>{"stat", &blobs->stat},
          {"get", &blobs->get},
          {"put", &blobs->put},
          {"delete", &blobs->remove},
          {"list", &blobs->list}}) {
      seconds.samples.push_back({{{"op", op}}, t->seconds(), "_sum"});
      seconds.samples.push_back({{{"op", op}}, double(t->count.load()), "_count"});
      errors.samples.push_back({{{"op", op}}, double(t->errors.load()), ""});
    }
  }
  out.push_back(std::move(seconds));
  out.push_back(std::move(errors));
  return out;
}

std::vector<MetricFamily> StorageAccountFamilies(const StorageAccount& account,
                                                 bool per_repository) {
  MetricFamily model{"blz_storage_model_bytes",
                     "The models' own size: the archive sizes of the stored versions (what "
                     "full copies cost). Without labels: the total, each archive once; with "
                     "`repository`: that repository's versions (at most 50 series plus "
                     "repository=\"_other\").",
                     "gauge",
                     {{{}, double(account.total.model_bytes)}}};
  MetricFamily at_rest{"blz_storage_at_rest_bytes",
                       "Bytes at rest of the stored versions: each archive in its stored form "
                       "(raw, or its full patch) plus the configs and other layers. Without "
                       "labels: the total, each blob once; with `repository`: what it "
                       "references (shared blobs in each repository).",
                       "gauge",
                       {{{}, double(account.total.at_rest_bytes())}}};
  if (per_repository) {
    std::vector<const RepositoryStorage*> order;
    for (const RepositoryStorage& r : account.repositories) order.push_back(&r);
    std::stable_sort(order.begin(), order.end(),
                     [](const RepositoryStorage* a, const RepositoryStorage* b) {
                       return a->figures.at_rest_bytes() > b->figures.at_rest_bytes();
                     });
    uint64_t other_model = 0, other_at_rest = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const StorageFigures& f = order[i]->figures;
      if (i < kStorageRepositorySeries) {
        model.samples.push_back({{{"repository", order[i]->name}}, double(f.model_bytes)});
        at_rest.samples.push_back({{{"repository", order[i]->name}}, double(f.at_rest_bytes())});
      } else {
        other_model += f.model_bytes;
        other_at_rest += f.at_rest_bytes();
      }
    }
    if (order.size() > kStorageRepositorySeries) {
      model.samples.push_back({{{"repository", kStorageOtherRepositories}}, double(other_model)});
      at_rest.samples.push_back(
          {{{"repository", kStorageOtherRepositories}}, double(other_at_rest)});
    }
  }
  std::vector<MetricFamily> out;
  out.push_back(std::move(model));
  out.push_back(std::move(at_rest));
  return out;
}

Response HandleMetrics(Registry& registry, const RequestHead& head) {
  if (head.method != "GET" && head.method != "HEAD") {
    Response res = ErrorResponse(OciError::kUnsupported,
                                 "method " + head.method + " not allowed on /metrics");
    res.Set("Allow", "GET, HEAD");
    return res;
  }
  Response res;
  std::vector<MetricFamily> families =
      ScrapeFamilies(registry.storage().status(), MeasureStorage(registry.data_dir()));
  for (MetricFamily& f : DependencyFamilies(registry.readiness().Check().ready,
                                            registry.db().query_stats(),
                                            registry.blobs().timings())) {
    families.push_back(std::move(f));
  }
  // Reused for kStorageAccountTtl; a failure (the DB is down) leaves the gauges out, as
  // blz_ready says why.
  Result<std::shared_ptr<const StorageAccount>> account =
      registry.storage_accounts().Get(registry.blobs(), registry.db());
  if (account.ok()) {
    for (MetricFamily& f :
         StorageAccountFamilies(**account, !registry.options().private_mode)) {
      families.push_back(std::move(f));
    }
  }
  res.body = registry.metrics().Render(families);
  res.Set("Content-Type", kMetricsContentType);
  res.Set("Cache-Control", "no-store");
  res.head_only = head.method == "HEAD";
  return res;
}

}  // namespace blz::registry
