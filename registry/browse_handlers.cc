// Browsing: the JSON the web view reads (docs/registry-api.md, "Browsing"):
//   GET /v2/_blz/repositories              repositories the caller may pull, with summaries
//   GET /v2/<name>/blz/versions            a repository's versions, newest first
//   GET /v2/<name>/blz/version?digest=     one version: files, tensors, metadata
//   GET /v2/<name>/blz/stats?digest=       `blz inspect --stats --json` of a version (cached)
//   GET /v2/<name>/blz/patch-report?from=&to=  the cached patch from -> to, described
// and ?async=1 (Registry::Async, registry/background_jobs.h) for the computed ones.
//
// Everything read from archives (names, paths, metadata) is untrusted: documents are written
// with invalid UTF-8 replaced, JSON files are embedded only when small and shallow, long GGUF
// values are summarized.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "core/mmap_file.h"
#include "core/time_format.h"
#include "formats/blz_archive.h"
#include "formats/gguf.h"
#include "formats/inspect.h"
#include "formats/tensor_stats.h"
#include "patcher/patch_format.h"
#include "registry/auth.h"
#include "registry/background_jobs.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {

namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;
using Kind = Registry::Route::Kind;
using internal::ParsePagination;
using internal::ReplaceAll;
using internal::ServeFile;

constexpr uint64_t kDefaultRepositoryPage = 100;
constexpr size_t kMaxFilterBytes = 256;
// Metadata embedded in GET .../blz/version.
constexpr uint64_t kMaxMetadataFileBytes = 1 << 20;  // per JSON file
constexpr size_t kMaxMetadataFiles = 64;
constexpr int kMaxJsonDepth = 64;                     // deeper: embedded as a string
constexpr size_t kMaxGgufStringChars = 16 << 10;      // longer: summarized
constexpr uint64_t kGgufArrayPreview = 8;             // first elements shown of an array

// A JSON body; invalid UTF-8 in untrusted strings becomes U+FFFD instead of an exception.
Response JsonResponse(const ojson& doc, int status = 200) {
  Response res;
  res.status = status;
  res.body = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  res.Set("Content-Type", "application/json");
  return res;
}

ojson NullOr(const std::optional<std::string>& s) { return s ? ojson(*s) : ojson(nullptr); }

// Percent-encodes everything but RFC 3986 unreserved characters (query values in Link).
std::string QueryEscape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += char(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The nesting depth of JSON text (brackets outside strings); no validation.
int JsonDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

// A metadata file's contents: parsed when it is JSON (and not deeper than kMaxJsonDepth), else
// the text itself.
ojson ParseMetadataJson(const std::string& text) {
  if (JsonDepth(text) > kMaxJsonDepth) return ojson(text);
  ojson parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return ojson(text);
  return parsed;
}

// A GGUF string value: itself, or when long {"type":"string","length","head"}.
ojson GgufStringJson(std::string_view s) {
  if (s.size() <= kMaxGgufStringChars) return ojson(std::string(s));
  return ojson{{"type", "string"},
               {"length", s.size()},
               {"head", std::string(s.substr(0, kMaxGgufStringChars))}};
}

ojson GgufScalarJson(formats::GgufType type, uint64_t bits, std::string_view str) {
  using T = formats::GgufType;
  switch (type) {
    case T::kUint8:
    case T::kUint16:
    case T::kUint32:
    case T::kUint64: return ojson(bits);
    case T::kInt8: return ojson(int64_t(int8_t(bits)));
    case T::kInt16: return ojson(int64_t(int16_t(bits)));
    case T::kInt32: return ojson(int64_t(int32_t(bits)));
    case T::kInt64: return ojson(int64_t(bits));
    case T::kFloat32: {
      float f;
      const uint32_t b = uint32_t(bits);
      std::memcpy(&f, &b, 4);
      return std::isfinite(f) ? ojson(double(f)) : ojson(nullptr);
    }
    case T::kFloat64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return std::isfinite(d) ? ojson(d) : ojson(nullptr);
    }
    case T::kBool: return ojson(bits != 0);
    case T::kString: return GgufStringJson(str);
    case T::kArray: break;
  }
  return ojson(nullptr);
}

