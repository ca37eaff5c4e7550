// The Prometheus exposition of `blz serve` (registry/metrics.h, registry/metrics_handlers.h):
// the output is parsed line by line, as a scraper would.
#include "registry/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "registry/health_handlers.h"
#include "registry/metrics_handlers.h"
#include "registry/readiness.h"
#include "tests/registry/handler_harness.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

// A parsed exposition: the families (name -> type, with HELP seen) and every sample as
// "name{labels}" -> value. Fails the test on any line that breaks the 0.0.4 text format.
struct Exposition {
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  std::map<std::string, double> samples;

  double Get(const std::string& key) const {
    auto it = samples.find(key);
    EXPECT_NE(it, samples.end()) << "no sample " << key;
    return it == samples.end() ? -1 : it->second;
  }
};

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// The family a sample belongs to (histograms: without _bucket/_sum/_count).
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      std::string base = name.substr(0, name.size() - s.size());
      auto it = types.find(base);
      if (it != types.end() &&
          (it->second == "histogram" || (it->second == "summary" && s != "_bucket"))) {
        return base;
      }
    }
  }
  return name;
}

void ParseInto(const std::string& text, Exposition* out) {
  Exposition& e = *out;
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string rest = line.substr(7);
      const std::string name = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(e.helped.insert(name).second) << "second HELP for " << name;
      EXPECT_GT(rest.size(), name.size() + 1) << "empty HELP: " << line;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const size_t sp = rest.find(' ');
      const std::string name = rest.substr(0, sp), type = rest.substr(sp + 1);
      EXPECT_TRUE(e.helped.count(name)) << "TYPE before HELP: " << line;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram" || type == "summary") << line;
      if (type == "counter") {
        EXPECT_EQ(name.substr(name.size() - 6), "_total") << "counter name: " << name;
      }
      EXPECT_TRUE(e.types.emplace(name, type).second) << "second TYPE for " << name;
      continue;
    }
    ASSERT_FALSE(line.empty() || line[0] == '#') << "unexpected line: '" << line << "'";
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i], i == 0)) ++i;
    const std::string name = line.substr(0, i);
    ASSERT_FALSE(name.empty()) << line;
    std::string key = name;
    if (i < line.size() && line[i] == '{') {
      const size_t close = line.find("} ", i);
      ASSERT_NE(close, std::string::npos) << line;
      key = line.substr(0, close + 1);
      i = close + 1;
    }
    ASSERT_LT(i, line.size());
    ASSERT_EQ(line[i], ' ') << line;
    const std::string value = line.substr(i + 1);
    size_t used = 0;
    double v = 0;
    if (value == "+Inf") {
      v = 1.0 / 0.0;
      used = value.size();
    } else {
      v = std::stod(value, &used);
    }
    EXPECT_EQ(used, value.size()) << line;
    const std::string family = FamilyOf(name, e.types);
    EXPECT_TRUE(e.types.count(family)) << "sample before its TYPE: " << line;
    EXPECT_TRUE(e.samples.emplace(key, v).second) << "duplicate sample: " << line;
  }
}

Exposition Parse(const std::string& text) {
  Exposition e;
  ParseInto(text, &e);
  return e;
}

TEST(MetricsTest, RouteKinds) {
  const std::string d = "sha256:" + std::string(64, 'a');
  const std::map<std::string, std::string> cases = {
      {"/v2/", "base"},
      {"/v2", "base"},
      {"/v2/_catalog?n=10", "catalog"},
      {"/v2/org/m/blobs/" + d, "blob"},
      {"/v2/blobs/blobs/" + d, "blob"},
      {"/v2/org/m/blobs/uploads/", "upload"},
      {"/v2/org/m/blobs/uploads/?digest=" + d, "upload"},
      {"/v2/org/m/blobs/uploads/0f3a-uuid", "upload"},
      {"/v2/org/m/manifests/v1", "manifest"},
      {"/v2/m/manifests/blobs", "manifest"},  // a tag named like a route word
      {"/v2/m/referrers/" + d, "referrers"},
      {"/v2/org/m/tags/list?n=5", "tags"},
      {"/v2/m/blz/patch?from=a&to=b", "patch"},
      {"/v2/m/blz/diff?from=a&to=b", "value_diff"},
      {"/v2/_blz/storage", "storage"},
      {"/v2/_blz/repositories?q=x", "repositories"},
      {"/v2/org/m/blz/versions", "versions"},
      {"/v2/org/m/blz/version?digest=" + d, "version"},
      {"/v2/org/m/blz/stats?digest=" + d + "&async=1", "stats"},
      {"/v2/org/m/blz/patch-report?from=a&to=b", "patch_report"},
      {"/v2/org/m/blz/delta?from=a&to=b&strategy=bitdelta", "delta"},
      {"/v2/org/m/blz/delta-report?from=a&to=b&strategy=auto&async=1", "delta_report"},
      {"/v2/_blz/structures/" + std::string(64, 'b'), "structures"},
      {"/metrics", "metrics"},
      {"/metrics?x=1", "metrics"},
      {"/healthz", "healthz"},
      {"/readyz?verbose", "readyz"},
      {"/", "other"},
      {"-", "other"},
      {"/v2/m", "other"},
      {"/favicon.ico", "other"},
  };
  for (const auto& [target, kind] : cases) EXPECT_EQ(RouteKind(target), kind) << target;
}

