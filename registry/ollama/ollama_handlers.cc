#include "registry/ollama/ollama_handlers.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "registry/byte_ranges.h"
#include "registry/errors.h"
#include "registry/hub/version_files.h"
#include "registry/oci_manifest.h"
#include "registry/ollama/ollama_manifest.h"
#include "registry/registry.h"
#include "registry/wire.h"

namespace blz::registry::ollama {

namespace {

using json = nlohmann::json;

// The first read of a GGUF file's header; doubled until the header parses (at most the file).
constexpr uint64_t kFirstHeaderRead = 1ull << 20;

bool IsGgufPath(const std::string& path) {
  if (path.size() < 5) return false;
  std::string ext = path.substr(path.size() - 5);
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".gguf";
}

// The archive digest of a blz model manifest (config of the blz media type, one archive layer),
// or nullopt for any other manifest.
std::optional<std::string> ArchiveOf(const store::ManifestRecord& record) {
  Result<OciManifest> m = ParseOciManifest(record.content, record.media_type);
  if (!m.ok() || !m->config.has_value() || m->config->media_type != kBlzConfigMediaType ||
      m->layers.size() != 1 || m->layers[0].media_type != kBlzArchiveMediaType) {
    return std::nullopt;
  }
  return m->layers[0].digest;
}

Result<OllamaView> ComputeView(const Context& ctx, const std::string& archive_digest) {
  BLZ_ASSIGN_OR_RETURN(std::vector<hub::VersionFile> files, ctx.files->List(archive_digest));
  std::vector<const hub::VersionFile*> ggufs;
  std::string names;
  for (const hub::VersionFile& f : files) {
    if (IsGgufPath(f.path)) ggufs.push_back(&f);
    if (!names.empty()) names += ", ";
    names += f.path;
  }
  if (ggufs.size() != 1) {
    return Status(Code::kUnsupported,
                  "version " + archive_digest + " holds " +
                      (ggufs.empty() ? std::string("no GGUF file")
                                     : std::to_string(ggufs.size()) + " GGUF files") +
                      " (files: " + names +
                      "); Ollama pulls only versions holding exactly one .gguf file (push one, "
                      "e.g. made with `blz export --format gguf`)");
  }
  const hub::VersionFile& gguf = *ggufs[0];
  // The header is at the start of the file; read more until it parses.
  Result<GgufModelInfo> info = Status(Code::kInternal, "unread");
  for (uint64_t want = std::min(gguf.size, kFirstHeaderRead);;
       want = std::min(gguf.size, want * 2)) {
    std::string prefix;
    prefix.reserve(size_t(want));
    BLZ_RETURN_IF_ERROR(ctx.files->Read(archive_digest, gguf.path, 0, want, [&](ByteSpan b) {
      prefix.append(AsChars(b));
      return Status::Ok();
    }));
    info = ReadGgufModelInfo(AsBytes(prefix), gguf.path);
    if (info.ok() || want == gguf.size || info.status().code() != Code::kCorruption) break;
  }
  BLZ_RETURN_IF_ERROR(info.status());
  OllamaView view;
  view.archive_digest = archive_digest;
  view.gguf_path = gguf.path;
  view.gguf_size = gguf.size;
  view.gguf_digest = MakeDigest(gguf.sha256);
  view.config = ConfigJson(*info, view.gguf_digest);
  view.config_digest = MakeDigest(Sha256Hex(view.config));
  view.manifest =
      ManifestJson(view.config_digest, view.config.size(), view.gguf_digest, view.gguf_size);
  view.manifest_digest = MakeDigest(Sha256Hex(view.manifest));
  return view;
}

// A failure to read a version (not "this version has no Ollama view").
Response ServerError(const Status& s, const std::string& digest) {
  return ErrorResponse(OciError::kUnknown, "reading version " + digest + ": " + s.ToString(),
                       json{{"digest", digest}});
}

// 200 / 206 / 416 for `size` bytes from `slice(offset, length)` (the GGUF) or `body` (config).
Response ServeBytes(const Context& ctx, const OllamaView& view, bool gguf,
                    const RequestHead& head) {
  const uint64_t size = gguf ? view.gguf_size : view.config.size();
  Response res;
  std::optional<RangeSpan> span = SelectRange(head.Get("Range"), size, &res);
  if (!span) {
    Response err = ErrorResponse(OciError::kRangeInvalid,
                                 "requested range not satisfiable for " + std::to_string(size) +
                                     " bytes",
                                 json{{"size", size}});
    SetUnsatisfiableRange(size, &err);
    return err;
  }
  const uint64_t offset = span->offset;
  const uint64_t length = span->length;
  res.Set("Content-Type", "application/octet-stream");
  const std::string& digest = gguf ? view.gguf_digest : view.config_digest;
  res.Set("Docker-Content-Digest", digest);
  res.Set("ETag", "\"" + digest + "\"");
  if (!gguf) {
    res.body = view.config.substr(size_t(offset), size_t(length));
    return res;
  }
  if (head.method == "HEAD" || length == 0) {  // the size is known: nothing to read
    res.file_path = "/dev/null";
    res.file_offset = 0;
    res.file_length = length;
    return res;
  }
  Result<hub::FileSlice> slice =
      ctx.files->Slice(view.archive_digest, view.gguf_path, offset, length);
  if (!slice.ok()) return ServerError(slice.status(), view.archive_digest);
  hub::SetResponseBody(std::move(*slice), &res);
  return res;
}

}  // namespace

ViewCache::Entry ViewCache::Get(const std::string& archive_digest) {
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first == archive_digest) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().second;
    }
  }
  return nullptr;
}

