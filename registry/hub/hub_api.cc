#include "registry/hub/hub_api.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <exception>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/time_format.h"
#include "registry/byte_ranges.h"
#include "registry/hub/revisions.h"
#include "registry/scope.h"
#include "registry/wire.h"

namespace blz::registry::hub {
namespace {

using json = nlohmann::json;

constexpr char kInvalidCredentials[] = "Invalid credentials in Authorization header";

// An error as the Hub answers it: JSON {"error": message}, X-Error-Code (when not empty) and
// X-Error-Message.
Response HubError(int status, std::string_view code, const std::string& message) {
  Response res;
  res.status = status;
  res.Set("Content-Type", "application/json; charset=utf-8");
  if (!code.empty()) res.Set("X-Error-Code", std::string(code));
  // Header values must stay on one line.
  std::string one_line = message;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  std::replace(one_line.begin(), one_line.end(), '\r', ' ');
  res.Set("X-Error-Message", one_line);
  res.body = json{{"error", message}}.dump();
  return res;
}

Response JsonResponse(const json& body) {
  Response res;
  res.status = 200;
  res.Set("Content-Type", "application/json; charset=utf-8");
  res.body = body.dump();
  return res;
}

Response FromStatus(const Status& s) {
  switch (s.code()) {
    case Code::kUnavailable: return HubError(503, "", s.message());
    case Code::kInvalidArgument: return HubError(400, "", s.message());
    default: return HubError(500, "", "internal error: " + s.message());
  }
}

std::string Iso(int64_t unix_seconds) {
  return FormatRfc3339Utc(std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds)));
}

// A parsed Hub route.
struct HubRoute {
  enum class Kind : uint8_t { kWhoami, kInfo, kTree, kPathsInfo, kRefs, kResolve };
  Kind kind = Kind::kInfo;
  std::string repo;      // decoded
  std::string revision;  // "" = main
  std::string path;      // tree path or filename ("" = root)
  bool bad_repo = false;     // a component of the repo id held an encoded '/'
  bool bad_path = false;     // the path is not a safe relative path
};

bool SafeComponent(std::string_view c) {
  return !c.empty() && c != "." && c != ".." && c.find('\\') == std::string_view::npos &&
         c.find('/') == std::string_view::npos;
}

// Joins components [begin, end) into a path; *ok false when one is not SafeComponent.
std::string JoinPath(const std::vector<std::string>& c, size_t begin, size_t end, bool* ok) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (!SafeComponent(c[i])) *ok = false;
    if (i > begin) out += '/';
    out += c[i];
  }
  return out;
}

bool HasEncodedSlash(std::string_view raw) {
  return raw.find("%2f") != std::string_view::npos || raw.find("%2F") != std::string_view::npos;
}

bool IsRepoKeyword(std::string_view s) {
  return s == "revision" || s == "tree" || s == "paths-info" || s == "refs";
}