TEST(MetricsTest, EmptyExpositionIsWellFormed) {
  Metrics m;
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.types.at("blz_http_requests_total"), "counter");
  EXPECT_EQ(e.types.at("blz_http_request_duration_seconds"), "histogram");
  EXPECT_EQ(e.Get("blz_gc_runs_total"), 0);
  EXPECT_EQ(e.Get("blz_patches_served_total{result=\"computed\"}"), 0);
}

TEST(MetricsTest, RequestsBytesDurationsCacheHitsAndGc) {
  Metrics m;
  m.RecordRequest("blob", "GET", 200, 0, 1000, 0.002, false);
  m.RecordRequest("blob", "GET", 200, 0, 500, 0.3, true);
  m.RecordRequest("blob", "HEAD", 404, 0, 0, 0.001, false);
  m.RecordRequest("upload", "PUT", 0, 77, 0, 45.0, true);
  m.RecordRequest("other", "BREW", 405, 0, 10, 4000.0, false);
  m.RecordComputed(Metrics::Computed::kPatch, false);
  m.RecordComputed(Metrics::Computed::kPatch, true);
  m.RecordComputed(Metrics::Computed::kPatch, true);
  m.RecordComputed(Metrics::Computed::kValueDiff, true);
  m.RecordComputed(Metrics::Computed::kFullPatch, false);
  m.RecordGc(4096);
  m.RecordGc(1);
  Exposition e = Parse(m.Render());

  EXPECT_EQ(e.Get("blz_http_requests_total{route=\"blob\",method=\"GET\",code=\"200\"}"), 2);
  EXPECT_EQ(e.Get("blz_http_requests_total{route=\"blob\",method=\"HEAD\",code=\"404\"}"), 1);
  EXPECT_EQ(e.Get("blz_http_requests_total{route=\"upload\",method=\"PUT\",code=\"none\"}"), 1);
  EXPECT_EQ(e.Get("blz_http_requests_total{route=\"other\",method=\"other\",code=\"405\"}"), 1);
  EXPECT_EQ(e.Get("blz_http_requests_aborted_total{route=\"blob\"}"), 1);
  EXPECT_EQ(e.Get("blz_http_requests_aborted_total{route=\"upload\"}"), 1);
  EXPECT_EQ(e.Get("blz_http_sent_bytes_total{route=\"blob\"}"), 1500);
  EXPECT_EQ(e.Get("blz_http_received_bytes_total{route=\"upload\"}"), 77);

  // Cumulative buckets; +Inf equals the count; the sum adds the durations.
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"blob\",le=\"0.005\"}"), 2);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"blob\",le=\"0.25\"}"), 2);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"blob\",le=\"1\"}"), 3);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"blob\",le=\"+Inf\"}"), 3);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_count{route=\"blob\"}"), 3);
  EXPECT_NEAR(e.Get("blz_http_request_duration_seconds_sum{route=\"blob\"}"), 0.303, 1e-9);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"upload\",le=\"15\"}"), 0);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"upload\",le=\"60\"}"), 1);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"other\",le=\"1800\"}"), 0);
  EXPECT_EQ(e.Get("blz_http_request_duration_seconds_bucket{route=\"other\",le=\"+Inf\"}"), 1);

  EXPECT_EQ(e.Get("blz_patches_served_total{result=\"computed\"}"), 1);
  EXPECT_EQ(e.Get("blz_patches_served_total{result=\"cache_hit\"}"), 2);
  EXPECT_EQ(e.Get("blz_value_diffs_served_total{result=\"cache_hit\"}"), 1);
  EXPECT_EQ(e.Get("blz_value_diffs_served_total{result=\"computed\"}"), 0);
  EXPECT_EQ(e.Get("blz_full_patches_served_total{result=\"computed\"}"), 1);
  EXPECT_EQ(e.Get("blz_gc_runs_total"), 2);
  EXPECT_EQ(e.Get("blz_gc_freed_bytes_total"), 4097);
  EXPECT_GT(e.Get("blz_gc_last_run_timestamp_seconds"), 1.7e9);
}