void ViewCache::Put(const std::string& archive_digest, Entry entry) {
  std::lock_guard lock(mu_);
  entries_.remove_if([&](const auto& e) { return e.first == archive_digest; });
  entries_.emplace_front(archive_digest, std::move(entry));
  while (entries_.size() > kEntries) entries_.pop_back();
}

Result<OllamaView> ViewOf(const Context& ctx, const std::string& archive_digest) {
  if (ViewCache::Entry hit = ctx.cache->Get(archive_digest)) return *hit;
  Result<OllamaView> view = ComputeView(ctx, archive_digest);
  // Keep views and "not a single GGUF" answers; transient failures are tried again.
  if (view.ok() || view.status().code() == Code::kUnsupported) {
    ctx.cache->Put(archive_digest, std::make_shared<const Result<OllamaView>>(view));
  }
  return view;
}

std::optional<Response> ServeManifest(const Context& ctx, const std::string& repository,
                                      const std::string& reference,
                                      const store::ManifestRecord& record) {
  std::optional<std::string> archive = ArchiveOf(record);
  if (!archive.has_value()) return std::nullopt;
  Result<OllamaView> view = ViewOf(ctx, *archive);
  if (!view.ok()) {
    if (view.status().code() != Code::kUnsupported) return ServerError(view.status(), *archive);
    Response err = ErrorResponse(
        OciError::kUnsupported,
        repository + ":" + reference + " has no Ollama (Docker schema 2) manifest: " +
            view.status().message(),
        json{{"name", repository}, {"reference", reference}});
    err.status = 406;  // Not Acceptable: Ollama prints the status and this body
    return err;
  }
  Response res;
  res.body = view->manifest;
  res.Set("Content-Type", kDockerManifestMediaType);
  res.Set("Docker-Content-Digest", view->manifest_digest);
  res.Set("ETag", "\"" + view->manifest_digest + "\"");
  return res;
}

std::optional<Response> ServeBlob(const Context& ctx, const std::string& repository,
                                  const std::string& digest, const RequestHead& head) {
  if (ParseDigest(digest).status().code() != Code::kOk) return std::nullopt;  // sha256 only
  Result<std::vector<store::VersionRecord>> versions = ctx.db->ListVersions(repository);
  if (!versions.ok()) return ServerError(versions.status(), repository);
  // Newest first: a pull follows a manifest GET, usually of a recent version.
  for (auto it = versions->rbegin(); it != versions->rend(); ++it) {
    Result<OllamaView> view = ViewOf(ctx, it->archive_digest);
    if (!view.ok()) continue;  // not a GGUF version, or unreadable: not this blob
    if (view->gguf_digest == digest) return ServeBytes(ctx, *view, /*gguf=*/true, head);
    if (view->config_digest == digest) return ServeBytes(ctx, *view, /*gguf=*/false, head);
  }
  return std::nullopt;
}

}  // namespace blz::registry::ollama
