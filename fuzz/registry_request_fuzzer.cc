// fuzz_registry_request: the registry's request routing and handlers (registry/registry.h)
// on a fuzzed request, driven as the Beast session drives them: PlanBody on the head, then the
// body into memory or the planned upload file, then Handle. The registry is opened once per
// process on a temp data dir holding two pushed versions (org/model:v1 and :v2, tiny archives),
// with the patcher's patch and full-patch functions (no background compression).
//
// Input (text): "METHOD TARGET\n", then "Name: value\n" header lines up to an empty line, then
// the body. In the target and headers, "@T@" becomes the admin token, "@A@" / "@B@" the two
// versions' archive digests (so authenticated writes, patches and diffs are reachable).
// Properties: a status in 100..599; a file body range lies inside its file.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "client/manifest.h"
#include "core/digest.h"
#include "fuzz/fuzz_util.h"
#include "registry/registry.h"

namespace {

using blz::registry::BodyPlan;
using blz::registry::Header;
using blz::registry::Registry;
using blz::registry::Request;
using blz::registry::RequestHead;
using blz::registry::Response;

std::unique_ptr<Registry> g_registry;
std::string g_token, g_a, g_b;

std::string Replace(std::string s) {
  for (auto [from, to] : {std::pair<std::string_view, const std::string*>{"@T@", &g_token},
                          {"@A@", &g_a},
                          {"@B@", &g_b}}) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to->size())) {
      s.replace(p, from.size(), *to);
    }
  }
  return s;
}

Response Run(const RequestHead& head, std::string_view body) {
  BodyPlan plan = g_registry->PlanBody(head);
  if (plan.reject.has_value()) return std::move(*plan.reject);
  Request req;
  req.head = head;
  if (body.size() > plan.limit) body = body.substr(0, plan.limit);
  if (plan.kind == BodyPlan::Kind::kFile) {
    blz::fuzz::WriteBytes(plan.file_path, blz::AsBytes(body));
    req.body_file = plan.file_path;
  } else {
    req.body = std::string(body);
  }
  Response res = g_registry->Handle(req);
  if (!req.body_file.empty()) std::filesystem::remove(req.body_file);
  return res;
}

Response Call(const std::string& method, const std::string& target, const std::string& body,
              std::vector<Header> headers = {}) {
  RequestHead head;
  head.method = method;
  head.target = target;
  head.headers = std::move(headers);
  head.headers.push_back({"Authorization", "Bearer " + g_token});
  head.content_length = body.size();
  return Run(head, body);
}

std::string Push(const std::string& repo, const std::string& tag, const std::string& archive) {
  std::string ad = blz::MakeDigest(blz::Sha256Hex(archive));
  blz::client::ModelConfig config;
  config.archive_digest = ad;
  config.archive_size = archive.size();
  std::string config_json = blz::client::BuildConfigJson(config);
  std::string cd = blz::MakeDigest(blz::Sha256Hex(config_json));
  for (const auto& [d, bytes] : {std::pair{cd, config_json}, std::pair{ad, archive}}) {
    Response r = Call("POST", "/v2/" + repo + "/blobs/uploads/?digest=" + d, bytes);
    blz::fuzz::Check(r.status == 201, "setup: blob push");
  }
  blz::client::ModelManifest m;
  m.config_digest = cd;
  m.config_size = config_json.size();
  m.archive_digest = ad;
  m.archive_size = archive.size();
  Response r = Call("PUT", "/v2/" + repo + "/manifests/" + tag, blz::client::BuildManifestJson(m),
                    {{"Content-Type", std::string(blz::client::kManifestMediaType)}});
  if (r.status != 201) std::fprintf(stderr, "setup: manifest push: %d %s\n", r.status, r.body.c_str());
  blz::fuzz::Check(r.status == 201, "setup: manifest push");
  return ad;
}

