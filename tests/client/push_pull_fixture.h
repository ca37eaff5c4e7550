// The fake registry and fixture of the push/pull tests (push_pull_test.cc, pull_stream_test.cc):
// an in-test registry (tests/client/test_server.h) that follows docs/registry-api.md closely
// enough for the client: blobs, uploads, manifests, patches (computed with
// patcher::CreatePatch like the real server).
#ifndef BLZ_TESTS_CLIENT_PUSH_PULL_FIXTURE_H_
#define BLZ_TESTS_CLIENT_PUSH_PULL_FIXTURE_H_

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/local_store.h"
#include "client/manifest.h"
#include "client/pull.h"
#include "client/push.h"
#include "core/digest.h"
#include "formats/blz_archive.h"
#include "patcher/patch.h"
#include "tests/client/test_server.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::MakeResponse;
using blz::testing::OciError;
using blz::testing::ReadFileBytes;
using blz::testing::TempDir;
using blz::testing::TestRequest;
using blz::testing::TestResponse;
using blz::testing::TestServer;
using blz::testing::WriteFileBytes;
namespace fs = std::filesystem;
namespace http = boost::beast::http;

std::string Digest(const std::string& data) { return MakeDigest(Sha256Hex(data)); }

// A safetensors file with F32 tensors of the given values.
std::string Safetensors(const std::map<std::string, std::vector<float>>& tensors) {
  std::string header = "{";
  std::string data;
  for (const auto& [name, values] : tensors) {
    if (header.size() > 1) header += ",";
    size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    header += "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(values.size()) +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) +
              "]}";
  }
  header += "}";
  while (header.size() % 8 != 0) header += " ";
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);  // little-endian host
  return out + header + data;
}

// A small model directory; `version` perturbs one tensor.
void MakeModel(const std::string& dir, int version) {
  std::vector<float> a(16384), b(16384);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 97) * 0.01f;
    b[i] = float(i % 89) * -0.02f;
  }
  for (size_t i = 0; i < 64; ++i) b[i * 7] += float(version) * 0.5f;
  WriteFileBytes(dir + "/config.json", "{\"model_type\":\"test\",\"version\":" +
                                           std::to_string(version) + "}\n");
  WriteFileBytes(dir + "/model.safetensors", Safetensors({{"a.weight", a}, {"b.weight", b}}));
}

// Registry behaviour, shared with the server thread.
class FakeRegistry {
 public:
  explicit FakeRegistry(std::string work_dir) : work_dir_(std::move(work_dir)) {}

