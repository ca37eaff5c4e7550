// Contract test: Ollama's pull, replayed request by request against a live registry over HTTP.
//
// Followed source (ollama/ollama, pinned in docs/ollama.md and registry/ollama/ollama_manifest.h):
//   server/images.go @ 5dbb81b72c4b
//     PullModel: pullModelManifest, then for each of manifest.Layers + manifest.Config:
//       downloadBlob; then verifyBlob (SHA-256 of the file == the digest) for each.
//     pullModelManifest: GET /v2/<namespace>/<model>/manifests/<tag> with exactly
//       "Accept: application/vnd.docker.distribution.manifest.v2+json"; 404 -> "file does not
//       exist", other >= 400 -> "<status>: <body>"; 401 -> parseRegistryChallenge of
//       WWW-Authenticate, token from the realm (whose host must be the registry's), one retry.
//     makeRequest: User-Agent "ollama/<version> (<arch> <os>) Go/<version>", Bearer token if any.
//   server/download.go @ 01ca4ec3b61e
//     Prepare: HEAD the blob; Content-Length = total; parts of total/16 bytes clamped to
//       [100 MB, 1000 MB] (numDownloadParts, minDownloadPartSize, maxDownloadPartSize).
//     run: one GET of the blob (makeRequestWithRetry, same-host redirects followed, a 307/302 to
//       another host gives the "direct URL"; a 200's body is closed unread), then per part a GET
//       of the direct URL with "Range: bytes=<start>-<end>" from http.DefaultClient (no
//       Authorization), copying part.Size - completed bytes WITHOUT checking the status; a cut
//       part resumes at offset + completed.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "registry/net.h"
#include "registry/registry.h"
#include "registry/server.h"
#include "tests/registry/handler_harness.h"
#include "tests/registry/ollama/ollama_test_util.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using testing::GgufArchive;
using testing::Harness;
using testing::PushVersion;
using testing::TinyArchive;
using testing::TinyGgufPath;

// download.go's constants.
constexpr int64_t kNumDownloadParts = 16;
constexpr int64_t kMegaByte = 1000 * 1000;  // format.MegaByte
constexpr int64_t kMinDownloadPartSize = 100 * kMegaByte;
constexpr int64_t kMaxDownloadPartSize = 1000 * kMegaByte;
const char kUserAgent[] = "ollama/0.12.0 (amd64 linux) Go/go1.24.0";

struct Reply {
  int status = 0;
  std::vector<Header> headers;
  std::string body;
  std::optional<std::string> Get(std::string_view name) const { return FindHeader(headers, name); }
};

// One request on a fresh connection. `read_body` false: read the head, then close the
// connection (what Go does when a handler closes an unread body).
Reply Exchange(uint16_t port, const std::string& method, const std::string& target,
               const std::vector<Header>& headers, bool read_body = true) {
  net::io_context ioc;
  tcp::socket socket(ioc);
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::request<http::empty_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  for (const Header& h : headers) req.set(h.name, h.value);
  http::write(socket, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64ull << 20);
  if (method == "HEAD") parser.skip(true);
  Reply reply;
  if (read_body) {
    http::read(socket, buffer, parser);
  } else {
    http::read_header(socket, buffer, parser);
  }
  const auto& res = parser.get();
  reply.status = int(res.result_int());
  for (const auto& f : res) {
    reply.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  }
  if (read_body) reply.body = res.body();
  beast::error_code ec;
  socket.shutdown(tcp::socket::shutdown_both, ec);
  return reply;
}

// download.go's part plan for a blob of `total` bytes: (offset, size) pairs. `min_part` is
// minDownloadPartSize (lowered only where a test says so, to get several parts of a small file).
std::vector<std::pair<int64_t, int64_t>> PlanParts(int64_t total,
                                                   int64_t min_part = kMinDownloadPartSize) {
  int64_t size = total / kNumDownloadParts;
  if (size < min_part) size = min_part;
  if (size > kMaxDownloadPartSize) size = kMaxDownloadPartSize;
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (int64_t offset = 0; offset < total;) {
    if (offset + size > total) size = total - offset;
    parts.emplace_back(offset, size);
    offset += size;
  }
  return parts;
}