TEST(MetricsTest, ExtraFamiliesAndLabelEscaping) {
  Metrics m;
  std::vector<MetricFamily> extra = {
      {"blz_test_info", "A help text with a \\ and a\nnewline.", "gauge",
       {{{{"name", "a\"b\\c\nd"}}, 1}, {{{"name", "plain"}}, 2.5}}}};
  const std::string text = m.Render(extra);
  EXPECT_NE(text.find("# HELP blz_test_info A help text with a \\\\ and a\\nnewline.\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("blz_test_info{name=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  Exposition e = Parse(text);
  EXPECT_EQ(e.Get("blz_test_info{name=\"plain\"}"), 2.5);
}

TEST(MetricsTest, ConcurrentRecordingLosesNothing) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < 1000; ++i) {
        m.RecordRequest(t % 2 == 0 ? "blob" : "manifest", "GET", 200, 1, 2, 0.001, false);
        m.RecordComputed(Metrics::Computed::kPatch, i % 2 == 0);
        if (i % 100 == 0) (void)m.Render();
      }
    });
  }
  for (auto& th : threads) th.join();
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.Get("blz_http_requests_total{route=\"blob\",method=\"GET\",code=\"200\"}"), 2000);
  EXPECT_EQ(e.Get("blz_http_requests_total{route=\"manifest\",method=\"GET\",code=\"200\"}"),
            2000);
  EXPECT_EQ(e.Get("blz_http_sent_bytes_total{route=\"blob\"}"), 4000);
  EXPECT_EQ(e.Get("blz_patches_served_total{result=\"computed\"}"), 2000);
  EXPECT_EQ(e.Get("blz_patches_served_total{result=\"cache_hit\"}"), 2000);
}

