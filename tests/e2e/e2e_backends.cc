#include "tests/e2e/e2e_backends.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/e2e/subprocess.h"
#include "tests/store/postgres/postgres_server.h"
#include "tests/store/s3/ceph_s3_server.h"

namespace blz::testing {
namespace {

constexpr char kBucket[] = "blz-e2e-tests";

bool EnvIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

// This binary's PostgreSQL server, started on first use and stopped after the last test;
// nullptr (with a failure reported) when it did not start.
PostgresServer* SharedPostgres() {
  class StopAtEnd : public ::testing::Environment {
   public:
    explicit StopAtEnd(std::unique_ptr<PostgresServer>* s) : s_(s) {}
    void TearDown() override {
      if (*s_) (*s_)->Stop();
    }

   private:
    std::unique_ptr<PostgresServer>* s_;
  };
  static auto* shared = [] {
    auto* s = new std::unique_ptr<PostgresServer>();
    auto server = PostgresServer::Start();
    if (server.ok()) {
      *s = std::move(*server);
      ::testing::AddGlobalTestEnvironment(new StopAtEnd(s));
      std::fprintf(stderr, "PostgreSQL test server at %s (started in %.2f s)\n",
                   (*s)->url().c_str(), (*s)->start_seconds());
    } else {
      ADD_FAILURE() << "BLZ_TEST_METADATA=postgres but PostgreSQL did not start: "
                    << server.status().ToString();
    }
    return s;
  }();
  return shared->get();
}

// The value after `flag` in argv, or "".
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) return argv[i + 1];
  }
  return "";
}
bool HasFlag(const std::vector<std::string>& argv, const std::string& flag) {
  return std::any_of(argv.begin(), argv.end(), [&](const std::string& a) {
    return a == flag || a.rfind(flag + "=", 0) == 0;
  });
}

struct Backends {
  std::string metadata;  // "" until assigned
  std::string storage;
};

std::mutex backends_mu;
std::map<std::string, Backends> by_data;  // key: --data (or --config) of the serve; backends_mu

void ApplyBackends(std::vector<std::string>* argv, std::map<std::string, std::string>* env) {
  const bool pg = E2EMetadataIsPostgres() && !HasFlag(*argv, "--metadata");
  const bool s3 = E2EStorageIsS3() && !HasFlag(*argv, "--storage");
  if (!pg && !s3) return;
  static int servers = 0;
  std::lock_guard<std::mutex> lock(backends_mu);
  std::string key = FlagValue(*argv, "--data");
  if (key.empty()) key = "config:" + FlagValue(*argv, "--config");
  Backends& b = by_data[key];
  if (pg) {
    if (b.metadata.empty()) {
      if (PostgresServer* server = SharedPostgres()) {
        auto url = server->CreateDatabase("e2e_" + std::to_string(++servers));
        EXPECT_TRUE(url.ok()) << url.status().ToString();
        if (url.ok()) b.metadata = *url;
      }
    }
    if (!b.metadata.empty()) argv->insert(argv->end(), {"--metadata", b.metadata});
  }
  if (s3) {
    CephS3Server& ceph = CephS3Server::Get();
    if (!ceph.available()) {
      ADD_FAILURE() << "BLZ_TEST_STORAGE=s3 but " << ceph.skip_reason();
      return;
    }
    static const bool bucket_made = [&] {
      Status st = ceph.CreateBucket(kBucket);
      EXPECT_TRUE(st.ok()) << st.ToString();
      return st.ok();
    }();
    (void)bucket_made;
    if (b.storage.empty()) {
      b.storage = ceph.StorageUrl(
          kBucket, "e2e-" + std::to_string(::getpid()) + "-" + std::to_string(++servers));
    }
    argv->insert(argv->end(), {"--storage", b.storage});
    for (const auto& [k, v] : ceph.AwsEnv()) env->emplace(k, v);  // a test's own keys win
  }
}

[[maybe_unused]] const bool kHookInstalled = [] {
  SetServeBackendHook(&ApplyBackends);
  return true;
}();

}  // namespace

bool E2EStorageIsS3() { return EnvIs("BLZ_TEST_STORAGE", "s3"); }

bool E2EBlobStored(const std::string& data_dir, const std::string& digest) {
  const std::string hex = digest.substr(digest.find(':') + 1);
  if (!E2EStorageIsS3()) {
    return std::filesystem::exists(data_dir + "/blobs/sha256/" + hex.substr(0, 2) + "/" + hex);
  }
  std::string url;
  {
    std::lock_guard<std::mutex> lock(backends_mu);
    auto it = by_data.find(data_dir);
    if (it != by_data.end()) url = it->second.storage;
  }
  if (url.empty()) {
    ADD_FAILURE() << "no S3 prefix was given to a blz serve --data " << data_dir;
    return false;
  }
  CephS3Server& ceph = CephS3Server::Get();
  store::s3::S3Config config = ceph.Config(url.substr(0, url.find('?')));
  store::s3::S3Client client(config);
  auto head = client.HeadObject(config.prefix + "/blobs/sha256/" + hex);
  if (head.ok()) return true;
  EXPECT_EQ(head.status().code(), Code::kNotFound) << head.status().ToString();
  return false;
}
bool E2EMetadataIsPostgres() { return EnvIs("BLZ_TEST_METADATA", "postgres"); }

}  // namespace blz::testing