// An array: {"type":"array","element_type","length","first":[up to kGgufArrayPreview
// elements]} (nested arrays as {"type":"array","element_type","length"}).
ojson GgufArrayJson(formats::GgufType element_type, uint64_t count, std::string_view raw) {
  ojson first = ojson::array();
  std::string_view rest = raw;
  for (uint64_t i = 0; i < count && i < kGgufArrayPreview; ++i) {
    formats::GgufItemView item;
    if (!formats::NextGgufItem(element_type, &rest, &item)) break;
    if (element_type == formats::GgufType::kArray) {
      first.push_back({{"type", "array"},
                       {"element_type", std::string(formats::GgufTypeName(item.element_type))},
                       {"length", item.count}});
    } else {
      first.push_back(GgufScalarJson(element_type, item.bits, item.str));
    }
  }
  return ojson{{"type", "array"},
               {"element_type", std::string(formats::GgufTypeName(element_type))},
               {"length", count},
               {"first", std::move(first)}};
}

ojson GgufValueJson(const formats::GgufValue& v) {
  if (v.type == formats::GgufType::kArray) return GgufArrayJson(v.element_type, v.count, v.raw);
  return GgufScalarJson(v.type, v.bits, v.str);
}

// The kind a file is listed with: "safetensors", "gguf" or "raw".
std::string FileKind(const std::string& archive_kind) {
  return archive_kind == "file" ? "raw" : archive_kind;
}

// The model format of a version: "gguf" when it holds a GGUF file, else "safetensors" when it
// holds one, else "raw".
std::string ModelFormat(const formats::ArchiveHeader& h) {
  bool safetensors = false;
  for (const formats::ArchiveFile& f : h.files) {
    if (f.kind == "gguf") return "gguf";
    safetensors = safetensors || f.kind == "safetensors";
  }
  return safetensors ? "safetensors" : "raw";
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The codec label of a piece of a patch report: the codec of its chunks, "mixed" when they
// differ; without chunks "identical" (a piece with a base) or "empty".
std::string PieceCodec(const std::vector<patcher::internal::PatchChunk>& chunks, bool has_base) {
  if (chunks.empty()) return has_base ? "identical" : "empty";
  for (const auto& c : chunks) {
    if (c.codec != chunks[0].codec) return "mixed";
  }
  return std::string(patcher::CodecName(chunks[0].codec));
}

uint64_t PayloadBytes(const std::vector<patcher::internal::PatchChunk>& chunks) {
  uint64_t n = 0;
  for (const auto& c : chunks) n += c.length;
  return n;
}

// A version's NaN/Inf counts, from its cached statistics (GET .../blz/stats computes them):
// {"nan", "inf", "all_non_finite", "some_non_finite" (tensors entirely / partly non-finite)}
// when it has any, {} when
// every value is finite, null when the statistics were not computed yet. Stats blobs are
// content-addressed, so what was read is kept (bounded) by blob digest.
ojson CachedNonFinite(store::MetadataDb* db, const store::BlobStore& blobs,
                      const std::string& archive_digest) {
  Result<store::VersionStatsRecord> rec = db->FindVersionStats(archive_digest);
  if (!rec.ok()) return nullptr;
  static std::mutex mu;
  static std::map<std::string, ojson> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = seen.find(rec->stats_digest); it != seen.end()) return it->second;
  }
  Result<store::BlobInfo> blob = blobs.LocalFile(rec->stats_digest);
  if (!blob.ok()) return nullptr;
  Result<std::string> text = ReadSmallFile(blob->path, 256ull << 20);
  if (!text.ok()) return nullptr;
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("stats") || !doc["stats"].is_object()) return nullptr;
  const json& summary = doc["stats"].value("summary", json::object());
  auto count = [&](const char* key) -> uint64_t {
    auto it = summary.find(key);
    return it != summary.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  ojson out = ojson::object();
  const uint64_t nan = count("nan"), inf = count("pos_inf") + count("neg_inf");
  const uint64_t all = count("all_non_finite"), some = count("some_non_finite");
  if (nan + inf + all + some > 0) {
    out = ojson{{"nan", nan}, {"inf", inf}, {"all_non_finite", all}, {"some_non_finite", some}};
  }
  std::lock_guard<std::mutex> lock(mu);
  if (seen.size() >= 4096) seen.clear();
  seen.emplace(rec->stats_digest, out);
  return out;
}

}  // namespace

