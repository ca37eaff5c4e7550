#include "client/registry_client.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "client/auth.h"
#include "client/manifest.h"
#include "client/retry.h"
#include "core/digest.h"
#include "formats/json_strict.h"
#include "core/file_util.h"

namespace blz::client {
namespace {

// Largest blob or patch blz will stream when no size is known up front.
constexpr uint64_t kMaxBlobBytes = 1ull << 40;
constexpr int kMaxTagPages = 1000;

bool IsPrintable(std::string_view s) {
  for (char c : s) {
    if ((c < ' ' || c > '~') && c != '\t') return false;
  }
  return true;
}

// "CODE: message; CODE2: message2" from an OCI error body, or "" when it is not one.
std::string OciErrors(const std::string& body) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return "";
  auto errors = doc.find("errors");
  if (errors == doc.end() || !errors->is_array() || errors->empty()) return "";
  std::string out;
  for (const nlohmann::json& e : *errors) {
    if (!e.is_object()) continue;
    std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>()
                                                                   : "UNKNOWN";
    std::string message =
        e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
    if (!out.empty()) out += "; ";
    out += code;
    if (!message.empty()) out += ": " + message;
    if (e.contains("detail") && !e["detail"].is_null() && !e["detail"].empty()) {
      std::string detail =
          e["detail"].is_string() ? e["detail"].get<std::string>() : e["detail"].dump();
      if (!detail.empty() && detail.size() <= 300) out += " (" + detail + ")";
    }
  }
  return out;
}

bool ErrorsContain(const std::string& body, std::string_view code) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("errors") ||
      !doc["errors"].is_array()) {
    return false;
  }
  for (const nlohmann::json& e : doc["errors"]) {
    if (e.is_object() && e.contains("code") && e["code"].is_string() &&
        e["code"].get<std::string>() == code) {
      return true;
    }
  }
  return false;
}

// The URL of rel="next" in a Link header, or "".
std::string NextLink(const std::string& link) {
  if (link.find("rel=\"next\"") == std::string::npos && link.find("rel=next") == std::string::npos) {
    return "";
  }
  size_t open = link.find('<');
  size_t close = link.find('>', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return link.substr(open + 1, close - open - 1);
}

bool IsAuthorizationHeader(std::string_view name) {
  static constexpr std::string_view kName = "authorization";
  if (name.size() != kName.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != kName[i]) return false;
  }
  return true;
}

HttpClientOptions WithTls(HttpClientOptions options, bool tls) {
  options.tls = tls;
  return options;
}

bool IsRedirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

struct RedirectTarget {
  bool tls = false;
  std::string host;  // without brackets
  uint16_t port = 0;
  std::string target;  // origin form
};

// "http(s)://HOST[:PORT]/PATH?QUERY" -> its parts; nullopt when unusable.
std::optional<RedirectTarget> ParseAbsoluteUrl(std::string_view url) {
  RedirectTarget out;
  std::string_view rest;
  if (url.rfind("https://", 0) == 0) {
    out.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return std::nullopt;
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  size_t hash = out.target.find('#');
  if (hash != std::string::npos) out.target.resize(hash);
  if (authority.find('@') != std::string_view::npos) return std::nullopt;
  Result<RegistryAddress> addr = ParseRegistryAddress(
      std::string(out.tls ? "https://" : "http://") + std::string(authority));
  if (!addr.ok()) return std::nullopt;
  out.host = addr->host;
  out.port = addr->port;
  return out;
}

}  // namespace