// nullopt: not a Hub route.
std::optional<HubRoute> ParseRoute(const Target& t) {
  const std::vector<std::string>& c = t.components;
  const std::vector<std::string>& raw = t.raw_components;
  HubRoute r;
  auto repo_of = [&](size_t begin, size_t len) {
    for (size_t i = begin; i < begin + len; ++i) {
      if (HasEncodedSlash(raw[i])) r.bad_repo = true;
      if (!r.repo.empty()) r.repo += '/';
      r.repo += c[i];
    }
  };
  const size_t n = c.size();
  if (n >= 1 && c[0] == "v2") return std::nullopt;  // the OCI API's, whatever follows
  if (n >= 1 && c[0] == "api") {
    if (n == 2 && c[1] == "whoami-v2") {
      r.kind = HubRoute::Kind::kWhoami;
      return r;
    }
    if (n < 3 || c[1] != "models") return std::nullopt;
    // repo_id: one component when the next is a keyword, else (at most) two.
    const size_t len = n >= 4 && IsRepoKeyword(c[3]) ? 1 : std::min<size_t>(2, n - 2);
    repo_of(2, len);
    const size_t k = 2 + len;  // first component after the repo id
    bool ok = true;
    if (k == n) {
      r.kind = HubRoute::Kind::kInfo;
    } else if (c[k] == "revision" && n == k + 2) {
      r.kind = HubRoute::Kind::kInfo;
      r.revision = c[k + 1];
    } else if (c[k] == "tree" && n >= k + 2) {
      r.kind = HubRoute::Kind::kTree;
      r.revision = c[k + 1];
      // A trailing '/' (an empty last component) lists the root or the folder.
      size_t end = n;
      if (end > k + 2 && c[end - 1].empty()) --end;
      r.path = JoinPath(c, k + 2, end, &ok);
    } else if (c[k] == "paths-info" && n == k + 2) {
      r.kind = HubRoute::Kind::kPathsInfo;
      r.revision = c[k + 1];
    } else if (c[k] == "refs" && n == k + 1) {
      r.kind = HubRoute::Kind::kRefs;
    } else {
      return std::nullopt;
    }
    r.bad_path = !ok;
    return r;
  }
  // /{repo_id}/resolve/{rev}/{filename}
  size_t at = 0;
  if (n >= 4 && c[1] == "resolve") {
    at = 1;
  } else if (n >= 5 && c[2] == "resolve") {
    at = 2;
  } else {
    return std::nullopt;
  }
  repo_of(0, at);
  r.kind = HubRoute::Kind::kResolve;
  r.revision = c[at + 1];
  bool ok = true;
  r.path = JoinPath(c, at + 2, n, &ok);
  r.bad_path = !ok;
  return r;
}

// The base URL for links: ctx.public_url, else <scheme>://<Host>.
std::string BaseUrl(const HubContext& ctx, const RequestHead& head) {
  if (!ctx.public_url.empty()) return ctx.public_url;
  std::string host = head.forwarded_host.empty() ? head.Get("Host").value_or("localhost")
                                                 : head.forwarded_host;
  return head.scheme + "://" + host;
}

