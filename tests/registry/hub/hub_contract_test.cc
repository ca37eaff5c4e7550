// The Hugging Face Hub read API (registry/hub/hub_api.h) against a live registry, replaying
// request by request what huggingface_hub sends and checking every header it reads. Followed:
// huggingface_hub's src/huggingface_hub/file_download.py of the Xet era (get_hf_file_metadata
// returning xet_file_data, as in 0.3x and 1.x: hf_hub_download, _get_metadata_or_catch_error,
// http_get), _snapshot_download.py snapshot_download (revision None -> "main", repo_info, then
// hf_hub_download per sibling at repo_info.sha; list_repo_tree only when siblings are missing),
// hf_api.py (model_info, list_repo_tree, get_paths_info, list_repo_refs, whoami) and
// utils/_http.py hf_raise_for_status. 1.x moved from requests to httpx without changing these
// requests or headers. The sequence:
//   snapshot_download(repo_id, revision=None):
//     GET  /api/models/{repo_id}[/revision/{rev}]   -> json "sha" (40 hex), "siblings"[].rfilename
//     then hf_hub_download(repo_id, f, revision=<sha>) for every sibling:
//       HEAD /{repo_id}/resolve/{sha}/{f}  (Accept-Encoding: identity; redirects not followed)
//            -> X-Repo-Commit, X-Linked-Etag or ETag, X-Linked-Size or Content-Length;
//               no X-Xet-Hash (else the Xet path is taken)
//       GET  /{repo_id}/resolve/{sha}/{f}  [Range: bytes=<n>- when resuming]
//            -> the bytes, Content-Length; 206 + Content-Range for a Range
//   hf_hub_download of a missing optional file (transformers: generation_config.json):
//       HEAD -> 404 with X-Error-Code: EntryNotFound and X-Repo-Commit (the miss is cached
//               under .no_exist/<commit>/)
//   errors: hf_raise_for_status reads X-Error-Code (RepoNotFound, RevisionNotFound,
//           EntryNotFound, GatedRepo) and X-Error-Message; 401 + "Invalid credentials in
//           Authorization header" means a bad token.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "patcher/patch_format.h"
#include "registry/hub/revisions.h"
#include "registry/hub/version_files.h"
#include "registry/net.h"
#include "registry/registry.h"
#include "registry/server.h"
#include "tests/registry/handler_harness.h"
#include "tests/test_util.h"

namespace blz::registry::hub {
namespace {

using json = nlohmann::json;
using registry::testing::BodyOf;
using registry::testing::Harness;
using registry::testing::PushVersion;
namespace fs = std::filesystem;

constexpr std::chrono::seconds kDeadline{20};

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::optional<std::string> Header(const std::string& name) const {
    auto it = headers.find(name);
    if (it == headers.end()) return std::nullopt;
    return it->second;
  }
  json Json() const { return json::parse(body, nullptr, false); }
};

// One request on a new connection, with deadlines (Beast async operations run to completion).
// `read_error` (may be null): receives the error reading the response instead of failing on it.
Reply Fetch(uint16_t port, const std::string& method, const std::string& target,
            const std::map<std::string, std::string>& headers = {}, const std::string& body = "",
            beast::error_code* read_error = nullptr) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_after(kDeadline);
  stream.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                       [&](beast::error_code e) { ec = e; });
  ioc.run();
  ioc.restart();
  EXPECT_FALSE(ec) << ec.message();
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  req.set(http::field::user_agent, "huggingface_hub/1.1.0; python/3.12");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::async_write(stream, req, [&](beast::error_code e, size_t) { ec = e; });
  ioc.run();
  ioc.restart();
  EXPECT_FALSE(ec) << ec.message();
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256ull << 20);
  if (method == "HEAD") parser.skip(true);
  http::async_read(stream, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
  ioc.run();
  if (read_error != nullptr) {
    *read_error = ec;
  } else {
    EXPECT_FALSE(ec) << ec.message();
  }
  Reply r;
  if (!parser.is_header_done()) return r;
  r.status = parser.get().result_int();
  if (read_error != nullptr && ec) {  // a cut body: what arrived of it
    r.body = parser.get().body();
    return r;
  }
  auto res = parser.release();
  r.status = res.result_int();
  for (const auto& f : res) {
    std::string name(f.name_string());
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = std::string(f.value());
  }
  r.body = std::move(res.body());
  return r;
}