Result<HttpResponse> SendGetFollowingRedirects(HttpClient* first, const RegistryAddress& origin,
                                               HttpRequest request,
                                               const HttpClientOptions& options,
                                               const TransferOptions& transfer) {
  HttpClient* client = first;
  std::unique_ptr<HttpClient> other;
  RedirectTarget at{origin.tls, origin.host, origin.port, request.target};
  for (int hop = 0;; ++hop) {
    BLZ_ASSIGN_OR_RETURN(HttpResponse r, client->Send(request, transfer));
    if (!IsRedirect(r.status)) return r;
    const std::string where = std::string(client->scheme()) + "://" + client->authority();
    if (hop >= kMaxRedirects) {
      return Unavailable("GET " + request.target + " from " + where + ": more than " +
                         std::to_string(kMaxRedirects) + " redirects");
    }
    const std::string location = r.Header("Location");
    if (location.empty()) {
      return Unavailable("GET " + request.target + " from " + where + ": HTTP " +
                         std::to_string(r.status) + " without a Location header");
    }
    RedirectTarget next = at;
    if (location.rfind("//", 0) != 0 && location.front() == '/') {
      next.target = location;
    } else if (std::optional<RedirectTarget> abs = ParseAbsoluteUrl(location); abs.has_value()) {
      next = *abs;
    } else {
      return Unavailable("GET " + request.target + " from " + where +
                         ": unusable redirect Location '" + location.substr(0, 200) + "'");
    }
    request.target = next.target;
    const bool same_origin =
        next.tls == origin.tls && next.host == origin.host && next.port == origin.port;
    if (!same_origin) {
      // Credentials for the registry are not sent to another origin (an object store).
      std::erase_if(request.headers,
                    [](const HttpHeader& h) { return IsAuthorizationHeader(h.name); });
    }
    if (next.tls != at.tls || next.host != at.host || next.port != at.port) {
      if (same_origin) {
        client = first;
      } else {
        HttpClientOptions o = options;
        o.tls = next.tls;
        other = std::make_unique<HttpClient>(next.host, next.port, o);
        client = other.get();
      }
    }
    at = next;
  }
}

Status StatusFromResponse(const HttpResponse& response, std::string_view action,
                          std::string_view what, bool have_token, std::string_view registry) {
  std::string errors = OciErrors(response.body);
  if (errors.empty()) {
    errors = "HTTP " + std::to_string(response.status);
    if (!response.reason.empty()) errors += " " + response.reason;
    std::string body = response.body.substr(0, 200);
    while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
    if (!body.empty() && IsPrintable(body)) errors += ": " + body;
  }
  const int st = response.status;
  std::string msg = std::string(action) + (st >= 500 ? " failed: registry error: " : " refused: ") +
                    errors + " (" + std::string(what) + ")";
  if (st == 401) {
    if (have_token) {
      const bool revoked = msg.find("revoked") != std::string::npos;
      const std::string source = TokenSourceFor(std::string(registry));
      const bool from_env = source.find("BLZ_TOKEN") != std::string::npos;
      msg += "; " + source +
             (!revoked ? " was rejected"
              : from_env ? " was revoked: set BLZ_TOKEN to a current token"
                         : " was revoked: log in again with a current token (`blz login " +
                               std::string(registry) + "`)");
    } else {
      msg += "; no token for " + std::string(registry) + ": run `blz login " +
             std::string(registry) + "` or set BLZ_TOKEN";
    }
  }
  if (st == 403 && have_token) {
    msg += "; " + TokenSourceFor(std::string(registry)) +
           " lacks this permission: use a token whose scope grants it (`blz token create`)";
  }
  if (st == 401 || st == 403) return Unauthorized(msg);
  if (st == 404) return NotFound(msg);
  if (st == 413) return TooLarge(msg);
  if (st == 400 && ErrorsContain(response.body, "DIGEST_INVALID")) return DigestMismatch(msg);
  if (st == 400 || st == 416) return InvalidArgument(msg);
  return Unavailable(msg);
}

RegistryClient::RegistryClient(RegistryAddress registry, RegistryClientOptions options)
    : registry_(std::move(registry)), options_(std::move(options)),
      http_(registry_.host, registry_.port, WithTls(options_.http, registry_.tls)) {
  options_.http.tls = registry_.tls;
}

Result<HttpResponse> RegistryClient::GetFollowingRedirects(const HttpRequest& req,
                                                           const TransferOptions& t) {
  return SendGetFollowingRedirects(&http_, registry_, req, options_.http, t);
}