// Percent-encodes everything but unreserved characters (and '/' when `keep_slash`).
std::string Quote(std::string_view s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~' ||
        (keep_slash && ch == '/')) {
      out += char(ch);
    } else {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

bool Truthy(const std::optional<std::string>& v) {
  if (!v.has_value()) return false;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s == "1" || s == "true" || s == "yes";
}

std::optional<std::string> Query(const Target& t, const std::string& key) {
  auto it = t.query.find(key);
  if (it == t.query.end()) return std::nullopt;
  return it->second;
}

class Handler {
 public:
  Handler(const HubContext& ctx, const Request& request, Target target, HubRoute route)
      : ctx_(ctx), req_(request), target_(std::move(target)), route_(std::move(route)) {}

  // Who asked, for the access log ("" = anonymous or refused).
  std::string principal() const { return who_.Describe(); }

  Response Run() {
    Result<Principal> who = ctx_.auth->Authenticate(req_.head, std::time(nullptr));
    if (!who.ok()) {
      if (who.status().code() == Code::kUnauthorized) {
        return HubError(401, "", std::string(kInvalidCredentials) + ": " + who.status().message());
      }
      return FromStatus(who.status());
    }
    who_ = std::move(*who);
    if (route_.kind == HubRoute::Kind::kWhoami) return Whoami();
    if (route_.bad_repo) {
      return HubError(404, "RepoNotFound",
                      "Repository not found: '" + route_.repo +
                          "' is not a repository id (write its '/' unencoded: org/name)");
    }
    if (std::optional<Response> denied = CheckRepository()) return std::move(*denied);
    if (route_.kind == HubRoute::Kind::kRefs) return Refs();
    if (route_.bad_path) {
      return HubError(400, "", "Invalid path '" + route_.path +
                                   "': paths are relative, '/'-separated, without '.', '..', "
                                   "empty components or backslashes");
    }
    const std::string rev = route_.revision.empty() ? kMainRevision : route_.revision;
    Result<Revision> revision = ResolveRevision(*ctx_.db, route_.repo, rev);
    if (!revision.ok()) {
      if (revision.status().code() == Code::kNotFound) {
        return HubError(404, "RevisionNotFound",
                        "Invalid rev id: " + rev + " (" + revision.status().message() + ")");
      }
      if (revision.status().code() == Code::kAlreadyExists) {
        return HubError(409, "", revision.status().message());
      }
      return FromStatus(revision.status());
    }
    revision_ = std::move(*revision);
    Result<std::vector<VersionFile>> files = ctx_.files->List(revision_.archive_digest);
    if (!files.ok()) return WithCommit(FromStatus(files.status()));
    files_ = std::move(*files);
    switch (route_.kind) {
      case HubRoute::Kind::kInfo: return WithCommit(Info());
      case HubRoute::Kind::kTree: return WithCommit(Tree());
      case HubRoute::Kind::kPathsInfo: return WithCommit(PathsInfo());
      case HubRoute::Kind::kResolve: return WithCommit(Resolve());
      default: break;
    }
    return HubError(404, "", "no such endpoint");
  }

 private:
  Response WithCommit(Response res) {
    res.Set("X-Repo-Commit", revision_.commit);
    return res;
  }

  // nullopt when the caller may read the repository and it exists; else the Hub's answer, the
  // same for a repository that does not exist and one the caller may not read.
  std::optional<Response> CheckRepository() {
    const bool may_pull = (HeldActions(who_, route_.repo, ctx_.private_mode) & kActionPull) != 0;
    if (!may_pull && who_.anonymous() && ctx_.private_mode) {
      Response res = HubError(401, "RepoNotFound",
                              "Repository not found: this registry needs a token (set HF_TOKEN "
                              "to a blz token)");
      res.Set("WWW-Authenticate", "Bearer realm=\"blz\"");
      return res;
    }
    Result<bool> exists = may_pull && ValidateRepositoryName(route_.repo).ok()
                              ? ctx_.db->RepositoryExists(route_.repo)
                              : Result<bool>(false);
    if (!exists.ok()) return FromStatus(exists.status());
    if (!*exists) {
      return HubError(404, "RepoNotFound",
                      "Repository not found: " + route_.repo +
                          " (or you may not read it; check HF_TOKEN)");
    }
    return std::nullopt;
  }

  Response Whoami() {
    if (who_.anonymous()) {
      return HubError(401, "", std::string(kInvalidCredentials) + ": no token sent");
    }
    const bool write = who_.token_scope.ToString().find("push") != std::string::npos;
    json access = {{"displayName", who_.token_name}, {"role", write ? "write" : "read"}};
    return JsonResponse(json{{"type", "user"},
                             {"id", std::to_string(who_.token_id)},
                             {"name", who_.token_name},
                             {"fullname", who_.token_name},
                             {"isPro", false},
                             {"orgs", json::array()},
                             {"auth", {{"type", "access_token"}, {"accessToken", access}}}});
  }

  std::vector<std::string> TagsOfVersion() {
    std::vector<std::string> out;
    Result<std::vector<store::TagTarget>> tags = ctx_.db->ListTagTargets(route_.repo);
    if (!tags.ok()) return out;
    for (const store::TagTarget& t : *tags) {
      Result<std::string> archive = ManifestArchive(*ctx_.db, route_.repo, t.manifest_digest);
      if (archive.ok() && *archive == revision_.archive_digest) out.push_back(t.tag);
    }
    return out;
  }

  json FileEntry(const VersionFile& f, bool expand) {
    json e = {{"type", "file"}, {"oid", f.git_oid}, {"size", f.size}, {"path", f.path}};
    if (f.lfs) {
      e["lfs"] = {{"oid", f.sha256},
                  {"size", f.size},
                  {"pointerSize", LfsPointer(f.sha256, f.size).size()}};
    }
    if (expand) {
      e["lastCommit"] = {{"id", revision_.commit},
                         {"title", "blz version " + revision_.archive_digest},
                         {"date", Iso(revision_.created)}};
    }
    return e;
  }

  json DirEntry(const std::string& path) {
    return {{"type", "directory"},
            {"oid", GitBlobId("tree " + revision_.commit + " " + path)},
            {"size", 0},
            {"path", path}};
  }

  Response Info() {
    json siblings = json::array();
    for (const VersionFile& f : files_) {
      json s = {{"rfilename", f.path}, {"size", f.size}, {"blobId", f.git_oid}};
      if (f.lfs) {
        s["lfs"] = {{"sha256", f.sha256},
                    {"size", f.size},
                    {"pointerSize", LfsPointer(f.sha256, f.size).size()}};
      }
      siblings.push_back(std::move(s));
    }
    const std::string modified = Iso(revision_.created);
    return JsonResponse(json{{"_id", revision_.commit},
                             {"id", route_.repo},
                             {"modelId", route_.repo},
                             {"sha", revision_.commit},
                             {"private", ctx_.private_mode},
                             {"disabled", false},
                             {"gated", false},
                             {"downloads", 0},
                             {"likes", 0},
                             {"tags", TagsOfVersion()},
                             {"lastModified", modified},
                             {"createdAt", modified},
                             {"siblings", std::move(siblings)}});
  }

  // Every entry (files and the folders above them) under `dir` ("" = root), sorted by path;
  // only direct children unless `recursive`. nullopt when `dir` is neither root nor a folder.
  std::optional<std::vector<json>> Entries(const std::string& dir, bool recursive, bool expand) {
    const std::string prefix = dir.empty() ? "" : dir + "/";
    std::set<std::string> dirs;
    std::vector<std::pair<std::string, json>> out;
    bool any = dir.empty();
    for (const VersionFile& f : files_) {
      if (f.path.compare(0, prefix.size(), prefix) != 0) continue;
      any = true;
      const std::string rest = f.path.substr(prefix.size());
      // Folders between dir and the file.
      for (size_t slash = rest.find('/'); slash != std::string::npos;
           slash = rest.find('/', slash + 1)) {
        dirs.insert(prefix + rest.substr(0, slash));
        if (!recursive) break;
      }
      if (recursive || rest.find('/') == std::string::npos) {
        out.emplace_back(f.path, FileEntry(f, expand));
      }
    }
    if (!any) return std::nullopt;
    for (const std::string& d : dirs) out.emplace_back(d, DirEntry(d));
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<json> entries;
    entries.reserve(out.size());
    for (auto& [path, e] : out) entries.push_back(std::move(e));
    return entries;
  }

  Response Tree() {
    const bool recursive = Truthy(Query(target_, "recursive"));
    const bool expand = Truthy(Query(target_, "expand"));
    uint64_t limit = kTreePageSize;
    if (std::optional<std::string> l = Query(target_, "limit"); l.has_value()) {
      std::optional<uint64_t> parsed = ParseUint(*l);
      if (!parsed.has_value() || *parsed == 0) {
        return HubError(400, "", "limit must be a positive integer");
      }
      limit = std::min(*parsed, kMaxTreePageSize);
    }
    uint64_t start = 0;
    if (std::optional<std::string> cur = Query(target_, "cursor"); cur.has_value()) {
      std::optional<uint64_t> parsed = ParseUint(*cur);
      if (!parsed.has_value()) return HubError(400, "", "cursor '" + *cur + "' is not valid");
      start = *parsed;
    }
    const bool is_file = std::any_of(files_.begin(), files_.end(),
                                     [&](const VersionFile& f) { return f.path == route_.path; });
    std::optional<std::vector<json>> entries =
        is_file ? std::nullopt : Entries(route_.path, recursive, expand);
    if (!entries.has_value()) {
      return HubError(404, "EntryNotFound",
                      (is_file ? "'" + route_.path + "' is a file, not a folder"
                               : "No folder '" + route_.path + "'") +
                          " at revision " + revision_.commit);
    }
    json page = json::array();
    const uint64_t total = entries->size();
    for (uint64_t i = start; i < total && i < start + limit; ++i) page.push_back((*entries)[i]);
    Response res = JsonResponse(page);
    if (start + limit < total) {
      // The next page names the commit, not the branch: a moved tag does not mix versions.
      std::string url = BaseUrl(ctx_, req_.head) + "/api/models/" + Quote(route_.repo, true) +
                        "/tree/" + revision_.commit;
      if (!route_.path.empty()) url += "/" + Quote(route_.path, true);
      url += "?cursor=" + std::to_string(start + limit) + "&limit=" + std::to_string(limit);
      if (recursive) url += "&recursive=true";
      if (expand) url += "&expand=true";
      res.Set("Link", "<" + url + ">; rel=\"next\"");
    }
    return res;
  }

  // Paths from a form body (paths=a&paths=b, '+' = space) or JSON {"paths": [...]}.
  Result<std::vector<std::string>> RequestedPaths(bool* expand) {
    std::vector<std::string> out;
    const std::string& body = req_.body;
    const std::string type = req_.head.Get("Content-Type").value_or("");
    if (type.find("json") != std::string::npos || (!body.empty() && body[0] == '{')) {
      json doc = json::parse(body, nullptr, false);
      if (!doc.is_object() || !doc.contains("paths") || !doc["paths"].is_array()) {
        return InvalidArgument("paths-info: the JSON body must be {\"paths\": [...]}");
      }
      for (const json& p : doc["paths"]) {
        if (!p.is_string()) return InvalidArgument("paths-info: paths must be strings");
        out.push_back(p.get<std::string>());
      }
      *expand = doc.contains("expand") && doc["expand"].is_boolean() && doc["expand"].get<bool>();
      return out;
    }
    size_t start = 0;
    while (start < body.size()) {
      size_t end = body.find('&', start);
      if (end == std::string::npos) end = body.size();
      std::string pair = body.substr(start, end - start);
      std::replace(pair.begin(), pair.end(), '+', ' ');
      const size_t eq = pair.find('=');
      BLZ_ASSIGN_OR_RETURN(std::string key, PercentDecode(pair.substr(0, eq)));
      std::string value;
      if (eq != std::string::npos) {
        BLZ_ASSIGN_OR_RETURN(value, PercentDecode(pair.substr(eq + 1)));
      }
      if (key == "paths" || key == "paths[]") out.push_back(std::move(value));
      if (key == "expand") *expand = Truthy(value);
      start = end + 1;
    }
    return out;
  }

  Response PathsInfo() {
    bool expand = false;
    Result<std::vector<std::string>> paths = RequestedPaths(&expand);
    if (!paths.ok()) return HubError(400, "", paths.status().message());
    json out = json::array();
    std::set<std::string> seen;
    for (std::string p : *paths) {
      while (!p.empty() && p.back() == '/') p.pop_back();
      if (!seen.insert(p).second) continue;
      bool folder = false;
      for (const VersionFile& f : files_) {
        if (f.path == p) {
          out.push_back(FileEntry(f, expand));
          folder = false;
          break;
        }
        if (!p.empty() && f.path.size() > p.size() && f.path.compare(0, p.size(), p) == 0 &&
            f.path[p.size()] == '/') {
          folder = true;
        }
      }
      if (folder) out.push_back(DirEntry(p));
    }
    return JsonResponse(out);
  }

  Response Refs() {
    Result<std::vector<store::TagTarget>> tags = ctx_.db->ListTagTargets(route_.repo);
    if (!tags.ok()) return FromStatus(tags.status());
    json branches = json::array();
    bool has_main = false;
    for (const store::TagTarget& t : *tags) {
      Result<std::string> archive = ManifestArchive(*ctx_.db, route_.repo, t.manifest_digest);
      if (!archive.ok()) continue;  // not a model version
      has_main = has_main || t.tag == kMainRevision;
      branches.push_back({{"name", t.tag},
                          {"ref", "refs/heads/" + t.tag},
                          {"targetCommit", CommitId(*archive)}});
    }
    if (!has_main) {
      Result<Revision> main = ResolveRevision(*ctx_.db, route_.repo, kMainRevision);
      if (main.ok()) {
        branches.push_back({{"name", kMainRevision},
                            {"ref", std::string("refs/heads/") + kMainRevision},
                            {"targetCommit", main->commit}});
      }
    }
    return JsonResponse(json{{"branches", std::move(branches)},
                             {"converts", json::array()},
                             {"tags", json::array()}});
  }

  Response Resolve() {
    auto it = std::find_if(files_.begin(), files_.end(),
                           [&](const VersionFile& f) { return f.path == route_.path; });
    if (it == files_.end()) {
      return HubError(404, "EntryNotFound",
                      "Entry not found: " + route_.path + " at revision " + revision_.commit);
    }
    const VersionFile& f = *it;
    Response res;
    res.Set("Accept-Ranges", "bytes");
    res.Set("Content-Type", "application/octet-stream");
    res.Set("ETag", "\"" + (f.lfs ? f.sha256 : f.git_oid) + "\"");
    if (f.lfs) {
      res.Set("X-Linked-Etag", "\"" + f.sha256 + "\"");
      res.Set("X-Linked-Size", std::to_string(f.size));
    }
    res.Set("Cache-Control", IsCommitId(route_.revision) ? "public, max-age=31536000, immutable"
                                                         : "no-cache");
    std::optional<RangeSpan> span = SelectRange(req_.head.Get("Range"), f.size, &res);
    if (!span) {
      Response err = HubError(416, "", "Requested range not satisfiable for " + f.path + " (" +
                                           std::to_string(f.size) + " bytes)");
      SetUnsatisfiableRange(f.size, &err);
      return err;
    }
    const uint64_t offset = span->offset, length = span->length;
    if (req_.head.method == "HEAD") {
      res.head_size = length;  // nothing opened: no archive rebuilt for a HEAD
      return res;
    }
    if (length == 0) return res;  // an empty file
    Result<FileSlice> slice = ctx_.files->Slice(revision_.archive_digest, f.path, offset, length);
    if (!slice.ok()) return FromStatus(slice.status());
    SetResponseBody(std::move(*slice), &res);
    return res;
  }

  const HubContext& ctx_;
  const Request& req_;
  Target target_;
  HubRoute route_;
  Principal who_;
  Revision revision_;
  std::vector<VersionFile> files_;
};

}  // namespace