  TestResponse Handle(const TestRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string target(req.target());
    const bool write = req.method() == http::verb::post || req.method() == http::verb::put;
    if (!token_.empty() && write &&
        std::string(req[http::field::authorization]) != "Bearer " + token_) {
      TestResponse res =
          OciError(http::status::unauthorized, "UNAUTHORIZED", "authentication required");
      res.set(http::field::www_authenticate, "Bearer realm=\"blz\"");
      return res;
    }
    if (target == "/v2/") return MakeResponse(http::status::ok, "{}");
    size_t pos;
    if ((pos = target.find("/blobs/uploads/")) != std::string::npos) {
      if (req.method() == http::verb::post) {
        TestResponse res = MakeResponse(http::status::accepted);
        res.set(http::field::location,
                target.substr(0, pos) + "/blobs/uploads/u" + std::to_string(++uploads_));
        return res;
      }
      size_t q = target.find("?digest=");
      if (q == std::string::npos) return OciError(http::status::bad_request, "DIGEST_INVALID", "");
      std::string digest = target.substr(q + 8);
      if (Digest(req.body()) != digest) {
        return OciError(http::status::bad_request, "DIGEST_INVALID", "digest mismatch");
      }
      blobs_[digest] = req.body();
      TestResponse res = MakeResponse(http::status::created);
      res.set("Docker-Content-Digest", digest);
      return res;
    }
    if ((pos = target.find("/blobs/")) != std::string::npos) {
      std::string digest = target.substr(pos + 7);
      auto it = blobs_.find(digest);
      if (it == blobs_.end()) {
        return OciError(http::status::not_found, "BLOB_UNKNOWN", "blob unknown");
      }
      if (req.method() == http::verb::head) {
        TestResponse res{http::status::ok, 11};
        res.content_length(it->second.size());
        return res;
      }
      ++blob_gets_;
      std::string body = it->second;
      if (corrupt_blobs_) body[body.size() / 2] ^= 0x40;
      TestResponse res = MakeResponse(http::status::ok, body, "application/octet-stream");
      if (truncate_blobs_) {
        res.body().resize(body.size() / 3);
        res.set("X-Test-Truncate", std::to_string(body.size()));
      }
      return res;
    }
    if ((pos = target.find("/manifests/")) != std::string::npos) {
      std::string name = target.substr(4, pos - 4);
      std::string ref = target.substr(pos + 11);
      if (req.method() == http::verb::put) {
        std::string digest = Digest(req.body());
        manifests_[name + "@" + ref] = req.body();
        manifests_[name + "@" + digest] = req.body();
        TestResponse res = MakeResponse(http::status::created);
        res.set("Docker-Content-Digest", digest);
        return res;
      }
      auto it = manifests_.find(name + "@" + ref);
      if (it == manifests_.end()) {
        return OciError(http::status::not_found, "MANIFEST_UNKNOWN", "manifest unknown");
      }
      TestResponse res =
          MakeResponse(http::status::ok, it->second, "application/vnd.oci.image.manifest.v1+json");
      res.set("Docker-Content-Digest", Digest(it->second));
      return res;
    }
    if ((pos = target.find("/blz/patch?to=")) != std::string::npos) {
      // The full patch of an archive (no base). full_patch_status_ 200 serves it; anything
      // else answers that status (404/405: a server without full patches).
      ++full_patch_requests_;
      std::string to = target.substr(pos + 14);
      if (full_patch_status_ != 200 || !blobs_.count(to)) {
        return OciError(http::status(full_patch_status_ == 200 ? 404 : full_patch_status_),
                        full_patch_status_ == 405 ? "UNSUPPORTED" : "UNKNOWN", "no full patch");
      }
      std::string archive = work_dir_ + "/full-target.blz", patch = work_dir_ + "/full.blzpatch";
      fs::remove(archive);
      fs::remove(patch);
      WriteFileBytes(archive, blobs_[to]);
      Status s = patcher::CreateFullPatch(archive, patch, patcher::DiffOptions{}, nullptr);
      if (!s.ok()) return OciError(http::status::internal_server_error, "UNKNOWN", s.ToString());
      std::string bytes = ReadFileBytes(patch);
      if (corrupt_full_patches_) bytes[bytes.size() - 10] ^= 0x40;
      TestResponse res = MakeResponse(http::status::ok, bytes, "application/vnd.blz.patch.v1");
      res.set("Docker-Content-Digest", Digest(bytes));
      res.set("Blz-Patch-Cache", "miss");
      return res;
    }
    if ((pos = target.find("/blz/patch?from=")) != std::string::npos) {
      ++patch_requests_;
      size_t to_pos = target.find("&to=");
      std::string from = target.substr(pos + 16, to_pos - pos - 16);
      std::string to = target.substr(to_pos + 4);
      if (!serve_patches_ || !blobs_.count(from) || !blobs_.count(to)) {
        return OciError(http::status::not_found, "MANIFEST_UNKNOWN", "no such versions");
      }
      std::string base = work_dir_ + "/base.blz", tgt = work_dir_ + "/target.blz",
                  patch = work_dir_ + "/p.blzpatch";
      fs::remove(base);
      fs::remove(tgt);
      fs::remove(patch);
      WriteFileBytes(base, blobs_[from]);
      WriteFileBytes(tgt, blobs_[to]);
      patcher::DiffStats stats;
      Status s = patcher::CreatePatch(base, tgt, patch, patcher::DiffOptions{}, &stats);
      if (!s.ok()) return OciError(http::status::internal_server_error, "UNKNOWN", s.ToString());
      std::string bytes = ReadFileBytes(patch);
      if (corrupt_patch_at_ > 0) bytes[bytes.size() - size_t(corrupt_patch_at_)] ^= 0x40;
      TestResponse res = MakeResponse(http::status::ok, bytes, "application/vnd.blz.patch.v1");
      res.set("Docker-Content-Digest", Digest(bytes));
      res.set("Blz-Patch-Cache", "miss");
      return res;
    }
    return OciError(http::status::not_found, "NAME_UNKNOWN", "unknown route " + target);
  }

  // Stores `archive` as version `tag` of `name` as is, without the checks a push makes (what a
  // registry that does not verify archives would hold).
  void Inject(const std::string& name, const std::string& tag, const std::string& archive) {
    std::lock_guard<std::mutex> lock(mu_);
    ModelConfig config;
    config.archive_digest = Digest(archive);
    config.archive_size = archive.size();
    const std::string config_json = BuildConfigJson(config);
    blobs_[Digest(archive)] = archive;
    blobs_[Digest(config_json)] = config_json;
    ModelManifest m;
    m.config_digest = Digest(config_json);
    m.config_size = config_json.size();
    m.archive_digest = Digest(archive);
    m.archive_size = archive.size();
    const std::string manifest = BuildManifestJson(m);
    manifests_[name + "@" + tag] = manifest;
    manifests_[name + "@" + Digest(manifest)] = manifest;
  }