// The handler: storage bytes by kind measured in the data directory, the archive storage's
// counters, 405 for other methods.
TEST(MetricsHandlerTest, ServesTheExpositionWithStorageBytes) {
  SkipUnlessFsStorage();  // measures the data directory's local files
  testing::Harness h;
  const std::string blob(3000, 'x');
  h.PushBlob("m", blob);
  blz::testing::WriteFileBytes(h.data() + "/uploads/session-leftover", std::string(123, 'u'));
  blz::testing::WriteFileBytes(h.data() + "/quarantine/damaged", std::string(7, 'q'));

  RequestHead head;
  head.method = "GET";
  head.target = "/metrics";
  Response res = HandleMetrics(h.registry(), head);
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(res.Get("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  Exposition e = Parse(res.body);
  EXPECT_EQ(e.Get("blz_storage_bytes{kind=\"blobs\"}"), 3000);
  EXPECT_EQ(e.Get("blz_storage_bytes{kind=\"uploads\"}"), 123);
  EXPECT_EQ(e.Get("blz_storage_bytes{kind=\"quarantine\"}"), 7);
  EXPECT_EQ(e.Get("blz_storage_bytes{kind=\"cache\"}"), 0);
  EXPECT_GT(e.Get("blz_storage_bytes{kind=\"database\"}"), 0);
  EXPECT_EQ(e.types.at("blz_storage_bytes"), "gauge");
  EXPECT_EQ(e.Get("blz_archives_pending"), 0);
  EXPECT_EQ(e.Get("blz_archive_rebuilds_total"), 0);
  EXPECT_EQ(e.Get("blz_archive_cache_limit_bytes"),
            double(h.registry().storage().status().cache_limit));

  head.method = "HEAD";
  Response head_res = HandleMetrics(h.registry(), head);
  EXPECT_EQ(head_res.status, 200);
  EXPECT_TRUE(head_res.head_only);

  head.method = "POST";
  Response post = HandleMetrics(h.registry(), head);
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.Get("Allow"), "GET, HEAD");
}

// Bytes at rest (registry/storage_accounting.h): the total and, on a public registry, one
// series per repository; a private registry names no repository.
TEST(MetricsHandlerTest, StorageGaugesTotalAndPerRepository) {
  const std::string a = testing::TinyArchive(1), b = testing::TinyArchive(2);
  const uint64_t config_a =
      std::string("{\"archive_size\":" + std::to_string(a.size()) + "}").size();
  // Archives of the same size share their config blob (Harness::ManifestFor): counted once.
  const uint64_t config_b =
      a.size() == b.size()
          ? 0
          : std::string("{\"archive_size\":" + std::to_string(b.size()) + "}").size();
  RequestHead head;
  head.method = "GET";
  head.target = "/metrics";
  {
    testing::Harness h;
    testing::PushVersion(&h, "org/m", "v1", a);
    testing::PushVersion(&h, "org/n", "v1", a);  // shared: once in the total
    testing::PushVersion(&h, "org/n", "v2", b);
    Response res = HandleMetrics(h.registry(), head);
    ASSERT_EQ(res.status, 200) << res.body;
    Exposition e = Parse(res.body);
    EXPECT_EQ(e.types.at("blz_storage_model_bytes"), "gauge");
    EXPECT_EQ(e.types.at("blz_storage_at_rest_bytes"), "gauge");
    EXPECT_EQ(e.Get("blz_storage_model_bytes"), double(a.size() + b.size()));
    EXPECT_EQ(e.Get("blz_storage_at_rest_bytes"), double(a.size() + b.size() + config_a + config_b));
    EXPECT_EQ(e.Get("blz_storage_model_bytes{repository=\"org/m\"}"), double(a.size()));
    EXPECT_EQ(e.Get("blz_storage_at_rest_bytes{repository=\"org/m\"}"),
              double(a.size() + config_a));
    EXPECT_EQ(e.Get("blz_storage_at_rest_bytes{repository=\"org/n\"}"),
              double(a.size() + b.size() + config_a + config_b));
  }
  {
    RegistryOptions o;
    o.private_mode = true;
    testing::Harness h(o);
    testing::PushVersion(&h, "org/secret", "v1", a);
    Response res = HandleMetrics(h.registry(), head);
    ASSERT_EQ(res.status, 200) << res.body;
    Exposition e = Parse(res.body);
    EXPECT_EQ(e.Get("blz_storage_model_bytes"), double(a.size()));
    EXPECT_EQ(res.body.find("org/secret"), std::string::npos);
  }
}

// At most kStorageRepositorySeries repositories get a series (those with the most bytes at
// rest); the rest are summed under repository="_other".
TEST(MetricsTest, StorageGaugesHaveBoundedCardinality) {
  StorageAccount account;
  uint64_t other_at_rest = 0, other_model = 0;
  for (size_t i = 0; i < kStorageRepositorySeries + 10; ++i) {
    RepositoryStorage r;
    r.name = "r" + std::to_string(1000 + i);
    r.figures.model_bytes = 10 * (i + 1);
    r.figures.archive_at_rest_bytes = i + 1;  // r1000 has the least
    if (i < 10) {
      other_at_rest += i + 1;
      other_model += 10 * (i + 1);
    }
    account.total.model_bytes += r.figures.model_bytes;
    account.total.archive_at_rest_bytes += r.figures.archive_at_rest_bytes;
    account.repositories.push_back(r);
  }
  std::vector<MetricFamily> families = StorageAccountFamilies(account, true);
  ASSERT_EQ(families.size(), 2u);
  for (const MetricFamily& f : families) {
    EXPECT_EQ(f.samples.size(), 1 + kStorageRepositorySeries + 1) << f.name;
  }
  Metrics m;
  Exposition e = Parse(m.Render(families));
  EXPECT_EQ(e.Get("blz_storage_at_rest_bytes{repository=\"_other\"}"), double(other_at_rest));
  EXPECT_EQ(e.Get("blz_storage_model_bytes{repository=\"_other\"}"), double(other_model));
  EXPECT_EQ(e.samples.count("blz_storage_at_rest_bytes{repository=\"r1000\"}"), 0u);
  EXPECT_EQ(e.Get("blz_storage_at_rest_bytes{repository=\"r1059\"}"), 60);
  EXPECT_EQ(e.Get("blz_storage_at_rest_bytes"), double(account.total.at_rest_bytes()));
  // Without per-repository series: the totals only.
  for (const MetricFamily& f : StorageAccountFamilies(account, false)) {
    EXPECT_EQ(f.samples.size(), 1u) << f.name;
  }
}

TEST(MetricsHandlerTest, IsMetricsTarget) {
  EXPECT_TRUE(IsMetricsTarget("/metrics"));
  EXPECT_TRUE(IsMetricsTarget("/metrics?name[]=x"));
  EXPECT_FALSE(IsMetricsTarget("/metrics/"));
  EXPECT_FALSE(IsMetricsTarget("/v2/metrics"));
  EXPECT_FALSE(IsMetricsTarget("/metricsx"));
}

// The dependency families: readiness, the metadata DB's statements, the blob store's calls
// by operation (a push stores at least one blob: one "put").
TEST(MetricsHandlerTest, DependencyLatenciesAndReadiness) {
  testing::Harness h;
  h.PushBlob("m", std::string(100, 'd'));
  RequestHead head;
  head.method = "GET";
  head.target = "/metrics";
  Response res = HandleMetrics(h.registry(), head);
  ASSERT_EQ(res.status, 200) << res.body;
  Exposition e = Parse(res.body);
  EXPECT_EQ(e.types.at("blz_ready"), "gauge");
  EXPECT_EQ(e.Get("blz_ready"), 1);
  EXPECT_EQ(e.types.at("blz_metadata_query_seconds"), "summary");
  EXPECT_GT(e.Get("blz_metadata_query_seconds_count"), 0);
  EXPECT_GE(e.Get("blz_metadata_query_seconds_sum"), 0);
  EXPECT_EQ(e.types.at("blz_blob_store_seconds"), "summary");
  EXPECT_GE(e.Get("blz_blob_store_seconds_count{op=\"put\"}"), 1);
  for (const char* op : {"stat", "get", "put", "delete", "list"}) {
    EXPECT_GE(e.Get(std::string("blz_blob_store_seconds_sum{op=\"") + op + "\"}"), 0) << op;
    EXPECT_GE(e.Get(std::string("blz_blob_store_errors_total{op=\"") + op + "\"}"), 0) << op;
  }
  EXPECT_GE(e.Get("blz_metadata_query_errors_total"), 0);
}

TEST(MetricsTest, DependencyFamiliesWithoutBlobTimingsAreWellFormed) {
  Metrics m;
  store::sql::QueryStats q;
  q.count = 3;
  q.seconds = 0.25;
  q.errors = 1;
  Exposition e = Parse(m.Render(DependencyFamilies(false, q, nullptr)));
  EXPECT_EQ(e.Get("blz_ready"), 0);
  EXPECT_EQ(e.Get("blz_metadata_query_seconds_count"), 3);
  EXPECT_EQ(e.Get("blz_metadata_query_seconds_sum"), 0.25);
  EXPECT_EQ(e.Get("blz_metadata_query_errors_total"), 1);
}

// The probe's cache: within the ttl the last result is reused (no probe); past it both parts
// are probed again. A failing part makes the replica unready and /readyz answer 503 naming it.
TEST(HealthHandlerTest, ReadinessIsCachedAndNamesTheFailedPart) {
  int pings = 0;
  ReadinessProbe cached([&] { ++pings; return Status::Ok(); }, [] { return Status::Ok(); },
                        std::chrono::hours(1));
  EXPECT_TRUE(cached.Check().ready);
  EXPECT_TRUE(cached.Check().ready);
  EXPECT_EQ(pings, 1);
  int fresh_pings = 0;
  ReadinessProbe fresh([&] { ++fresh_pings; return Unavailable("postgresql://blz@db:5432/blz: down"); },
                       [] { return Status::Ok(); }, std::chrono::milliseconds(0));
  Readiness r = fresh.Check();
  EXPECT_FALSE(r.ready);
  EXPECT_FALSE(r.metadata.ok());
  EXPECT_TRUE(r.storage.ok());
  (void)fresh.Check();
  EXPECT_EQ(fresh_pings, 2);
}

TEST(HealthHandlerTest, HealthzAndReadyzOfAWorkingRegistry) {
  testing::Harness h;
  RequestHead head;
  head.method = "GET";
  head.target = "/healthz";
  EXPECT_EQ(HealthTargetOf("/healthz"), HealthTarget::kHealthz);
  EXPECT_EQ(HealthTargetOf("/readyz?x"), HealthTarget::kReadyz);
  EXPECT_EQ(HealthTargetOf("/readyz/"), HealthTarget::kNone);
  EXPECT_EQ(HealthTargetOf("/v2/healthz"), HealthTarget::kNone);
  Response healthz = HandleHealth(h.registry(), head, HealthTarget::kHealthz);
  EXPECT_EQ(healthz.status, 200);
  EXPECT_EQ(healthz.body, "{\"status\":\"ok\"}\n");
  head.target = "/readyz";
  Response readyz = HandleHealth(h.registry(), head, HealthTarget::kReadyz);
  EXPECT_EQ(readyz.status, 200) << readyz.body;
  EXPECT_EQ(readyz.body, "{\"status\":\"ready\"}\n");
  EXPECT_EQ(readyz.Get("Cache-Control"), "no-store");
  head.method = "DELETE";
  Response del = HandleHealth(h.registry(), head, HealthTarget::kReadyz);
  EXPECT_EQ(del.status, 405);
  EXPECT_EQ(del.Get("Allow"), "GET, HEAD");
}

}  // namespace
}  // namespace blz::registry