HttpRequest RegistryClient::NewRequest(std::string method, std::string target) const {
  HttpRequest req;
  req.method = std::move(method);
  req.target = std::move(target);
  if (!options_.token.empty()) {
    req.headers.push_back({"Authorization", "Bearer " + options_.token});
  }
  return req;
}

Status RegistryClient::Fail(const HttpResponse& r, std::string_view action,
                            std::string_view what) const {
  return StatusFromResponse(r, action, what, !options_.token.empty(), registry_.ToString());
}

Status RegistryClient::Ping() {
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("GET", "/v2/")));
  if (r.status == 200) return Status::Ok();
  // Anonymous: a challenge means "reachable, credentials needed for protected actions".
  if (r.status == 401 && options_.token.empty()) return Status::Ok();
  return Fail(r, "ping", "GET /v2/ at " + registry_.ToString());
}

Result<nlohmann::json> RegistryClient::CreateToken(std::string_view name, std::string_view scope,
                                                   int64_t expires_in) {
  nlohmann::json body = {{"name", name}, {"scope", scope}};
  if (expires_in > 0) body["expires_in"] = expires_in;
  HttpRequest req = NewRequest("POST", "/v2/_blz/tokens");
  req.headers.push_back({"Content-Type", "application/json"});
  req.body = body.dump();
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(req));
  if (r.status != 201) return Fail(r, "token create", "token '" + std::string(name) + "'");
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("token") || !j["token"].is_string()) {
    return Corruption("token create: the registry's answer has no string 'token'");
  }
  return j;
}

Result<nlohmann::json> RegistryClient::ListTokens() {
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("GET", "/v2/_blz/tokens")));
  if (r.status != 200) return Fail(r, "token list", "GET /v2/_blz/tokens");
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    return Corruption("token list: the registry's answer has no 'tokens' array");
  }
  return j;
}

Status RegistryClient::RevokeToken(std::string_view name) {
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgument("token name '" + std::string(name) +
                             "' must be made of letters, digits, '.', '_' and '-'");
    }
  }
  if (name.empty()) return InvalidArgument("token name is empty");
  BLZ_ASSIGN_OR_RETURN(HttpResponse r,
                       http_.Send(NewRequest("DELETE", "/v2/_blz/tokens/" + std::string(name))));
  if (r.status != 204 && r.status != 200) {
    return Fail(r, "token revoke", "token '" + std::string(name) + "'");
  }
  return Status::Ok();
}

Result<BlobStat> RegistryClient::HeadBlob(std::string_view name, std::string_view digest) {
  std::string target = "/v2/" + std::string(name) + "/blobs/" + std::string(digest);
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("HEAD", target)));
  BlobStat st;
  st.registry_verifies_archives = r.Header("Blz-Verifies-Archives") == "true";
  if (r.status == 404) return st;
  if (r.status != 200) return Fail(r, "push", "HEAD blob " + std::string(digest));
  st.exists = true;
  r.ContentLength(&st.size);
  return st;
}

Status RegistryClient::GetBlob(std::string_view name, std::string_view digest,
                               uint64_t expected_size, const std::string& dest_path,
                               const ProgressFn& progress) {
  BLZ_ASSIGN_OR_RETURN(std::string want_hex, ParseDigest(digest));
  BLZ_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(dest_path));
  std::string what = "blob " + std::string(digest);
  Sha256 hash;
  uint64_t got = 0;

  TransferOptions t;
  t.max_sink_body = expected_size > 0 ? expected_size : kMaxBlobBytes;
  t.on_headers = [&](const HttpResponse& head) -> Status {
    if (head.status >= 200 && head.status < 300 && head.status != 200) {
      return Corruption("pull: " + what + ": unexpected HTTP " + std::to_string(head.status));
    }
    uint64_t length = 0;
    if (head.status == 200 && expected_size > 0 && head.ContentLength(&length) &&
        length != expected_size) {
      return Corruption("pull: " + what + ": registry sends " + std::to_string(length) +
                        " bytes but the manifest says " + std::to_string(expected_size));
    }
    return Status::Ok();
  };
  t.sink = [&](ByteSpan chunk) -> Status {
    hash.Update(chunk);
    got += chunk.size();
    bytes_received_ += chunk.size();
    return file.Append(chunk);
  };
  if (progress) {
    t.download_progress = [&](uint64_t done, uint64_t total) {
      progress(done, total > 0 ? total : expected_size);
    };
  }
  BLZ_ASSIGN_OR_RETURN(HttpResponse r,
                       GetFollowingRedirects(NewRequest("GET", "/v2/" + std::string(name) +
                                                                   "/blobs/" + std::string(digest)),
                                             t));
  if (r.status != 200) return Fail(r, "pull", what);
  if (expected_size > 0 && got != expected_size) {
    return Corruption("pull: " + what + ": received " + std::to_string(got) +
                      " bytes, expected " + std::to_string(expected_size));
  }
  std::string got_hex = hash.FinishHex();
  if (got_hex != want_hex) {
    return DigestMismatch("pull: " + what + " from " + registry_.ToString() + ": the " +
                          std::to_string(got) + " bytes received hash to sha256:" + got_hex +
                          "; nothing was stored");
  }
  return file.Commit();
}