  void set_token(std::string t) {
    std::lock_guard<std::mutex> lock(mu_);
    token_ = std::move(t);
  }
  void set_serve_patches(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    serve_patches_ = v;
  }
  void set_full_patch_status(int v) {
    std::lock_guard<std::mutex> lock(mu_);
    full_patch_status_ = v;
  }
  // Flips a bit of every patch (with a base) `from_end` bytes before its end (0: none).
  void set_corrupt_patch_at(int from_end) {
    std::lock_guard<std::mutex> lock(mu_);
    corrupt_patch_at_ = from_end;
  }
  void set_corrupt_full_patches(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    corrupt_full_patches_ = v;
  }
  int full_patch_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return full_patch_requests_;
  }
  void set_corrupt_blobs(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    corrupt_blobs_ = v;
  }
  void set_truncate_blobs(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    truncate_blobs_ = v;
  }
  int patch_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return patch_requests_;
  }
  int blob_gets() {
    std::lock_guard<std::mutex> lock(mu_);
    return blob_gets_;
  }
  size_t blob_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return blobs_.size();
  }

 private:
  std::mutex mu_;
  std::string work_dir_;
  std::string token_;
  std::map<std::string, std::string> blobs_;
  std::map<std::string, std::string> manifests_;
  int uploads_ = 0, patch_requests_ = 0, blob_gets_ = 0, full_patch_requests_ = 0;
  int full_patch_status_ = 404;  // like a server without full patches, unless a test says
  bool serve_patches_ = true, corrupt_blobs_ = false, truncate_blobs_ = false;
  bool corrupt_full_patches_ = false;
  int corrupt_patch_at_ = 0;
};

class PushPullTest : public ::testing::Test {
 protected:
  PushPullTest()
      : registry_((fs::create_directories(tmp_ / "server"), tmp_ / "server")),
        server_([this](const TestRequest& req) { return registry_.Handle(req); }) {
    MakeModel(tmp_ / "v1", 1);
    MakeModel(tmp_ / "v2", 2);
  }

  std::string Ref(const std::string& tag) {
    return "127.0.0.1:" + std::to_string(server_.port()) + "/org/tiny:" + tag;
  }
  PushOptions PushOpts() {
    PushOptions o;
    o.cache_dir = tmp_ / "push-cache";
    o.token = "tok";
    o.retry.max_attempts = 3;
    o.retry.base_delay = std::chrono::milliseconds(5);
    o.retry.max_delay = std::chrono::milliseconds(20);
    return o;
  }
  PullOptions PullOpts(const std::string& output = "") {
    PullOptions o;
    o.cache_dir = tmp_ / "pull-cache";
    o.output_dir = output;
    o.token = "";
    o.retry.max_attempts = 3;
    o.retry.base_delay = std::chrono::milliseconds(5);
    o.retry.max_delay = std::chrono::milliseconds(20);
    return o;
  }
  // Blobs in the pull cache's content store.
  // The archive of model directory `model` (packed to `packed`) with one bit of its last
  // tensor's data flipped: data that contradict the header's digests. Sets *tensor to that
  // tensor's name.
  std::string ArchiveWithAFlippedTensorBit(const std::string& model, const std::string& packed,
                                           std::string* tensor) {
    formats::PackStats stats;
    Status packed_ok = formats::Pack(model, packed, &stats);
    EXPECT_TRUE(packed_ok.ok()) << packed_ok.ToString();
    std::string archive = ReadFileBytes(packed);
    auto opened = formats::BlzArchive::Open(packed);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (!opened.ok()) return archive;
    const auto& h = opened->header();
    archive[size_t(h.data_start + h.tensors.back().offset + 8)] ^= 0x01;
    *tensor = h.tensors.back().name;
    return archive;
  }

  size_t CachedBlobCount() {
    size_t blobs = 0;
    for (const auto& e : fs::recursive_directory_iterator(tmp_ / "pull-cache/blobs")) {
      blobs += e.is_regular_file() ? 1 : 0;
    }
    return blobs;
  }

  TempDir tmp_;
  FakeRegistry registry_;
  TestServer server_;
};

}  // namespace
}  // namespace blz::client

#endif  // BLZ_TESTS_CLIENT_PUSH_PULL_FIXTURE_H_