bool IsHubTarget(std::string_view target) {
  Result<Target> t = ParseTarget(target);
  return t.ok() && ParseRoute(*t).has_value();
}

bool IsHeavyHubRequest(const RequestHead& head) {
  Result<Target> t = ParseTarget(head.target);
  if (!t.ok()) return false;
  std::optional<HubRoute> r = ParseRoute(*t);
  return r.has_value() && r->kind == HubRoute::Kind::kResolve && head.method == "GET";
}

Response HandleHub(const HubContext& ctx, const Request& request) {
  try {
    Result<Target> t = ParseTarget(request.head.target);
    if (!t.ok()) return HubError(400, "", t.status().message());
    std::optional<HubRoute> route = ParseRoute(*t);
    if (!route.has_value()) return HubError(404, "", "no such endpoint: " + t->path);
    const std::string& m = request.head.method;
    const bool post = route->kind == HubRoute::Kind::kPathsInfo;
    if (post ? m != "POST" : (m != "GET" && !(m == "HEAD"))) {
      Response res = HubError(405, "", "method " + m + " is not supported on " + t->path);
      res.Set("Allow", post ? "POST" : "GET, HEAD");
      return res;
    }
    Handler handler(ctx, request, std::move(*t), std::move(*route));
    Response res = handler.Run();
    res.principal = handler.principal();
    if (m == "HEAD" && !res.head_size.has_value()) res.head_size = res.body.size();
    return res;
  } catch (const std::exception& e) {
    return HubError(500, "", std::string("internal error: ") + e.what());
  }
}

}  // namespace blz::registry::hub