Result<std::string> RegistryClient::StartUpload(std::string_view name) {
  BLZ_ASSIGN_OR_RETURN(
      HttpResponse r,
      http_.Send(NewRequest("POST", "/v2/" + std::string(name) + "/blobs/uploads/")));
  if (r.status != 202) return Fail(r, "push", "starting a blob upload to " + std::string(name));
  std::string location = r.Header("Location");
  if (location.empty()) {
    return Unavailable("push failed: registry answered 202 without a Location header");
  }
  return location;
}

Status RegistryClient::DeleteManifest(std::string_view name, std::string_view digest) {
  const std::string what = "manifest " + std::string(name) + "@" + std::string(digest);
  BLZ_ASSIGN_OR_RETURN(HttpResponse r,
                       http_.Send(NewRequest("DELETE", "/v2/" + std::string(name) +
                                                           "/manifests/" + std::string(digest))));
  if (r.status != 202) return Fail(r, "rm", what);
  return Status::Ok();
}

Result<std::string> RegistryClient::CollectGarbage(bool dry_run) {
  BLZ_ASSIGN_OR_RETURN(
      HttpResponse r,
      http_.Send(NewRequest("POST", dry_run ? "/v2/_blz/gc?dry_run=true" : "/v2/_blz/gc")));
  if (r.status != 200) return Fail(r, "gc", "garbage collection at " + registry_.ToString());
  return r.body;
}

Result<bool> RegistryClient::MountBlob(std::string_view name, std::string_view digest) {
  BLZ_RETURN_IF_ERROR(ParseDigest(digest).status());
  BLZ_ASSIGN_OR_RETURN(HttpResponse r,
                       http_.Send(NewRequest("POST", "/v2/" + std::string(name) +
                                                         "/blobs/uploads/?mount=" +
                                                         std::string(digest))));
  if (r.status == 201) {
    BLZ_RETURN_IF_ERROR(FinishUpload(r, digest));
    return true;
  }
  if (r.status != 202) return Fail(r, "push", "mounting blob " + std::string(digest));
  // An upload session was opened instead: cancel it (best effort; the registry purges
  // abandoned sessions anyway).
  if (std::string location = r.Header("Location"); location.rfind('/', 0) == 0) {
    (void)http_.Send(NewRequest("DELETE", location));
  }
  return false;
}

Result<std::string> RegistryClient::UploadTarget(std::string_view location,
                                                 std::string_view digest) const {
  std::string target(location);
  // An absolute Location (http:// or https://) is taken as a path on this registry.
  if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0) {
    size_t path = target.find('/', target.find("://") + 3);
    target = path == std::string::npos ? "/" : target.substr(path);
  }
  if (target.empty() || target[0] != '/') {
    return Unavailable("push failed: invalid upload Location '" + std::string(location) + "'");
  }
  target += target.find('?') == std::string::npos ? "?" : "&";
  target += "digest=" + std::string(digest);
  return target;
}