// ---- GET /v2/_blz/repositories ----

Response Registry::ListRepositorySummaries(const Route& route, const RequestHead& /*head*/) {
  auto page_args = ParsePagination(route);
  if (!page_args.ok()) return ErrorResponse(page_args.status(), ErrorContext::kGeneral);
  const uint64_t limit = page_args->first.value_or(kDefaultRepositoryPage);
  const std::string& last = page_args->second;
  std::string q = route.Query("q").value_or("");
  // Repository names are lower-case: "Llama" finds "org/llama".
  for (char& ch : q) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (q.size() > kMaxFilterBytes) {
    return ErrorResponse(OciError::kBadRequest,
                         "query parameter q must be at most " + std::to_string(kMaxFilterBytes) +
                             " bytes");
  }
  // Prepare let the caller in (pull somewhere); list only what it may pull.
  Result<std::vector<std::string>> names = db_->ListRepositoryNames(q);
  if (!names.ok()) return ErrorResponse(names.status(), ErrorContext::kGeneral);
  const std::vector<std::string> readable =
      internal::PullableNames(route, std::move(*names), options_.private_mode);
  auto begin = std::upper_bound(readable.begin(), readable.end(), last);
  if (last.empty()) begin = readable.begin();
  const size_t available = size_t(readable.end() - begin);
  const size_t count = size_t(std::min<uint64_t>(limit, available));

  ojson repositories = ojson::array();
  for (auto it = begin; it != begin + ptrdiff_t(count); ++it) {
    Result<std::vector<store::VersionRecord>> versions = db_->ListVersions(*it);
    if (!versions.ok()) return ErrorResponse(versions.status(), ErrorContext::kGeneral);
    ojson latest = nullptr;
    ojson last_push = nullptr;
    if (!versions->empty()) {
      const store::VersionRecord& v = versions->back();  // oldest first
      Result<std::vector<store::TagTarget>> tags = db_->ListTagTargets(*it);
      if (!tags.ok()) return ErrorResponse(tags.status(), ErrorContext::kGeneral);
      std::optional<std::string> tag;
      for (const store::TagTarget& t : *tags) {
        if (t.manifest_digest != v.manifest_digest) continue;
        if (!tag.has_value() || t.tag == "latest") tag = t.tag;
        if (t.tag == "latest") break;
      }
      latest = ojson{{"tag", NullOr(tag)},
                     {"digest", v.archive_digest},
                     {"manifest_digest", v.manifest_digest},
                     {"size", v.archive_size},
                     {"pushed", FormatRfc3339UtcSeconds(v.created)},
                     {"structure", v.structural_hash.empty() ? ojson(nullptr)
                                                             : ojson(v.structural_hash)},
                     {"non_finite", CachedNonFinite(db_.get(), *blobs_, v.archive_digest)}};
      last_push = FormatRfc3339UtcSeconds(v.created);
    }
    repositories.push_back({{"name", *it},
                            {"versions", versions->size()},
                            {"latest", std::move(latest)},
                            {"last_push", std::move(last_push)}});
  }
  Response res = JsonResponse(ojson{{"repositories", std::move(repositories)},
                                    {"total", readable.size()}});
  if (count < available && count > 0) {
    res.Set("Link", "</v2/_blz/repositories?n=" + std::to_string(limit) +
                        "&last=" + QueryEscape(*(begin + ptrdiff_t(count) - 1)) +
                        "&q=" + QueryEscape(q) + ">; rel=\"next\"");
  }
  return res;
}

// ---- GET /v2/<name>/blz/versions ----

