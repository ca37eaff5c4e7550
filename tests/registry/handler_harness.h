// Drives Registry's pure handlers the way the Beast session does (PlanBody, then the body into
// memory or into the planned file, then Handle), without sockets.
#ifndef BLZ_TESTS_REGISTRY_HANDLER_HARNESS_H_
#define BLZ_TESTS_REGISTRY_HANDLER_HARNESS_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "registry/registry.h"
#include "store/blob_store.h"
#include "store/sql.h"
#include "tests/formats/test_models.h"
#include "tests/registry/test_backends.h"
#include "tests/test_util.h"

namespace blz::registry::testing {

inline const std::string kManifestType = "application/vnd.oci.image.manifest.v1+json";

// The bytes of a small real .blz archive: a synthetic safetensors model (WriteTestModel, hidden
// size 4, vocab 8) packed with formats::Pack. The registry refuses archives it cannot identify,
// so every pushed version must be one. Archives with the same `layers` have the same structure;
// `seed` changes only the values (and so the digest); `perturb` > 0 makes a fine-tune of the
// seed's model.
inline std::string TinyArchive(uint64_t seed, int layers = 1, double perturb = 0) {
  blz::testing::TempDir tmp;
  blz::testing::TestModelOptions o;
  o.layers = layers;
  o.hidden = 4;
  o.vocab = 8;
  o.seed = seed;
  o.perturb_scale = perturb;
  blz::testing::WriteTestModel(tmp / "model", o);
  formats::PackStats stats;
  Status s = formats::Pack(tmp / "model", tmp / "model.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "model.blz");
}

class Harness {
 public:
  // The backends of tests/registry/test_backends.h (BLZ_TEST_STORAGE, BLZ_TEST_METADATA)
  // unless `options` names its own.
  explicit Harness(RegistryOptions options = {}) : data_(tmp_ / "data") {
    ApplyTestBackends(&options);
    storage_ = options.blob_storage;
    metadata_ = options.metadata_url;
    auto r = Registry::Open(data_, std::move(options));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) registry_ = std::move(*r);
    if (registry_ == nullptr) return;  // the failure is reported above
    auto token = registry_->EnsureAdminToken();
    EXPECT_TRUE(token.ok() && token->has_value());
    if (token.ok() && token->has_value()) token_ = **token;
  }

  // Another replica of `primary`'s registry: a second Registry with its own data directory
  // (its own uploads, cache, files, in-process locks and jobs) sharing the primary's metadata
  // database (its PostgreSQL database, or a symbolic link to its SQLite file, WAL) and blob
  // store, calling with the primary's admin token. `primary` must outlive it.
  Harness(const Harness& primary, RegistryOptions options) : data_(tmp_ / "data") {
    std::filesystem::create_directories(data_);
    std::filesystem::permissions(data_, std::filesystem::perms::owner_all);
    if (options.metadata_url.empty()) options.metadata_url = primary.metadata_;
    metadata_ = options.metadata_url;
    if (metadata_.empty()) {
      std::filesystem::create_symlink(primary.data() + "/blz.db", data_ + "/blz.db");
    }
    // The same blob store: the primary's bucket prefix (BLZ_TEST_STORAGE=s3), else its directory.
    if (options.blob_storage.empty()) options.blob_storage = primary.storage_;
    storage_ = options.blob_storage;
    if (storage_.empty()) {
      std::filesystem::create_directory_symlink(primary.data() + "/blobs", data_ + "/blobs");
    }
    auto r = Registry::Open(data_, std::move(options));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) registry_ = std::move(*r);
    token_ = primary.token();
  }

  Registry& registry() { return *registry_; }
  const std::string& token() const { return token_; }
  std::string data() const { return data_; }
  // The URL of the metadata database ("" = SQLite data()/blz.db).
  const std::string& metadata_url() const { return metadata_; }
  // A connection of its own to the metadata database (either engine), for tests that edit
  // rows behind the registry's back.
  Result<store::sql::Database> OpenMetadataSql() const {
    return store::sql::OpenDatabase(metadata_.empty() ? data_ + "/" + kMetadataFileName
                                                      : metadata_);
  }