Status RegistryClient::FinishUpload(const HttpResponse& r, std::string_view digest) {
  if (r.status != 201) return Fail(r, "push", "blob " + std::string(digest));
  std::string server_digest = r.Header("Docker-Content-Digest");
  if (!server_digest.empty() && server_digest != digest) {
    return DigestMismatch("push: registry stored blob as " + server_digest + ", expected " +
                          std::string(digest));
  }
  return Status::Ok();
}

Status RegistryClient::UploadBlobFromFile(std::string_view name, std::string_view digest,
                                          const std::string& file_path,
                                          const ProgressFn& progress) {
  BLZ_RETURN_IF_ERROR(ParseDigest(digest).status());
  BLZ_ASSIGN_OR_RETURN(std::string location, StartUpload(name));
  BLZ_ASSIGN_OR_RETURN(std::string target, UploadTarget(location, digest));
  HttpRequest req = NewRequest("PUT", target);
  req.headers.push_back({"Content-Type", "application/octet-stream"});
  req.body_file = file_path;
  uint64_t sent = 0;
  TransferOptions t;
  t.upload_progress = [&](uint64_t done, uint64_t total) {
    sent = done;
    if (progress) progress(done, total);
  };
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(req, t));
  BLZ_RETURN_IF_ERROR(FinishUpload(r, digest));
  bytes_sent_ += sent;
  return Status::Ok();
}

Status RegistryClient::UploadBlob(std::string_view name, std::string_view digest,
                                  std::string_view data) {
  BLZ_RETURN_IF_ERROR(ParseDigest(digest).status());
  BLZ_ASSIGN_OR_RETURN(std::string location, StartUpload(name));
  BLZ_ASSIGN_OR_RETURN(std::string target, UploadTarget(location, digest));
  HttpRequest req = NewRequest("PUT", target);
  req.headers.push_back({"Content-Type", "application/octet-stream"});
  req.body = std::string(data);
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(req));
  BLZ_RETURN_IF_ERROR(FinishUpload(r, digest));
  bytes_sent_ += data.size();
  return Status::Ok();
}

Result<std::string> RegistryClient::PutManifest(std::string_view name,
                                                std::string_view reference,
                                                std::string_view manifest_json) {
  std::string what = "manifest " + std::string(name) + ":" + std::string(reference);
  HttpRequest req = NewRequest(
      "PUT", "/v2/" + std::string(name) + "/manifests/" + std::string(reference));
  req.headers.push_back({"Content-Type", std::string(kManifestMediaType)});
  req.body = std::string(manifest_json);
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(req));
  if (r.status != 201) return Fail(r, "push", what);
  bytes_sent_ += manifest_json.size();
  std::string digest = MakeDigest(Sha256Hex(manifest_json));
  std::string server_digest = r.Header("Docker-Content-Digest");
  if (!server_digest.empty() && server_digest != digest) {
    return DigestMismatch("push: registry recorded " + what + " as " + server_digest +
                          " but its bytes hash to " + digest);
  }
  return digest;
}

Result<ManifestResponse> RegistryClient::GetManifest(std::string_view name,
                                                     std::string_view reference) {
  std::string what = "manifest " + std::string(name) +
                     (ParseDigest(reference).ok() ? "@" : ":") + std::string(reference);
  HttpRequest req =
      NewRequest("GET", "/v2/" + std::string(name) + "/manifests/" + std::string(reference));
  req.headers.push_back({"Accept", std::string(kManifestMediaType)});
  TransferOptions t;
  t.max_memory_body = kMaxManifestBytes;
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(req, t));
  if (r.status != 200) return Fail(r, "pull", what);
  bytes_received_ += r.body.size();
  ManifestResponse m;
  m.bytes = std::move(r.body);
  m.digest = MakeDigest(Sha256Hex(m.bytes));
  m.media_type = r.Header("Content-Type");
  if (ParseDigest(reference).ok() && m.digest != reference) {
    return DigestMismatch("pull: " + what + ": the manifest received hashes to " + m.digest);
  }
  std::string server_digest = r.Header("Docker-Content-Digest");
  if (!server_digest.empty() && server_digest != m.digest) {
    return DigestMismatch("pull: " + what + ": registry says " + server_digest +
                          " but the manifest received hashes to " + m.digest);
  }
  return m;
}