Response Registry::ListVersionSummaries(const Route& route) {
  Result<bool> exists = db_->RepositoryExists(route.name);
  if (!exists.ok()) return ErrorResponse(exists.status(), ErrorContext::kGeneral);
  if (!*exists) {
    return ErrorResponse(OciError::kNameUnknown,
                         "repository '" + route.name + "' is not known to this registry",
                         json{{"name", route.name}});
  }
  Result<std::vector<store::VersionRecord>> versions = db_->ListVersions(route.name);
  if (!versions.ok()) return ErrorResponse(versions.status(), ErrorContext::kGeneral);
  Result<std::vector<store::TagTarget>> tags = db_->ListTagTargets(route.name);
  if (!tags.ok()) return ErrorResponse(tags.status(), ErrorContext::kGeneral);
  std::map<std::string, std::vector<std::string>> tags_of;  // manifest digest -> tags
  for (store::TagTarget& t : *tags) tags_of[t.manifest_digest].push_back(std::move(t.tag));

  const std::vector<store::VersionRecord>& vs = *versions;  // oldest first
  ojson out = ojson::array();
  for (size_t i = vs.size(); i-- > 0;) {
    const store::VersionRecord& v = vs[i];
    ojson previous = nullptr;
    if (!v.structural_hash.empty()) {
      for (size_t j = i; j-- > 0;) {
        if (vs[j].structural_hash != v.structural_hash) continue;
        ojson patch_bytes = nullptr;
        bool cached = false;
        Result<store::PatchRecord> patch = db_->FindPatch(vs[j].archive_digest, v.archive_digest);
        if (patch.ok()) {
          cached = blobs_->Stat(patch->patch_digest).ok();
          if (cached) patch_bytes = patch->patch_size;
        } else if (patch.status().code() != Code::kNotFound) {
          return ErrorResponse(patch.status(), ErrorContext::kGeneral);
        }
        previous = ojson{{"digest", vs[j].archive_digest},
                         {"patch_bytes", std::move(patch_bytes)},
                         {"patch_cached", cached}};
        break;
      }
    }
    auto t = tags_of.find(v.manifest_digest);
    out.push_back({{"digest", v.archive_digest},
                   {"manifest_digest", v.manifest_digest},
                   {"tags", t == tags_of.end() ? ojson::array() : ojson(t->second)},
                   {"size", v.archive_size},
                   {"pushed", FormatRfc3339UtcSeconds(v.created)},
                   {"structure",
                    v.structural_hash.empty() ? ojson(nullptr) : ojson(v.structural_hash)},
                   {"non_finite", CachedNonFinite(db_.get(), *blobs_, v.archive_digest)},
                   {"previous", std::move(previous)}});
  }
  return JsonResponse(ojson{{"name", route.name}, {"versions", std::move(out)}});
}

// ---- GET /v2/<name>/blz/version?digest= ----