  // Closes the registry and opens the same data directory again (a restart; the admin token
  // stays valid).
  void Reopen(RegistryOptions options = {}) {
    registry_.reset();
    if (options.blob_storage.empty()) options.blob_storage = storage_;
    if (options.metadata_url.empty()) options.metadata_url = metadata_;
    auto r = Registry::Open(data_, std::move(options));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) registry_ = std::move(*r);
  }

  // One request, as the session would run it. `auth` adds the admin token.
  Response Call(const std::string& method, const std::string& target, const std::string& body = "",
                std::vector<Header> headers = {}, bool auth = true) {
    RequestHead head;
    head.method = method;
    head.target = target;
    head.headers = std::move(headers);
    if (auth) head.headers.push_back({"Authorization", "Bearer " + token_});
    head.content_length = body.size();
    BodyPlan plan = registry_->PlanBody(head);
    if (plan.reject.has_value()) {
      Response r = std::move(*plan.reject);
      if (method == "HEAD") r.head_only = true;
      return r;
    }
    Request req;
    req.head = head;
    if (plan.kind == BodyPlan::Kind::kFile && plan.session_file != nullptr) {
      // Into the upload's session file, where the session writes it (store/blob_store.h).
      EXPECT_EQ(::pwrite(plan.session_file->fd(), body.data(), body.size(),
                         off_t(plan.session_offset)),
                ssize_t(body.size()));
      req.session_file = std::move(plan.session_file);
      req.session_offset = plan.session_offset;
      req.session_length = body.size();
    } else if (plan.kind == BodyPlan::Kind::kFile) {
      EXPECT_FALSE(plan.file_path.empty());
      EXPECT_FALSE(std::filesystem::exists(plan.file_path));
      blz::testing::WriteFileBytes(plan.file_path, body);
      req.body_file = plan.file_path;
    } else {
      EXPECT_LE(body.size(), plan.limit);
      req.body = body;
    }
    Response res = registry_->Handle(req);
    if (!req.body_file.empty()) RemoveAll(req.body_file);
    return res;
  }

  // Pushes a blob in one request; returns its digest.
  std::string PushBlob(const std::string& repo, const std::string& bytes) {
    std::string digest = MakeDigest(Sha256Hex(bytes));
    Response r = Call("POST", "/v2/" + repo + "/blobs/uploads/?digest=" + digest, bytes);
    EXPECT_EQ(r.status, 201) << r.body;
    return digest;
  }

  // A blz manifest over a config blob and an archive blob (both pushed first unless told not to).
  std::string ManifestFor(const std::string& repo, const std::string& archive,
                          bool push_blobs = true) {
    std::string config = "{\"archive_size\":" + std::to_string(archive.size()) + "}";
    std::string cd = MakeDigest(Sha256Hex(config));
    std::string ad = MakeDigest(Sha256Hex(archive));
    if (push_blobs) {
      PushBlob(repo, config);
      PushBlob(repo, archive);
    }
    nlohmann::json m = {
        {"schemaVersion", 2},
        {"mediaType", kManifestType},
        {"artifactType", "application/vnd.blz.model.v1"},
        {"config",
         {{"mediaType", "application/vnd.blz.model.config.v1+json"},
          {"digest", cd},
          {"size", config.size()}}},
        {"layers",
         nlohmann::json::array({{{"mediaType", "application/vnd.blz.archive.v1"},
                                 {"digest", ad},
                                 {"size", archive.size()},
                                 {"annotations",
                                  {{"org.opencontainers.image.title", "model.blz"}}}}})}};
    return m.dump();
  }

  Response PutManifest(const std::string& repo, const std::string& ref,
                       const std::string& manifest) {
    return Call("PUT", "/v2/" + repo + "/manifests/" + ref, manifest,
                {{"Content-Type", kManifestType}});
  }

  // Published blobs (through the blob store, so any driver).
  size_t BlobCount() const {
    auto listed = registry_->blobs().ListDigests();
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    return listed.ok() ? listed->size() : 0;
  }
  size_t UploadsCount() const {
    size_t n = 0;
    // Also the chunks of open sessions the fs driver keeps in uploads/parts-<uuid>/.
    for (const auto& e : std::filesystem::recursive_directory_iterator(data() + "/uploads")) {
      n += e.is_regular_file() ? 1 : 0;
    }
    return n;
  }

 private:
  blz::testing::TempDir tmp_;
  std::string data_;  // tmp_/data, or the primary's (a replica)
  std::unique_ptr<Registry> registry_;
  std::string token_;
  std::string storage_;   // the blob store's URL ("" = fs under data())
  std::string metadata_;  // the metadata database's URL ("" = SQLite data()/blz.db)
};

// The OCI error code of an error response ("" when the body is not an error document).
inline std::string ErrorCodeOf(const Response& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("errors") || !j["errors"].is_array() ||
      j["errors"].empty()) {
    return "";
  }
  return j["errors"][0].value("code", "");
}

// The bytes a producer-backed response sends (it can be drained once).
inline std::string ProducedBytes(const Response& r) {
  std::string out;
  while (true) {
    Result<ByteSpan> b = r.producer->Next();
    if (!b.ok()) return "<producer error: " + b.status().ToString() + ">";
    if (b->empty()) break;
    out.append(reinterpret_cast<const char*>(b->data()), b->size());
  }
  if (out.size() != r.file_length) return "<produced " + std::to_string(out.size()) + " bytes>";
  return out;
}

// The bytes a file-backed (or producer-backed) response would send.
inline std::string BodyOf(const Response& r) {
  if (r.file_path.empty() && r.producer != nullptr) return ProducedBytes(r);
  if (r.file_path.empty()) return r.body;
  std::string all = blz::testing::ReadFileBytes(r.file_path);
  if (r.file_offset > all.size()) return "<offset past end>";
  return all.substr(size_t(r.file_offset), size_t(r.file_length));
}

// GETs `target` until it answers something else than 202 (bounded; no timing assertion).
inline Response PollUntilDone(Harness* h, const std::string& target) {
  Response r;
  for (int i = 0; i < 6000; ++i) {
    r = h->Call("GET", target);
    if (r.status != 202) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "still 202 after 6000 polls: " << target;
  return r;
}

// Pushes `archive` as `repo:tag` (its manifest PUT must answer 201); returns its digest.
inline std::string PushVersion(Harness* h, const std::string& repo, const std::string& tag,
                               const std::string& archive) {
  Response r = h->PutManifest(repo, tag, h->ManifestFor(repo, archive));
  EXPECT_EQ(r.status, 201) << r.body;
  return MakeDigest(Sha256Hex(archive));
}

// The response body as JSON (a failed expectation, and a discarded value, when it is not).
inline nlohmann::json Json(const Response& r) {
  nlohmann::json j = nlohmann::json::parse(BodyOf(r), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << BodyOf(r);
  return j;
}

}  // namespace blz::registry::testing

#endif  // BLZ_TESTS_REGISTRY_HANDLER_HARNESS_H_