// huggingface_hub's _normalize_etag: drops a weak prefix and the quotes.
std::string NormalizeEtag(std::string etag) {
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

// A model directory from the corpus: tiny-gpt2/<which> plus a nested tokenizer file and a
// README (to exercise folders).
std::string MakeModel(const std::string& corpus, const std::string& which, const fs::path& out) {
  fs::create_directories(out / "tokenizer");
  for (const char* name : {"config.json", "model.safetensors"}) {
    fs::copy_file(fs::path(corpus) / "tiny-gpt2" / which / name, out / name);
  }
  blz::testing::WriteFileBytes(out / "tokenizer" / "vocab.txt", "hello\nworld\n" + which + "\n");
  blz::testing::WriteFileBytes(out / "README.md", "# tiny " + which + "\n");
  return out.string();
}

std::string PackArchive(const std::string& dir, const fs::path& out) {
  formats::PackStats stats;
  Status s = formats::Pack(dir, out.string(), &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(out.string());
}

class HubContractTest : public ::testing::Test {
 protected:
  // `max_chain_depth` 0: versions are stored whole (full patches) when compressed; else they
  // may be stored as chain links (docs/storage.md, "Chains"). Either way their file reads
  // decode only what they touch (docs/huggingface.md).
  void Start(RegistryOptions options = {}, uint32_t max_chain_depth = 0) {
    corpus_ = blz::testing::CorpusDir();
    if (corpus_.empty()) GTEST_SKIP() << "shared corpus not found";
    options.full_patch = PatcherFullPatchFunctions();
    options.storage.background = false;
    options.storage.grace = std::chrono::milliseconds(0);
    options.storage.max_chain_depth = max_chain_depth;
    options_ = options;
    h_ = std::make_unique<Harness>(std::move(options));
    base_dir_ = MakeModel(corpus_, "base", tmp_ / "base");
    ft_dir_ = MakeModel(corpus_, "ft-v1", tmp_ / "ft");
    base_ = PushVersion(h_.get(), "org/gpt2", "main", PackArchive(base_dir_, tmp_ / "b.blz"));
    ft_ = PushVersion(h_.get(), "org/gpt2", "v2", PackArchive(ft_dir_, tmp_ / "f.blz"));
    StartServer();
  }
  void StartServer() {
    SessionOptions session;
    session.log = [](const std::string&) {};
    auto s = Server::Start(&h_->registry(), "127.0.0.1:0", 2, std::move(session));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  uint16_t port() const { return server_->port(); }
  std::map<std::string, std::string> Auth() const {
    return {{"Authorization", "Bearer " + h_->token()}};
  }
  std::string File(const std::string& dir, const std::string& path) {
    return blz::testing::ReadFileBytes(dir + "/" + path);
  }

  blz::testing::TempDir tmp_;
  RegistryOptions options_;  // as Start opened the registry
  std::string corpus_, base_dir_, ft_dir_, base_, ft_;
  std::unique_ptr<Harness> h_;
  std::unique_ptr<Server> server_;
};

// hf_hub_download's metadata step, as get_hf_file_metadata does it; returns the reply.
Reply HeadMetadata(uint16_t port, const std::string& repo, const std::string& rev,
                   const std::string& file, std::map<std::string, std::string> headers = {}) {
  headers["Accept-Encoding"] = "identity";
  return Fetch(port, "HEAD", "/" + repo + "/resolve/" + rev + "/" + file, headers);
}

TEST_F(HubContractTest, SnapshotDownloadStaysOnOneCommitWhileTheTagMoves) {
  ASSERT_NO_FATAL_FAILURE(Start());
  if (IsSkipped()) return;
  // repo_info(revision=None) and repo_info(revision="main").
  for (const std::string& target : std::vector<std::string>{"/api/models/org/gpt2", "/api/models/org/gpt2/revision/main"}) {
    Reply info = Fetch(port(), "GET", target);
    ASSERT_EQ(info.status, 200) << info.body;
    json j = info.Json();
    EXPECT_EQ(j["id"], "org/gpt2");
    EXPECT_EQ(j["sha"], CommitId(base_));
    EXPECT_TRUE(IsCommitId(j["sha"].get<std::string>()));
    EXPECT_TRUE(j["lastModified"].is_string());
    EXPECT_EQ(j["private"], false);
  }
  Reply info = Fetch(port(), "GET", "/api/models/org/gpt2/revision/main");
  const json j = info.Json();
  const std::string commit = j["sha"];
  std::vector<std::string> files;
  for (const json& s : j["siblings"]) files.push_back(s["rfilename"]);
  EXPECT_EQ(files, (std::vector<std::string>{"README.md", "config.json", "model.safetensors",
                                             "tokenizer/vocab.txt"}));

  // The tag moves to another version in the middle of the snapshot.
  Response moved = h_->PutManifest("org/gpt2", "main",
                                   h_->ManifestFor("org/gpt2", blz::testing::ReadFileBytes(
                                                                   tmp_ / "f.blz")));
  ASSERT_EQ(moved.status, 201) << moved.body;
  ASSERT_EQ(Fetch(port(), "GET", "/api/models/org/gpt2").Json()["sha"], CommitId(ft_));

  for (const std::string& f : files) {
    const std::string expected = File(base_dir_, f);
    Reply head = HeadMetadata(port(), "org/gpt2", commit, f);
    ASSERT_EQ(head.status, 200) << f;
    EXPECT_EQ(head.Header("x-repo-commit"), commit) << f;
    // etag = X-Linked-Etag or ETag; size = X-Linked-Size or Content-Length.
    const std::string etag = NormalizeEtag(
        head.Header("x-linked-etag").value_or(head.Header("etag").value_or("")));
    const std::string size =
        head.Header("x-linked-size").value_or(head.Header("content-length").value_or(""));
    EXPECT_EQ(size, std::to_string(expected.size())) << f;
    EXPECT_EQ(head.Header("content-length"), std::to_string(expected.size())) << f;
    EXPECT_EQ(head.Header("accept-ranges"), "bytes");
    EXPECT_FALSE(head.Header("location").has_value());
    for (const auto& [name, value] : head.headers) {
      EXPECT_EQ(name.rfind("x-xet", 0), std::string::npos) << name;
    }
    const bool lfs = f == "model.safetensors";
    EXPECT_EQ(etag, lfs ? Sha256Hex(expected) : GitBlobId(expected)) << f;
    EXPECT_EQ(head.Header("x-linked-etag").has_value(), lfs) << f;

    Reply get = Fetch(port(), "GET", "/org/gpt2/resolve/" + commit + "/" + f);
    ASSERT_EQ(get.status, 200) << f;
    EXPECT_EQ(get.Header("x-repo-commit"), commit);
    EXPECT_EQ(get.Header("content-length"), std::to_string(expected.size()));
    EXPECT_TRUE(get.body == expected) << f << ": bytes differ";
  }
  // The moved tag serves the new version.
  Reply now = HeadMetadata(port(), "org/gpt2", "main", "config.json");
  EXPECT_EQ(now.Header("x-repo-commit"), CommitId(ft_));
}

TEST_F(HubContractTest, ResumedDownloadAndFirstByteRange) {
  ASSERT_NO_FATAL_FAILURE(Start());
  if (IsSkipped()) return;
  const std::string expected = File(base_dir_, "model.safetensors");
  const std::string url = "/org/gpt2/resolve/main/model.safetensors";
  // The JS client's first request.
  Reply first = Fetch(port(), "GET", url, {{"Range", "bytes=0-0"}});
  ASSERT_EQ(first.status, 206);
  EXPECT_EQ(first.Header("content-range"), "bytes 0-0/" + std::to_string(expected.size()));
  EXPECT_EQ(first.body, expected.substr(0, 1));
  // http_get resuming at 1000 bytes.
  Reply rest = Fetch(port(), "GET", url, {{"Range", "bytes=1000-"}});
  ASSERT_EQ(rest.status, 206);
  EXPECT_EQ(rest.Header("content-range"), "bytes 1000-" + std::to_string(expected.size() - 1) +
                                              "/" + std::to_string(expected.size()));
  EXPECT_TRUE(rest.body == expected.substr(1000));
  // HEAD with a Range announces the range's length.
  Reply head = Fetch(port(), "HEAD", url, {{"Range", "bytes=10-19"}});
  EXPECT_EQ(head.status, 206);
  EXPECT_EQ(head.Header("content-length"), "10");
  // Huge and unsatisfiable ranges.
  for (const std::string& range : std::vector<std::string>{"bytes=" + std::to_string(expected.size()) + "-", std::string("bytes=18446744073709551615-"),
        std::string("bytes=99999999999999999999999999-")}) {
    Reply r = Fetch(port(), "GET", url, {{"Range", range}});
    EXPECT_TRUE(r.status == 416 || r.status == 200) << range << ": " << r.status;
    if (r.status == 416) {
      EXPECT_EQ(r.Header("content-range"), "bytes */" + std::to_string(expected.size()));
    } else {
      EXPECT_TRUE(r.body == expected);  // an unparseable Range is ignored, as RFC 9110 allows
    }
  }
  // The same bytes once the archive is stored as a full patch only.
  ASSERT_TRUE(h_->registry().storage().Compress(base_).ok());
  ASSERT_FALSE(h_->registry().blobs().Contains(base_));
  Reply head_only = Fetch(port(), "HEAD", url);
  EXPECT_EQ(head_only.Header("content-length"), std::to_string(expected.size()));
  EXPECT_EQ(h_->registry().storage().status().rebuilds, 0u);  // a HEAD opens nothing
  Reply again = Fetch(port(), "GET", url, {{"Range", "bytes=5-"}});
  ASSERT_EQ(again.status, 206);
  EXPECT_TRUE(again.body == expected.substr(5));
}

// A version stored only as its full patch (the raw archive dropped): the JS client's
// `Range: bytes=0-0`, a mid-file range, a resumed download and a whole-file GET answer the
// file's bytes, decoded from the chunks they touch, over the wire and through the handlers, and
// the archive is never rebuilt into <data>/cache.
TEST_F(HubContractTest, RangesOfAFullPatchVersionNeedNoRebuild) {
  ASSERT_NO_FATAL_FAILURE(Start());
  if (IsSkipped()) return;
  const std::string expected = File(base_dir_, "model.safetensors");
  const uint64_t n = expected.size();
  const std::string url = "/org/gpt2/resolve/" + CommitId(base_) + "/model.safetensors";
  ASSERT_TRUE(h_->registry().storage().Compress(base_).ok());
  ASSERT_FALSE(h_->registry().blobs().Contains(base_));
  auto cache_is_empty = [&] {
    std::error_code ec;
    return fs::directory_iterator(h_->data() + "/cache/sha256", ec) == fs::directory_iterator();
  };

  // The handlers.
  Response first = h_->Call("GET", url, "", {{"Range", "bytes=0-0"}});
  ASSERT_EQ(first.status, 206) << first.body;
  EXPECT_EQ(first.Get("Content-Range"), "bytes 0-0/" + std::to_string(n));
  EXPECT_EQ(first.file_path, "");  // made as it is sent, not a file
  EXPECT_EQ(BodyOf(first), expected.substr(0, 1));
  const uint64_t mid = n / 2;
  Response middle = h_->Call("GET", url, "",
                             {{"Range", "bytes=" + std::to_string(mid) + "-" +
                                            std::to_string(mid + 4095)}});
  ASSERT_EQ(middle.status, 206) << middle.body;
  EXPECT_EQ(middle.BodySize(), 4096u);
  EXPECT_TRUE(BodyOf(middle) == expected.substr(mid, 4096));
  Response whole = h_->Call("GET", url);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_TRUE(BodyOf(whole) == expected);
  EXPECT_EQ(h_->registry().storage().status().rebuilds, 0u);
  EXPECT_TRUE(cache_is_empty());

  // Over the wire (the session streams the decoded chunks).
  Reply wire_first = Fetch(port(), "GET", url, {{"Range", "bytes=0-0"}});
  ASSERT_EQ(wire_first.status, 206);
  EXPECT_EQ(wire_first.body, expected.substr(0, 1));
  Reply wire_mid = Fetch(port(), "GET", url,
                         {{"Range", "bytes=" + std::to_string(mid) + "-" +
                                        std::to_string(mid + 99)}});
  ASSERT_EQ(wire_mid.status, 206);
  EXPECT_TRUE(wire_mid.body == expected.substr(mid, 100));
  Reply wire_rest = Fetch(port(), "GET", url, {{"Range", "bytes=1000-"}});
  ASSERT_EQ(wire_rest.status, 206);
  EXPECT_TRUE(wire_rest.body == expected.substr(1000));
  Reply wire_whole = Fetch(port(), "GET", url);
  ASSERT_EQ(wire_whole.status, 200);
  EXPECT_EQ(wire_whole.Header("content-length"), std::to_string(n));
  EXPECT_TRUE(wire_whole.body == expected);
  for (const std::string f : {"config.json", "README.md", "tokenizer/vocab.txt"}) {
    Reply small = Fetch(port(), "GET", "/org/gpt2/resolve/main/" + f);
    ASSERT_EQ(small.status, 200) << f;
    EXPECT_EQ(small.body, File(base_dir_, f)) << f;
  }
  EXPECT_EQ(h_->registry().storage().status().rebuilds, 0u);
  EXPECT_TRUE(cache_is_empty());
}

// Versions stored as chains (docs/storage.md, "Chains"): ft-v1 as a patch from the base (depth
// 1), a third version (ft-v1's weights, other small files) as a patch from ft-v1 (depth 2). The
// JS client's `Range: bytes=0-0`, a mid-file range, a resumed download and whole-file GETs answer
// the files' bytes (those `blz pull` gives: the model directories' files), decoded through the
// chain from the chunks they touch, over the wire and through the handlers; nothing is rebuilt
// into <data>/cache (`chain_rebuilds` and `rebuilds` stay 0).
TEST_F(HubContractTest, RangesOfAChainedVersionNeedNoRebuild) {
  ASSERT_NO_FATAL_FAILURE(Start());  // depth 0 while the base is compressed: a full patch
  if (IsSkipped()) return;
  ArchiveStorage* storage = &h_->registry().storage();
  ASSERT_TRUE(storage->Compress(base_).ok());
  server_->Stop();
  RegistryOptions chained = options_;
  chained.storage.max_chain_depth = 4;
  h_->Reopen(chained);
  storage = &h_->registry().storage();
  ASSERT_TRUE(storage->Compress(ft_).ok());
  auto link = h_->registry().db().FindChainLink(ft_);
  ASSERT_TRUE(link.ok()) << "ft-v1 was not stored as a chain: " << link.status().ToString();
  EXPECT_EQ(link->parent_digest, base_);
  // The third version: the base's tag is deleted first, so its only candidate parent is ft-v1
  // (the base stays stored: ft-v1's chain needs it, and no collection runs).
  const fs::path ft2_dir = tmp_ / "ft2";
  MakeModel(corpus_, "ft-v1", ft2_dir);
  blz::testing::WriteFileBytes(ft2_dir / "README.md", "# tiny ft-v2: new card, same weights\n");
  Response main = h_->Call("GET", "/v2/org/gpt2/manifests/main");
  ASSERT_EQ(main.status, 200);
  ASSERT_EQ(h_->Call("DELETE", "/v2/org/gpt2/manifests/" +
                                   main.Get("Docker-Content-Digest").value_or(""))
                .status,
            202);
  const std::string ft2 =
      PushVersion(h_.get(), "org/gpt2", "v3", PackArchive(ft2_dir.string(), tmp_ / "f2.blz"));
  ASSERT_TRUE(storage->Compress(ft2).ok());
  auto link2 = h_->registry().db().FindChainLink(ft2);
  ASSERT_TRUE(link2.ok()) << "ft-v2 was not stored as a chain: " << link2.status().ToString();
  EXPECT_EQ(link2->parent_digest, ft_);
  EXPECT_EQ(link2->depth, 2u);
  ASSERT_FALSE(h_->registry().blobs().Contains(ft_));
  ASSERT_FALSE(h_->registry().blobs().Contains(ft2));
  // Compressing rebuilt parents into the cache (to diff against them): empty it.
  fs::remove_all(h_->data() + "/cache/sha256");
  h_->Reopen(chained);
  storage = &h_->registry().storage();
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto cache_is_empty = [&] {
    std::error_code ec;
    return fs::directory_iterator(h_->data() + "/cache/sha256", ec) == fs::directory_iterator();
  };
  ASSERT_TRUE(cache_is_empty());

  for (const auto& [digest, dir] : std::vector<std::pair<std::string, std::string>>{
           {ft2, ft2_dir.string()}, {ft_, ft_dir_}}) {
    SCOPED_TRACE(dir);
    const std::string expected = File(dir, "model.safetensors");
    const uint64_t n = expected.size();
    const std::string url = "/org/gpt2/resolve/" + CommitId(digest) + "/model.safetensors";
    // The handlers.
    Response first = h_->Call("GET", url, "", {{"Range", "bytes=0-0"}});
    ASSERT_EQ(first.status, 206) << first.body;
    EXPECT_EQ(first.Get("Content-Range"), "bytes 0-0/" + std::to_string(n));
    EXPECT_EQ(first.file_path, "");  // made as it is sent, not a file
    EXPECT_EQ(BodyOf(first), expected.substr(0, 1));
    const uint64_t mid = n / 2;
    Response middle = h_->Call("GET", url, "",
                               {{"Range", "bytes=" + std::to_string(mid) + "-" +
                                              std::to_string(mid + 4095)}});
    ASSERT_EQ(middle.status, 206) << middle.body;
    EXPECT_TRUE(BodyOf(middle) == expected.substr(mid, 4096));
    Response whole = h_->Call("GET", url);
    ASSERT_EQ(whole.status, 200) << whole.body;
    EXPECT_TRUE(BodyOf(whole) == expected);
    // Over the wire.
    Reply wire_first = Fetch(port(), "GET", url, {{"Range", "bytes=0-0"}});
    ASSERT_EQ(wire_first.status, 206);
    EXPECT_EQ(wire_first.body, expected.substr(0, 1));
    Reply wire_rest = Fetch(port(), "GET", url, {{"Range", "bytes=1000-"}});
    ASSERT_EQ(wire_rest.status, 206);
    EXPECT_TRUE(wire_rest.body == expected.substr(1000));
    Reply wire_whole = Fetch(port(), "GET", url);
    ASSERT_EQ(wire_whole.status, 200);
    EXPECT_EQ(wire_whole.Header("content-length"), std::to_string(n));
    EXPECT_TRUE(wire_whole.body == expected);
    for (const std::string f : {"config.json", "README.md", "tokenizer/vocab.txt"}) {
      Reply small = Fetch(port(), "GET", "/org/gpt2/resolve/" + CommitId(digest) + "/" + f);
      ASSERT_EQ(small.status, 200) << f;
      EXPECT_EQ(small.body, File(dir, f)) << f;
    }
  }
  EXPECT_EQ(storage->status().chain_rebuilds, 0u);
  EXPECT_EQ(storage->status().rebuilds, 0u);
  EXPECT_TRUE(cache_is_empty());
}

// A full patch damaged on disk after it was verified (verify-on-read off): the damaged chunk is
// caught when decoded; a whole-file download is cut short instead of completing with wrong
// bytes, and ranges that do not touch the chunk still answer.
TEST_F(HubContractTest, ADamagedChunkCutsTheDownloadShort) {
  RegistryOptions options;
  options.storage.verify_on_read_bytes = 0;
  ASSERT_NO_FATAL_FAILURE(Start(std::move(options)));
  if (IsSkipped()) return;
  const std::string expected = File(base_dir_, "model.safetensors");
  const std::string url = "/org/gpt2/resolve/main/model.safetensors";
  ASSERT_TRUE(h_->registry().storage().Compress(base_).ok());
  auto full = h_->registry().storage().GetFullPatch(base_);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  std::string patch = blz::testing::ReadFileBytes(full->blob.path);
  auto ph = patcher::internal::ParsePatch(AsBytes(patch), patch.size(), "patch");
  ASSERT_TRUE(ph.ok());
  const patcher::internal::PatchChunk* victim = nullptr;  // the largest chunk (the embedding's)
  for (const auto& piece : ph->pieces) {
    for (const auto& c : piece.chunks) {
      if (victim == nullptr || c.length > victim->length) victim = &c;
    }
  }
  ASSERT_NE(victim, nullptr);
  patch[ph->payload_start + victim->offset + victim->length / 2] ^= 0x5a;
  fs::permissions(full->blob.path, fs::perms::owner_write, fs::perm_options::add);
  blz::testing::WriteFileBytes(full->blob.path, patch);

  Response whole = h_->Call("GET", url);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const std::string produced = BodyOf(whole);
  EXPECT_NE(produced.find("xxh3"), std::string::npos) << produced.substr(0, 200);
  beast::error_code cut;
  Reply wire = Fetch(port(), "GET", url, {}, "", &cut);
  EXPECT_TRUE(cut) << "a damaged download must not complete";
  EXPECT_LT(wire.body.size(), expected.size());
  EXPECT_TRUE(wire.body == expected.substr(0, wire.body.size()));
  Reply first = Fetch(port(), "GET", url, {{"Range", "bytes=0-0"}});
  EXPECT_EQ(first.status, 206);
  EXPECT_EQ(first.body, expected.substr(0, 1));
  EXPECT_EQ(h_->registry().storage().status().rebuilds, 0u);
}

TEST_F(HubContractTest, MissingOptionalFileIsEntryNotFoundWithTheCommit) {
  ASSERT_NO_FATAL_FAILURE(Start());
  if (IsSkipped()) return;
  Reply r = HeadMetadata(port(), "org/gpt2", "main", "generation_config.json");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.Header("x-error-code"), "EntryNotFound");
  EXPECT_EQ(r.Header("x-repo-commit"), CommitId(base_));
  Reply get = Fetch(port(), "GET", "/org/gpt2/resolve/main/generation_config.json");
  EXPECT_EQ(get.status, 404);
  EXPECT_EQ(get.Header("x-error-code"), "EntryNotFound");
  EXPECT_TRUE(get.Json()["error"].is_string());
}

TEST_F(HubContractTest, TreePaginatesOnTheCommitPathsInfoRefsAndWhoami) {
  ASSERT_NO_FATAL_FAILURE(Start());
  if (IsSkipped()) return;
  // list_repo_tree(recursive=True) follows Link rel="next" until there is none.
  std::vector<json> entries;
  std::string next = "/api/models/org/gpt2/tree/main?recursive=true&limit=2";
  const std::string base_url = "http://127.0.0.1:" + std::to_string(port());
  for (int pages = 0; !next.empty(); ++pages) {
    ASSERT_LT(pages, 10);
    Reply page = Fetch(port(), "GET", next);
    ASSERT_EQ(page.status, 200) << page.body;
    const json items = page.Json();
    for (const json& e : items) entries.push_back(e);
    next.clear();
    if (std::optional<std::string> link = page.Header("link")) {
      const size_t open = link->find('<'), close = link->find('>');
      ASSERT_NE(close, std::string::npos);
      EXPECT_NE(link->find("rel=\"next\""), std::string::npos);
      std::string url = link->substr(open + 1, close - open - 1);
      ASSERT_EQ(url.rfind(base_url, 0), 0u) << url;
      next = url.substr(base_url.size());
      EXPECT_NE(next.find(CommitId(base_)), std::string::npos) << next;  // pinned to the commit
    }
  }
  std::vector<std::string> paths;
  for (const json& e : entries) {
    paths.push_back(e["path"]);
    EXPECT_FALSE(e.contains("xetHash"));
    if (e["path"] == "model.safetensors") {
      EXPECT_EQ(e["type"], "file");
      EXPECT_EQ(e["lfs"]["oid"], Sha256Hex(File(base_dir_, "model.safetensors")));
      EXPECT_EQ(e["lfs"]["size"], e["size"]);
      EXPECT_TRUE(e["lfs"]["pointerSize"].is_number());
    }
    if (e["path"] == "config.json") {
      EXPECT_EQ(e["oid"], GitBlobId(File(base_dir_, "config.json")));
      EXPECT_FALSE(e.contains("lfs"));
    }
    if (e["path"] == "tokenizer") {
      EXPECT_EQ(e["type"], "directory");
    }
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"README.md", "config.json", "model.safetensors",
                                             "tokenizer", "tokenizer/vocab.txt"}));
  // A folder, not recursive.
  Reply sub = Fetch(port(), "GET", "/api/models/org/gpt2/tree/main/tokenizer");
  ASSERT_EQ(sub.status, 200);
  ASSERT_EQ(sub.Json().size(), 1u);
  EXPECT_EQ(sub.Json()[0]["path"], "tokenizer/vocab.txt");
  Reply none = Fetch(port(), "GET", "/api/models/org/gpt2/tree/main/nope");
  EXPECT_EQ(none.Header("x-error-code"), "EntryNotFound");

  // get_paths_info: a form body (paths=...&expand=...), and the JS client's JSON.
  Reply form = Fetch(port(), "POST", "/api/models/org/gpt2/paths-info/main",
                     {{"Content-Type", "application/x-www-form-urlencoded"}},
                     "paths=config.json&paths=tokenizer&paths=missing.bin&expand=True");
  ASSERT_EQ(form.status, 200) << form.body;
  ASSERT_EQ(form.Json().size(), 2u);
  EXPECT_EQ(form.Json()[0]["path"], "config.json");
  EXPECT_EQ(form.Json()[1]["type"], "directory");
  Reply js = Fetch(port(), "POST", "/api/models/org/gpt2/paths-info/" + CommitId(base_),
                   {{"Content-Type", "application/json"}},
                   R"({"paths":["model.safetensors"],"expand":true})");
  ASSERT_EQ(js.status, 200) << js.body;
  EXPECT_EQ(js.Json()[0]["lfs"]["oid"], Sha256Hex(File(base_dir_, "model.safetensors")));

  // list_repo_refs: tags as branches.
  Reply refs = Fetch(port(), "GET", "/api/models/org/gpt2/refs");
  ASSERT_EQ(refs.status, 200);
  std::map<std::string, std::string> branches;
  const json refs_doc = refs.Json();
  for (const json& b : refs_doc["branches"]) branches[b["name"]] = b["targetCommit"];
  EXPECT_EQ(branches["main"], CommitId(base_));
  EXPECT_EQ(branches["v2"], CommitId(ft_));
  // Every route resolves the commit id and refs/heads/<tag>.
  EXPECT_EQ(Fetch(port(), "GET", "/api/models/org/gpt2/revision/" + CommitId(ft_)).Json()["sha"],
            CommitId(ft_));
  EXPECT_EQ(HeadMetadata(port(), "org/gpt2", "refs%2Fheads%2Fv2", "config.json")
                .Header("x-repo-commit"),
            CommitId(ft_));

  // whoami: the token's name; none -> 401.
  Reply me = Fetch(port(), "GET", "/api/whoami-v2", Auth());
  ASSERT_EQ(me.status, 200);
  EXPECT_EQ(me.Json()["name"], "admin");
  EXPECT_EQ(Fetch(port(), "GET", "/api/whoami-v2").status, 401);
  Reply bad = Fetch(port(), "GET", "/api/whoami-v2",
                    {{"Authorization", "Bearer " + std::string(64, 'a')}});
  EXPECT_EQ(bad.status, 401);
  EXPECT_EQ(bad.Header("x-error-message").value_or("").rfind(
                "Invalid credentials in Authorization header", 0),
            0u);
}