Response Registry::GetVersionDetail(const Route& route, const RequestHead&) {
  const std::optional<std::string> digest = route.Query("digest");
  if (!digest.has_value() || !ParseDigest(*digest).ok()) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "version needs ?digest=<archive digest> (sha256:<64 lower-case hex>)",
                         json{{"digest", digest.value_or("")}});
  }
  Result<store::VersionRecord> v = db_->FindVersion(route.name, *digest);
  if (!v.ok()) {
    return ErrorResponse(OciErrorFor(v.status(), ErrorContext::kPatch), v.status().message(),
                         json{{"digest", *digest}});
  }
  std::string path;
  if (Response error; !ArchiveFile(*digest, &path, &error)) return error;
  auto fail = [&](const Status& s) {
    return ErrorResponse(OciError::kUnknown,
                         "reading the archive failed: " + ReplaceAll(s.ToString(), path, *digest),
                         json{{"digest", *digest}});
  };
  Result<formats::BlzArchive> archive = formats::BlzArchive::Open(path);
  if (!archive.ok()) return fail(archive.status());
  Result<formats::ModelSummary> summary = formats::Describe(path);
  if (!summary.ok()) return fail(summary.status());
  const formats::ArchiveHeader& h = archive->header();

  Result<std::vector<store::TagTarget>> tags = db_->ListTagTargets(route.name);
  if (!tags.ok()) return ErrorResponse(tags.status(), ErrorContext::kGeneral);
  ojson tag_list = ojson::array();
  for (const store::TagTarget& t : *tags) {
    if (t.manifest_digest == v->manifest_digest) tag_list.push_back(t.tag);
  }

  ojson files = ojson::array();
  ojson config = nullptr;
  ojson gguf = nullptr;
  ojson json_files = ojson::object();
  for (const formats::ArchiveFile& f : h.files) {
    files.push_back({{"path", f.path}, {"bytes", f.size}, {"kind", FileKind(f.kind)}});
    if (f.kind == "gguf" && gguf.is_null() && !f.pieces.empty() &&
        f.pieces[0].kind == formats::ArchivePiece::Kind::kRaw) {
      Result<formats::GgufFile> g = formats::ParseGguf(
          archive->RawData(f.pieces[0].index), formats::GgufMode::kHeaderOnly, f.path);
      if (g.ok()) {
        gguf = ojson::object();
        for (const formats::GgufKv& kv : g->header.metadata) gguf[kv.key] = GgufValueJson(kv.value);
      }
    }
    if (f.kind != "file" || !EndsWith(f.path, ".json") || f.size > kMaxMetadataFileBytes) {
      continue;
    }
    if (f.path != "config.json" && json_files.size() >= kMaxMetadataFiles) continue;
    std::string text;
    text.reserve(size_t(f.size));
    for (const formats::ArchivePiece& p : f.pieces) {
      if (p.kind != formats::ArchivePiece::Kind::kRaw) continue;
      ByteSpan b = archive->RawData(p.index);
      text.append(reinterpret_cast<const char*>(b.data()), b.size());
    }
    if (f.path == "config.json") {
      config = ParseMetadataJson(text);
    } else {
      json_files[f.path] = ParseMetadataJson(text);
    }
  }

  ojson tensors = ojson::array();
  for (const formats::TensorSummary& t : summary->tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", t.DisplayDType()},
                       {"shape", t.shape},
                       {"bytes", t.bytes},
                       {"file", t.file}});
  }
  ojson doc = {{"digest", *digest},
               {"manifest_digest", v->manifest_digest},
               {"tags", std::move(tag_list)},
               {"size", v->archive_size},
               {"pushed", FormatRfc3339UtcSeconds(v->created)},
               {"structure", v->structural_hash.empty() ? ojson(nullptr)
                                                        : ojson(v->structural_hash)},
               {"format", ModelFormat(h)},
               {"files", std::move(files)},
               {"tensors", std::move(tensors)},
               {"metadata",
                {{"config", std::move(config)},
                 {"gguf", std::move(gguf)},
                 {"files", std::move(json_files)}}}};
  return JsonResponse(doc);
}

// ---- GET /v2/<name>/blz/stats?digest= ----

Response Registry::GetVersionStats(const Route& route, const RequestHead& head) {
  const std::optional<std::string> digest = route.Query("digest");
  if (!digest.has_value() || !ParseDigest(*digest).ok()) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "stats needs ?digest=<archive digest> (sha256:<64 lower-case hex>)",
                         json{{"digest", digest.value_or("")}});
  }
  std::string path;
  if (Response error; !ResolveVersionArchive(route, *digest, &path, &error)) return error;
  if (std::optional<Response> throttled =
          ThrottleComputation(route, db_->FindVersionStats(*digest).ok())) {
    return std::move(*throttled);
  }
  bool compute_failed = false;
  Result<CachedBlob> computed = ComputeCached(
      &stats_locks_, *digest, "stats",
      [&]() -> Result<std::string> {
        BLZ_ASSIGN_OR_RETURN(store::VersionStatsRecord cached, db_->FindVersionStats(*digest));
        return cached.stats_digest;
      },
      [&](const std::string& out) -> Status {
        // The document of `blz inspect --stats --json`, naming the archive by digest.
        auto named = [&](const Status& s) {
          return Status(s.code(), ReplaceAll(s.message(), path, *digest));
        };
        Result<formats::ModelSummary> summary = formats::Describe(path);
        if (!summary.ok()) return named(summary.status());
        formats::StatsOptions stats_options;
        stats_options.counters = CurrentJobCounters();  // ?async=1: the poll shows progress
        Result<formats::ModelStats> stats = formats::ComputeModelStats(path, stats_options);
        if (!stats.ok()) return named(stats.status());
        summary->path = *digest;
        stats->path = *digest;
        ojson doc = ojson::parse(formats::SummaryJson(*summary).dump(
            -1, ' ', false, json::error_handler_t::replace));
        doc["stats"] = formats::ModelStatsJson(*stats);
        return WriteFileAtomic(out, doc.dump(-1, ' ', false, json::error_handler_t::replace));
      },
      [&](const store::BlobInfo& blob) {
        return db_->RecordVersionStats(store::VersionStatsRecord{*digest, blob.digest, blob.size});
      },
      &compute_failed);
  if (!computed.ok()) {
    if (!compute_failed) return ErrorResponse(computed.status(), ErrorContext::kPatch);
    return ErrorResponse(OciError::kUnknown,
                         "computing the statistics failed: " + computed.status().ToString(),
                         json{{"digest", *digest}});
  }
  if (!computed->hit) stats_computed_.fetch_add(1);
  metrics_.RecordComputed(Metrics::Computed::kStats, computed->hit);
  return ServeComputedJson(*computed, head, "Blz-Stats-Cache");
}