void Setup() {
  blz::registry::RegistryOptions options;
  options.create_patch = blz::registry::PatcherPatchFunction();
  options.full_patch = blz::registry::PatcherFullPatchFunctions();
  options.storage.background = false;
  auto r = Registry::Open(blz::fuzz::TempPath("registry"), std::move(options));
  blz::fuzz::MustOk(r.status(), "Registry::Open");
  g_registry = std::move(*r);
  auto token = g_registry->EnsureAdminToken();
  blz::fuzz::MustOk(token.status(), "EnsureAdminToken");
  g_token = token->value_or("");
  std::string work = blz::fuzz::TempPath("work");
  blz::fuzz::MakeTinyArchive(work, work + "/a.blz", 1, 0);
  blz::fuzz::MakeTinyArchive(work, work + "/b.blz", 1, 5);
  g_a = Push("org/model", "v1", blz::fuzz::ReadAll(work + "/a.blz"));
  g_b = Push("org/model", "v2", blz::fuzz::ReadAll(work + "/b.blz"));
}

void WriteSeeds() {
  const char* seeds[] = {
      "GET /v2/\n\n",
      "GET /v2/_catalog?n=1&last=org%2Fa\n\n",
      "GET /v2/org/model/tags/list?n=1\n\n",
      "GET /v2/org/model/manifests/v1\nAccept: application/vnd.oci.image.manifest.v1+json\n\n",
      "HEAD /v2/org/model/manifests/@A@\n\n",
      "GET /v2/org/model/blobs/@A@\nRange: bytes=10-99\n\n",
      "GET /v2/org/model/blobs/@B@\nRange: bytes=-64\n\n",
      "GET /v2/org/model/blz/patch?from=@A@&to=@B@\n\n",
      "GET /v2/org/model/blz/patch?to=@B@\nRange: bytes=0-\n\n",
      "GET /v2/org/model/blz/diff?from=@A@&to=@B@\n\n",
      "GET /v2/_blz/structures/0000\n\n",
      "GET /v2/_blz/storage\nAuthorization: Bearer @T@\n\n",
      "POST /v2/org/new/blobs/uploads/\nAuthorization: Bearer @T@\n\n",
      "POST /v2/org/new/blobs/uploads/?digest=sha256:"
      "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n"
      "Authorization: Bearer @T@\n\nhello",
      "PATCH /v2/org/new/blobs/uploads/00000000-0000-0000-0000-000000000000\n"
      "Authorization: Bearer @T@\nContent-Range: 0-4\n\nhello",
      "PUT /v2/org/model/manifests/v3\nAuthorization: Bearer @T@\n"
      "Content-Type: application/vnd.oci.image.manifest.v1+json\n\n{\"schemaVersion\":2}",
      "DELETE /v2/org/model/manifests/v2\nAuthorization: Bearer @T@\n\n",
      "DELETE /v2/org/model/blobs/uploads/x\nAuthorization: Bearer @T@\n\n",
  };
  blz::fuzz::WriteSeedList(seeds);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  blz::fuzz::WriteSeedsAndExitIfAsked(WriteSeeds);
  Setup();
  std::atexit([] { g_registry.reset(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto line = [&in]() {
    size_t nl = in.find('\n');
    std::string_view l = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    return l;
  };
  std::string_view first = line();
  size_t sp = first.find(' ');
  if (sp == std::string_view::npos) return 0;
  RequestHead head;
  head.method = std::string(first.substr(0, sp));
  head.target = Replace(std::string(first.substr(sp + 1)));
  while (!in.empty()) {
    std::string_view l = line();
    if (l.empty()) break;
    size_t colon = l.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view value = l.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    head.headers.push_back({std::string(l.substr(0, colon)), Replace(std::string(value))});
  }
  head.content_length = in.size();
  Response res = Run(head, in);
  blz::fuzz::Check(res.status >= 100 && res.status <= 599, "status in 100..599");
  if (!res.file_path.empty()) {
    std::error_code ec;
    uint64_t file_size = std::filesystem::file_size(res.file_path, ec);
    blz::fuzz::Check(!ec && res.file_offset <= file_size &&
                         res.file_length <= file_size - res.file_offset,
                     "a file body range lies inside its file");
  }
  return 0;
}