class OllamaPullContract : public ::testing::Test {
 protected:
  void Serve(Harness* h) {
    SessionOptions session;
    session.log = [](const std::string&) {};
    auto s = Server::Start(&h->registry(), "127.0.0.1:0", 2, std::move(session));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  // The registry lives in the fixture, so TearDown stops the server (whose sessions log to the
  // registry's metrics after the client has its reply) before the registry is destroyed.
  Harness& MakeHarness(RegistryOptions options = {}) {
    harness_ = std::make_unique<Harness>(std::move(options));
    return *harness_;
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  uint16_t port() const { return server_->port(); }

  // downloadBlob of `digest` from /v2/<repo>/: Prepare (HEAD), run (the direct-URL GET, then
  // each part's Range GET), as download.go does them; `cut_after` > 0 cuts the first part after
  // that many bytes and resumes it, as a restarted pull does from its part file. Returns the
  // file's bytes as assembled.
  std::string DownloadBlob(const std::string& repo, const std::string& digest,
                           int64_t min_part = kMinDownloadPartSize, int64_t cut_after = 0) {
    const std::string url = "/v2/" + repo + "/blobs/" + digest;
    Reply head = Exchange(port(), "HEAD", url, {{"User-Agent", kUserAgent}});
    EXPECT_EQ(head.status, 200) << url;
    const std::optional<std::string> length = head.Get("Content-Length");
    EXPECT_TRUE(length.has_value());
    if (!length.has_value()) return "";
    const int64_t total = std::stoll(*length);

    Reply direct = Exchange(port(), "GET", url, {{"User-Agent", kUserAgent}}, /*read_body=*/false);
    EXPECT_EQ(direct.status, 200) << "download.go wants 200 (or a redirect) for " << url;

    std::string file(size_t(total), '\0');
    for (const auto& [offset, size] : PlanParts(total, min_part)) {
      int64_t completed = 0;
      if (cut_after > 0 && offset == 0 && cut_after < size) {
        // The first attempt is cut: only cut_after bytes arrive (io.ErrUnexpectedEOF keeps them).
        Reply first = Exchange(port(), "GET", url,
                               {{"User-Agent", "Go-http-client/1.1"},
                                {"Range", "bytes=" + std::to_string(offset) + "-" +
                                              std::to_string(offset + size - 1)}});
        EXPECT_EQ(first.status, 206);
        file.replace(size_t(offset), size_t(cut_after), first.body.substr(0, size_t(cut_after)));
        completed = cut_after;
      }
      const int64_t start = offset + completed;  // part.StartsAt()
      const int64_t stop = offset + size;        // part.StopsAt()
      Reply r = Exchange(port(), "GET", url,
                         {{"User-Agent", "Go-http-client/1.1"},
                          {"Range", "bytes=" + std::to_string(start) + "-" +
                                        std::to_string(stop - 1)}});
      // download.go copies the body without looking at the status: anything but exactly these
      // bytes would corrupt the file.
      EXPECT_EQ(r.status, 206) << r.body.substr(0, 200);
      EXPECT_EQ(r.Get("Content-Range"), "bytes " + std::to_string(start) + "-" +
                                            std::to_string(stop - 1) + "/" +
                                            std::to_string(total));
      EXPECT_EQ(int64_t(r.body.size()), stop - start);
      file.replace(size_t(start), size_t(stop - start), r.body.substr(0, size_t(stop - start)));
    }
    return file;
  }

  // PullModel: the manifest, every layer and the config downloaded and verified. Returns the
  // manifest as parsed.
  json Pull(const std::string& repo, const std::string& tag, int64_t min_part,
            int64_t cut_after, std::vector<std::string>* files) {
    Reply m = Exchange(port(), "GET", "/v2/" + repo + "/manifests/" + tag,
                       {{"Accept", "application/vnd.docker.distribution.manifest.v2+json"},
                        {"User-Agent", kUserAgent}});
    EXPECT_EQ(m.status, 200) << m.body;
    json manifest = json::parse(m.body, nullptr, false);
    EXPECT_FALSE(manifest.is_discarded()) << m.body;
    if (manifest.is_discarded()) return manifest;
    // layers = manifest.Layers + manifest.Config (when it has a digest), in that order.
    std::vector<json> layers(manifest["layers"].begin(), manifest["layers"].end());
    if (!manifest["config"].value("digest", "").empty()) layers.push_back(manifest["config"]);
    for (const json& layer : layers) {
      const std::string digest = layer["digest"];
      std::string bytes = DownloadBlob(repo, digest, min_part, cut_after);
      EXPECT_EQ(bytes.size(), layer["size"].get<uint64_t>()) << digest;
      // verifyBlob: the file's SHA-256 names it.
      EXPECT_EQ(MakeDigest(Sha256Hex(bytes)), digest);
      files->push_back(std::move(bytes));
    }
    return manifest;
  }

  std::unique_ptr<Harness> harness_;
  std::unique_ptr<Server> server_;
};

TEST_F(OllamaPullContract, PullsARealGgufAndEveryLayerVerifies) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string gguf = blz::testing::ReadFileBytes(TinyGgufPath(corpus));
  Harness& h = MakeHarness();
  PushVersion(&h, "library/tiny-llama", "latest", GgufArchive(TinyGgufPath(corpus)));
  ASSERT_NO_FATAL_FAILURE(Serve(&h));

  std::vector<std::string> files;
  json manifest = Pull("library/tiny-llama", "latest", kMinDownloadPartSize, 0, &files);
  ASSERT_EQ(files.size(), 2u);  // the model layer, then the config
  EXPECT_EQ(manifest["layers"][0]["mediaType"], "application/vnd.ollama.image.model");
  EXPECT_TRUE(files[0] == gguf);  // the corpus file, byte for byte
  json config = json::parse(files[1]);
  EXPECT_EQ(config["model_format"], "gguf");
  EXPECT_EQ(config["model_family"], "llama");
}

TEST_F(OllamaPullContract, ManyPartsAndAResumedPartAssembleTheSameFile) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string gguf = blz::testing::ReadFileBytes(TinyGgufPath(corpus));
  Harness& h = MakeHarness();
  PushVersion(&h, "library/tiny-llama", "q", GgufArchive(TinyGgufPath(corpus)));
  ASSERT_NO_FATAL_FAILURE(Serve(&h));
  // download.go's plan with minDownloadPartSize lowered to 100 KB: 18 Range requests over the
  // 1.75 MB file (the request shapes of a 1.6 GB model), and the first part cut after 777 bytes.
  std::vector<std::string> files;
  Pull("library/tiny-llama", "q", 100 * 1000, 777, &files);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_TRUE(files[0] == gguf);
}