// ---- GET /v2/<name>/blz/patch-report?from=&to= ----

Response Registry::GetPatchReport(const Route& route, const RequestHead& head) {
  const std::optional<std::string> from = route.Query("from");
  const std::optional<std::string> to = route.Query("to");
  std::string paths[2];
  // As for GET /blz/patch: with archives stored as patches, neither is rebuilt (the patch is
  // computed from them as stored, and the report needs only the target's header).
  const bool in_place = options_.create_patch_from_readers && storage_->enabled();
  if (Response error; !ResolveFromTo(route, head, from, to,
                                     "patch-report needs ?from=<archive digest>&to=<archive "
                                     "digest>",
                                     paths, &error, /*lazy=*/in_place)) {
    return error;
  }
  if (std::optional<Response> throttled =
          ThrottleComputation(route, db_->FindPatch(*from, *to).ok())) {
    return std::move(*throttled);
  }
  bool compute_failed = false;
  Result<CachedBlob> computed = CachedPatch(route, *from, *to, paths, &compute_failed);
  if (!computed.ok()) return CachedPatchError(computed.status(), compute_failed);
  auto fail = [&](const Status& s) {
    std::string m = ReplaceAll(s.ToString(), computed->blob.path, computed->blob.digest);
    if (!paths[1].empty()) m = ReplaceAll(m, paths[1], *to);
    return ErrorResponse(OciError::kUnknown, "reading the patch failed: " + m,
                         json{{"from", *from}, {"to", *to}});
  };
  Result<MappedFile> patch = MappedFile::Open(computed->blob.path);
  if (!patch.ok()) return fail(patch.status());
  Result<patcher::internal::PatchHeader> ph =
      patcher::internal::ParsePatch(patch->bytes(), patch->bytes().size(), computed->blob.digest);
  if (!ph.ok()) return fail(ph.status());
  // The target's header: from its stored form (OpenReader parses headers only), or its file.
  std::shared_ptr<const patcher::ArchiveReader> stored;
  std::optional<formats::BlzArchive> target;
  if (paths[1].empty()) {
    Result<std::shared_ptr<const patcher::ArchiveReader>> r = storage_->OpenReader(*to);
    if (!r.ok()) return fail(r.status());
    stored = std::move(*r);
  } else {
    Result<formats::BlzArchive> t = formats::BlzArchive::Open(paths[1]);
    if (!t.ok()) return fail(t.status());
    target.emplace(std::move(*t));
  }
  const formats::ArchiveHeader& h = stored != nullptr ? stored->header() : target->header();

  // Tensor names qualified by their file's path when not unique (as `blz diff -o` reports).
  std::map<std::string, uint32_t> name_counts;
  for (const formats::ArchiveTensor& t : h.tensors) ++name_counts[t.name];

  uint32_t identical = 0, patched = 0, added = 0;
  ojson pieces = ojson::array();
  for (const patcher::internal::PatchPiece& p : ph->pieces) {
    const bool tensor = p.kind == formats::ArchivePiece::Kind::kTensor;
    if ((tensor && p.index >= h.tensors.size()) || (!tensor && p.index >= h.raws.size())) {
      return fail(Corruption("piece index " + std::to_string(p.index) +
                             " is not in the target archive"));
    }
    std::string name;
    std::string file;  // the file the piece belongs to (the web view sums a file's pieces)
    uint64_t target_bytes = 0;
    if (tensor) {
      const formats::ArchiveTensor& t = h.tensors[p.index];
      if (t.file_index < h.files.size()) file = h.files[t.file_index].path;
      name = name_counts[t.name] > 1 && t.file_index < h.files.size()
                 ? h.files[t.file_index].path + ":" + t.name
                 : t.name;
      target_bytes = t.length;
      const bool all_identical =
          std::all_of(p.chunks.begin(), p.chunks.end(), [](const auto& c) {
            return c.codec == patcher::Codec::kIdentical;
          });
      if (!p.base.has_value()) {
        ++added;
      } else if (all_identical) {
        ++identical;
      } else {
        ++patched;
      }
    } else {
      const formats::ArchiveRaw& r = h.raws[p.index];
      name = r.file_index < h.files.size() ? h.files[r.file_index].path : "";
      file = name;
      target_bytes = r.length;
    }
    pieces.push_back({{"name", std::move(name)},
                      {"kind", tensor ? "tensor" : "file"},
                      {"file", std::move(file)},
                      {"codec", PieceCodec(p.chunks, p.base.has_value())},
                      {"target_bytes", target_bytes},
                      {"patch_bytes", PayloadBytes(p.chunks)}});
  }
  ojson doc = {{"from", *from},
               {"to", *to},
               {"patch_bytes", computed->blob.size},
               {"target_bytes", h.total_size},
               {"identical", identical},
               {"patched", patched},
               {"added", added},
               {"removed", ph->removed},
               {"prefix",
                {{"codec", PieceCodec(ph->prefix_chunks, false)},
                 {"target_bytes", ph->prefix_length},
                 {"patch_bytes", PayloadBytes(ph->prefix_chunks)}}},
               {"pieces", std::move(pieces)}};
  Response res = JsonResponse(doc);
  res.Set("Docker-Content-Digest", computed->blob.digest);
  res.Set("Blz-Patch-Cache", computed->hit ? "hit" : "miss");
  return res;
}