Result<std::vector<std::string>> RegistryClient::ListTags(std::string_view name) {
  std::vector<std::string> tags;
  std::string target = "/v2/" + std::string(name) + "/tags/list";
  for (int page = 0; page < kMaxTagPages && !target.empty(); ++page) {
    BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("GET", target)));
    if (r.status != 200) {
      return Fail(r, "listing tags of " + std::string(name), "GET " + target.substr(0, 200));
    }
    bytes_received_ += r.body.size();
    Result<nlohmann::json> parsed =
        formats::ParseJsonStrict(r.body, "tags list of " + std::string(name), 0);
    if (!parsed.ok()) return parsed.status();
    nlohmann::json doc = std::move(parsed).value();
    if (!doc.is_object()) {
      return Corruption("tags list of " + std::string(name) + ": not a JSON object");
    }
    auto list = doc.find("tags");
    if (list != doc.end() && !list->is_null()) {
      if (!list->is_array()) {
        return Corruption("tags list of " + std::string(name) + ": 'tags' is not an array");
      }
      for (const nlohmann::json& t : *list) {
        if (!t.is_string()) {
          return Corruption("tags list of " + std::string(name) + ": a tag is not a string");
        }
        tags.push_back(t.get<std::string>());
      }
    }
    target = NextLink(r.Header("Link"));
    if (!target.empty() && target[0] != '/') target.clear();
  }
  return tags;
}

Result<PatchDownload> RegistryClient::GetPatch(std::string_view name, std::string_view from_digest,
                                               std::string_view to_digest,
                                               const std::string& dest_path, uint64_t max_bytes,
                                               const ProgressFn& progress) {
  const bool full = from_digest.empty();
  std::string what = full ? "full patch of " + std::string(to_digest)
                          : "patch " + std::string(from_digest) + " -> " + std::string(to_digest);
  BLZ_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(dest_path));
  Sha256 hash;
  PatchDownload out;
  TransferOptions t;
  t.max_sink_body = max_bytes > 0 ? max_bytes : kMaxBlobBytes;
  t.on_headers = [&](const HttpResponse& head) -> Status {
    uint64_t length = 0;
    if (head.status == 200 && max_bytes > 0 && head.ContentLength(&length) && length > max_bytes) {
      return TooLarge("pull: " + what + " is " + std::to_string(length) +
                      " bytes, more than the " + std::to_string(max_bytes) + " allowed");
    }
    return Status::Ok();
  };
  t.sink = [&](ByteSpan chunk) -> Status {
    hash.Update(chunk);
    out.bytes += chunk.size();
    bytes_received_ += chunk.size();
    return file.Append(chunk);
  };
  t.download_progress = progress;
  HttpRequest req = NewRequest(
      "GET", "/v2/" + std::string(name) + "/blz/patch?" +
                 (full ? "" : "from=" + std::string(from_digest) + "&") + "to=" +
                 std::string(to_digest));
  req.headers.push_back({"Accept", std::string(kPatchMediaType)});
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, GetFollowingRedirects(req, t));
  if (r.status != 200) {
    Status failed = Fail(r, "pull", what);
    const bool old_server = r.status == 404 || r.status == 405 ||
                            (r.status == 400 && failed.code() == Code::kDigestMismatch);
    if (full && old_server) return Status(Code::kUnsupported, failed.message());
    return failed;
  }
  out.digest = MakeDigest(hash.FinishHex());
  std::string server_digest = r.Header("Docker-Content-Digest");
  if (!server_digest.empty() && server_digest != out.digest) {
    return DigestMismatch("pull: " + what + ": registry says " + server_digest +
                          " but the bytes received hash to " + out.digest +
                          "; nothing was stored");
  }
  out.server_cache_hit = r.Header("Blz-Patch-Cache") == "hit";
  BLZ_RETURN_IF_ERROR(file.Commit());
  return out;
}

// ---- blz extensions: choosing a base; the catalog ----