TEST_F(OllamaPullContract, ASafetensorsVersionAnswersAnErrorOllamaPrints) {
  Harness& h = MakeHarness();
  PushVersion(&h, "org/not-gguf", "v1", TinyArchive(1));
  ASSERT_NO_FATAL_FAILURE(Serve(&h));
  Reply m = Exchange(port(), "GET", "/v2/org/not-gguf/manifests/v1",
                     {{"Accept", "application/vnd.docker.distribution.manifest.v2+json"},
                      {"User-Agent", kUserAgent}});
  // Not 404 (Ollama would say only "file does not exist"): >= 400, printed with the body.
  EXPECT_EQ(m.status, 406);
  EXPECT_NE(m.body.find("Ollama pulls only versions holding exactly one .gguf file"),
            std::string::npos)
      << m.body;
}

TEST_F(OllamaPullContract, PrivateRegistryChallengeIsOnTheRegistrysOwnHost) {
  BLZ_REQUIRE_CORPUS(corpus);
  RegistryOptions o;
  o.private_mode = true;
  Harness& h = MakeHarness(o);
  PushVersion(&h, "library/tiny-llama", "latest", GgufArchive(TinyGgufPath(corpus)));
  ASSERT_NO_FATAL_FAILURE(Serve(&h));
  const std::string host = "127.0.0.1:" + std::to_string(port());
  Reply m = Exchange(port(), "GET", "/v2/library/tiny-llama/manifests/latest",
                     {{"Accept", "application/vnd.docker.distribution.manifest.v2+json"},
                      {"User-Agent", kUserAgent}});
  ASSERT_EQ(m.status, 401);
  // parseRegistryChallenge reads realm="..." and getAuthorizationToken refuses a realm on
  // another host than the request's.
  const std::string challenge = m.Get("WWW-Authenticate").value_or("");
  EXPECT_EQ(challenge.rfind("Bearer ", 0), 0u) << challenge;
  EXPECT_NE(challenge.find("realm=\"http://" + host + "/v2/_blz/token\""), std::string::npos)
      << challenge;
  // getAuthorizationToken: GET <realm>?service=&scope=&ts=&nonce= signed with the Ollama key
  // ("<ssh public key, base64>:<signature, base64>", no scheme). blz cannot map that key to a
  // token: 401, which Ollama prints ("<status>: <body>").
  const std::string scope = "repository:library/tiny-llama:pull";
  EXPECT_NE(challenge.find("scope=\"" + scope + "\""), std::string::npos) << challenge;
  Reply token = Exchange(
      port(), "GET",
      "/v2/_blz/token?service=" + host + "&scope=repository%3Alibrary%2Ftiny-llama%3Apull" +
          "&ts=1764200000&nonce=bm9uY2Vub25jZW5vbmNl",
      {{"Authorization",
        "AAAAC3NzaC1lZDI1NTE5AAAAIK2rEaTLWbqYVRfgKUnIWHq0PxDkhmNKqCuhbl+d0WJ1:"
        "c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJl"},
       {"User-Agent", kUserAgent}});
  EXPECT_EQ(token.status, 401) << token.body;
  // With a blz token (what a proxy in front of Ollama, or another client, would send) the pull
  // works; download.go's Range GETs carry no Authorization and are refused (docs/ollama.md).
  Reply with_token = Exchange(port(), "GET", "/v2/library/tiny-llama/manifests/latest",
                              {{"Accept", "application/vnd.docker.distribution.manifest.v2+json"},
                               {"Authorization", "Bearer " + h.token()}});
  ASSERT_EQ(with_token.status, 200) << with_token.body;
  const std::string gguf_digest = json::parse(with_token.body)["layers"][0]["digest"];
  Reply part = Exchange(port(), "GET", "/v2/library/tiny-llama/blobs/" + gguf_digest,
                        {{"Range", "bytes=0-99"}});
  EXPECT_EQ(part.status, 401);
}

}  // namespace
}  // namespace blz::registry