// ---- ?async=1 ----

Response Registry::Async(const Route& route, const RequestHead& head,
                         Response (Registry::*handler)(const Route&, const RequestHead&)) {
  if (!internal::IsAsync(route) || head.method != "GET") return (this->*handler)(route, head);
  const bool delta = route.kind == Kind::kDelta || route.kind == Kind::kDeltaReport;
  const char* phase = route.kind == Kind::kDiff    ? "computing the value diff"
                      : route.kind == Kind::kStats ? "computing the statistics"
                      : delta                      ? "computing the lossy delta"
                                                   : "computing the patch";
  std::string key = std::to_string(int(route.kind)) + " " + route.name + " " +
                    route.Query("from").value_or("") + " " + route.Query("to").value_or("") +
                    " " + route.Query("digest").value_or("");
  if (delta) {  // a delta's key is also its strategy and options
    for (const auto& [k, v] : route.target.query) {
      if (k != "from" && k != "to" && k != "async") key += " " + k + "=" + v;
    }
  }
  BackgroundJobs::Outcome out = jobs_->Run(
      key, phase,
      [this, route, head, handler](JobCounters*) { return (this->*handler)(route, head); },
      options_.async_wait);
  if (out.finished) return std::move(out.response);
  const JobProgress& p = out.progress;
  auto opt = [](const std::optional<uint64_t>& v) { return v ? ojson(*v) : ojson(nullptr); };
  Response res = JsonResponse(ojson{{"state", "computing"},
                                    {"phase", p.phase},
                                    {"done", opt(p.done)},
                                    {"total", opt(p.total)},
                                    {"elapsed_ms", p.elapsed_ms}},
                              202);
  res.Set("Retry-After", "1");
  return res;
}

}  // namespace blz::registry