namespace {

constexpr size_t kMaxHaveDigests = 64;

Result<RemoteVersion> ParseRemoteVersion(const nlohmann::json& j, const std::string& what) {
  RemoteVersion v;
  try {
    v.digest = j.at("digest").get<std::string>();
    v.repository = j.at("repository").get<std::string>();
    v.manifest_digest = j.at("manifest_digest").get<std::string>();
    v.size = j.at("size").get<uint64_t>();
    if (j.contains("structure") && j.at("structure").is_string()) {
      v.structure = j.at("structure").get<std::string>();
    }
    v.same_structure = j.value("same_structure", false);
    if (j.contains("name") && j.at("name").is_string()) v.name = j.at("name").get<std::string>();
    if (j.contains("patch_size") && j.at("patch_size").is_number_unsigned()) {
      v.patch_size = j.at("patch_size").get<uint64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    return Corruption(what + ": " + e.what());
  }
  if (!ParseDigest(v.digest).ok() || !ParseDigest(v.manifest_digest).ok() ||
      !IsValidRepositoryName(v.repository)) {
    return Corruption(what + ": invalid digest or repository name");
  }
  return v;
}

}  // namespace

Result<BaseAdvice> RegistryClient::GetBases(std::string_view name, std::string_view to,
                                            const std::vector<std::string>& have) {
  if (have.size() > kMaxHaveDigests) {
    return InvalidArgument("bases: at most " + std::to_string(kMaxHaveDigests) + " candidates");
  }
  std::string target = "/v2/" + std::string(name) + "/blz/bases?to=" + std::string(to);
  if (!have.empty()) {
    target += "&have=";
    for (size_t i = 0; i < have.size(); ++i) target += (i > 0 ? "," : "") + have[i];
  }
  const std::string what = "bases for " + std::string(to);
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("GET", target)));
  bytes_received_ += r.body.size();
  // A blz registry answers 404 MANIFEST_UNKNOWN when `to` is not a version; any other 404
  // (NOT_FOUND for an unknown endpoint, or another registry's NAME_UNKNOWN for what it takes
  // as a repository name) or a 405 means the endpoint does not exist there.
  if (r.status == 405 || (r.status == 404 && !ErrorsContain(r.body, "MANIFEST_UNKNOWN"))) {
    return Unsupported("registry " + registry_.ToString() + " does not choose bases (" +
                       "HTTP " + std::to_string(r.status) + ")");
  }
  if (r.status != 200) return Fail(r, "pull", what);
  Result<nlohmann::json> parsed = formats::ParseJsonStrict(r.body, what, 0);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& doc = *parsed;
  if (!doc.is_object() || !doc.contains("to") || !doc.contains("bases") ||
      !doc.at("bases").is_array()) {
    return Corruption(what + ": expected {\"to\":{...},\"bases\":[...]}");
  }
  BaseAdvice advice;
  BLZ_ASSIGN_OR_RETURN(advice.to, ParseRemoteVersion(doc.at("to"), what));
  if (advice.to.digest != to) {
    return Corruption(what + ": the registry answered for " + advice.to.digest);
  }
  for (const nlohmann::json& b : doc.at("bases")) {
    BLZ_ASSIGN_OR_RETURN(RemoteVersion v, ParseRemoteVersion(b, what));
    // Only what was asked about: a base the client does not hold is of no use.
    if (std::find(have.begin(), have.end(), v.digest) == have.end()) {
      return Corruption(what + ": the registry proposed " + v.digest + ", which was not offered");
    }
    advice.bases.push_back(std::move(v));
  }
  return advice;
}