TEST_F(HubContractTest, BadInputGetsHubErrorsAndNothingOutsideTheVersion) {
  ASSERT_NO_FATAL_FAILURE(Start());
  if (IsSkipped()) return;
  const std::string commit = CommitId(base_);
  // Path traversal in {filename} and {path}: raw, percent-encoded, absolute, backslash.
  for (const std::string target :
       {"/org/gpt2/resolve/main/../config.json", "/org/gpt2/resolve/main/%2e%2e/config.json",
        "/org/gpt2/resolve/main/tokenizer/%2E%2E/%2E%2E/blz.db",
        "/org/gpt2/resolve/main//etc/passwd", "/org/gpt2/resolve/main/..%5cconfig.json",
        "/org/gpt2/resolve/main/tokenizer%2F..%2F..%2Fblz.db",
        "/org/gpt2/resolve/main/./config.json", "/api/models/org/gpt2/tree/main/../..",
        "/api/models/org/gpt2/tree/main/%2e%2e"}) {
    Reply r = Fetch(port(), "GET", target);
    EXPECT_TRUE(r.status == 400 || r.status == 404) << target << ": " << r.status;
    EXPECT_TRUE(r.Header("x-error-message").has_value()) << target;
    EXPECT_EQ(r.body.find("BLZARCH"), std::string::npos) << target;
    EXPECT_EQ(r.body.find("SQLite"), std::string::npos) << target;
  }
  // Unknown revisions.
  for (const std::string& rev : std::vector<std::string>{"nope", std::string(40, 'f'), "refs%2Fpr%2F1"}) {
    Reply r = HeadMetadata(port(), "org/gpt2", rev, "config.json");
    EXPECT_EQ(r.status, 404) << rev;
    EXPECT_EQ(r.Header("x-error-code"), "RevisionNotFound") << rev;
    Reply info = Fetch(port(), "GET", "/api/models/org/gpt2/revision/" + rev);
    EXPECT_EQ(info.Header("x-error-code"), "RevisionNotFound") << rev;
  }
  // Unknown and percent-encoded repository ids.
  for (const std::string& target : std::vector<std::string>{"/api/models/org/none", "/api/models/org%2Fgpt2",
                                   "/org%2Fgpt2/resolve/main/config.json",
                                   "/org/none/resolve/main/config.json"}) {
    Reply r = Fetch(port(), "GET", target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_EQ(r.Header("x-error-code"), "RepoNotFound") << target;
  }
  EXPECT_EQ(Fetch(port(), "DELETE", "/org/gpt2/resolve/main/config.json").status, 405);
}

TEST_F(HubContractTest, PrivateRegistryNeedsATokenAndHidesUnreadableRepositories) {
  RegistryOptions o;
  o.private_mode = true;
  ASSERT_NO_FATAL_FAILURE(Start(std::move(o)));
  if (IsSkipped()) return;
  Reply anonymous = Fetch(port(), "GET", "/api/models/org/gpt2");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(anonymous.Header("x-error-code"), "RepoNotFound");
  EXPECT_EQ(HeadMetadata(port(), "org/gpt2", "main", "config.json").status, 401);

  Reply admin = Fetch(port(), "GET", "/api/models/org/gpt2", Auth());
  ASSERT_EQ(admin.status, 200);
  EXPECT_EQ(admin.Json()["private"], true);
  Reply file = Fetch(port(), "GET", "/org/gpt2/resolve/main/config.json", Auth());
  EXPECT_EQ(file.status, 200);
  EXPECT_TRUE(file.body == File(base_dir_, "config.json"));

  // A token that may pull elsewhere only: the repository answers as a missing one.
  auto other = h_->registry().db().CreateToken("other", "other/*:pull");
  ASSERT_TRUE(other.ok());
  const std::map<std::string, std::string> other_auth = {{"Authorization", "Bearer " + *other}};
  Reply hidden = Fetch(port(), "GET", "/api/models/org/gpt2", other_auth);
  Reply missing = Fetch(port(), "GET", "/api/models/org/none", other_auth);
  EXPECT_EQ(hidden.status, 404);
  EXPECT_EQ(hidden.Header("x-error-code"), "RepoNotFound");
  EXPECT_EQ(hidden.status, missing.status);
  Reply hidden_file = HeadMetadata(port(), "org/gpt2", "main", "config.json", other_auth);
  EXPECT_EQ(hidden_file.status, 404);
  EXPECT_EQ(hidden_file.Header("x-error-code"), "RepoNotFound");
  EXPECT_FALSE(hidden_file.Header("x-repo-commit").has_value());
}

}  // namespace
}  // namespace blz::registry::hub