Result<std::vector<RemoteVersion>> RegistryClient::GetPushBases(
    std::string_view name, const std::vector<std::string>& have, std::string_view structure,
    std::string_view to_push, const std::vector<std::string>& related) {
  if (have.size() > kMaxHaveDigests) {
    return InvalidArgument("bases: at most " + std::to_string(kMaxHaveDigests) + " candidates");
  }
  std::string target = "/v2/" + std::string(name) + "/blz/bases?push=1&have=";
  for (size_t i = 0; i < have.size(); ++i) target += (i > 0 ? "," : "") + have[i];
  if (!structure.empty()) target += "&structure=" + std::string(structure);
  if (!to_push.empty()) target += "&to-push=" + std::string(to_push);
  for (size_t i = 0; i < related.size(); ++i) {
    target += (i == 0 ? "&related=" : ",") + related[i];
  }
  const std::string what = "bases for a push to " + std::string(name);
  BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("GET", target)));
  bytes_received_ += r.body.size();
  // An older blz asks for ?to= (400 DIGEST_INVALID); other registries have no such endpoint.
  if (r.status == 400 || r.status == 404 || r.status == 405) {
    return Unsupported("registry " + registry_.ToString() + " does not choose bases for " +
                       "pushes (HTTP " + std::to_string(r.status) + ")");
  }
  if (r.status != 200) return Fail(r, "push", what);
  Result<nlohmann::json> parsed = formats::ParseJsonStrict(r.body, what, 0);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& doc = *parsed;
  if (!doc.is_object() || !doc.contains("bases") || !doc.at("bases").is_array()) {
    return Corruption(what + ": expected {\"to\":null,\"bases\":[...]}");
  }
  std::vector<RemoteVersion> bases;
  for (const nlohmann::json& b : doc.at("bases")) {
    BLZ_ASSIGN_OR_RETURN(RemoteVersion v, ParseRemoteVersion(b, what));
    if (std::find(have.begin(), have.end(), v.digest) == have.end()) {
      return Corruption(what + ": the registry proposed " + v.digest + ", which was not offered");
    }
    bases.push_back(std::move(v));
  }
  return bases;
}

Result<nlohmann::json> RegistryClient::GetComputedJson(std::string_view target,
                                                       std::string_view what,
                                                       std::chrono::seconds max_wait) {
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("GET", std::string(target))));
    bytes_received_ += r.body.size();
    if (r.status == 202) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return Unavailable(std::string(what) + ": the registry is still computing it after " +
                           std::to_string(max_wait.count()) + " s");
      }
      // The registry's Retry-After (client/retry.h), kept within 1..5 s.
      std::chrono::milliseconds after{1000};
      if (auto ra = ParseRetryAfter(r.Header("Retry-After"), std::chrono::system_clock::now())) {
        after = std::clamp<std::chrono::milliseconds>(*ra, std::chrono::seconds(1),
                                                      std::chrono::seconds(5));
      }
      std::this_thread::sleep_for(after);
      continue;
    }
    if (r.status != 200) return Fail(r, "pull", what);
    Result<nlohmann::json> parsed = formats::ParseJsonStrict(r.body, what, 0);
    if (!parsed.ok()) return parsed.status();
    if (!parsed->is_object()) return Corruption(std::string(what) + ": not a JSON object");
    return std::move(*parsed);
  }
}

Result<std::vector<std::string>> RegistryClient::ListRepositories() {
  std::vector<std::string> names;
  std::string target = "/v2/_catalog?n=1000";
  for (int page = 0; page < kMaxTagPages && !target.empty(); ++page) {
    BLZ_ASSIGN_OR_RETURN(HttpResponse r, http_.Send(NewRequest("GET", target)));
    if (r.status != 200) return Fail(r, "catalog", "repositories of " + registry_.ToString());
    bytes_received_ += r.body.size();
    Result<nlohmann::json> parsed = formats::ParseJsonStrict(r.body, "catalog", 0);
    if (!parsed.ok()) return parsed.status();
    const nlohmann::json& doc = *parsed;
    auto list = doc.is_object() ? doc.find("repositories") : doc.end();
    if (list == doc.end() || !list->is_array()) {
      return Corruption("catalog of " + registry_.ToString() + ": no 'repositories' array");
    }
    for (const nlohmann::json& n : *list) {
      if (!n.is_string()) return Corruption("catalog: a repository name is not a string");
      names.push_back(n.get<std::string>());
    }
    target = NextLink(r.Header("Link"));
    if (!target.empty() && target[0] != '/') target.clear();
  }
  return names;
}

}  // namespace blz::client
