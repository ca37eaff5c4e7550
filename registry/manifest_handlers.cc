// Manifests and tags: GET, HEAD and PUT /v2/<name>/manifests/<reference>, GET
// /v2/<name>/tags/list (docs/registry-api.md).
#include <utility>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "formats/json_strict.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {

namespace {

using json = nlohmann::json;
using internal::ArchiveStructuralHash;
using internal::Empty;
using internal::ParsePagination;

std::string MediaTypeOf(std::string_view content_type) {
  size_t semi = content_type.find(';');
  std::string_view t = content_type.substr(0, semi);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  return std::string(t);
}

// The config and layer a blz manifest references (docs/registry-api.md).
struct ManifestRefs {
  std::string config_digest;
  uint64_t config_size = 0;
  std::string layer_digest;
  uint64_t layer_size = 0;
};

Status ParseDescriptor(const json& d, std::string_view field, std::string_view media_type,
                       std::string* digest, uint64_t* size) {
  if (!d.is_object()) return InvalidArgument(std::string(field) + " must be an object");
  auto mt = d.find("mediaType");
  if (mt == d.end() || !mt->is_string() || mt->get<std::string>() != media_type) {
    return InvalidArgument(std::string(field) + ".mediaType must be \"" +
                           std::string(media_type) + "\"");
  }
  auto dg = d.find("digest");
  if (dg == d.end() || !dg->is_string() || !ParseDigest(dg->get<std::string>()).ok()) {
    return InvalidArgument(std::string(field) + ".digest must be \"sha256:<64 lower-case hex>\"");
  }
  auto sz = d.find("size");
  if (sz == d.end() || !sz->is_number_unsigned()) {
    return InvalidArgument(std::string(field) + ".size must be a non-negative integer");
  }
  *digest = dg->get<std::string>();
  *size = sz->get<uint64_t>();
  return Status::Ok();
}

// Checks the manifest's shape. Errors: kInvalidArgument (-> MANIFEST_INVALID).
Result<ManifestRefs> ParseBlzManifest(std::string_view body,
                                      const std::optional<std::string>& content_type) {
  // Strict: valid UTF-8, no NUL (nlohmann would stop reading there), no duplicate keys.
  Result<json> parsed = formats::ParseJsonStrict(body, "manifest", 0);
  if (!parsed.ok()) return InvalidArgument(parsed.status().message());
  json m = std::move(parsed).value();
  if (!m.is_object()) return InvalidArgument("manifest must be a JSON object");
  auto sv = m.find("schemaVersion");
  if (sv == m.end() || !sv->is_number_integer() || sv->get<int64_t>() != 2) {
    return InvalidArgument("manifest schemaVersion must be 2");
  }
  std::string media_type;
  auto mt = m.find("mediaType");
  if (mt != m.end()) {
    if (!mt->is_string()) return InvalidArgument("manifest mediaType must be a string");
    media_type = mt->get<std::string>();
  }
  if (content_type.has_value() && !content_type->empty()) {
    std::string ct = MediaTypeOf(*content_type);
    if (!media_type.empty() && ct != media_type) {
      return InvalidArgument("Content-Type '" + ct + "' does not match the manifest mediaType '" +
                             media_type + "'");
    }
    if (media_type.empty()) media_type = ct;
  }
  if (media_type != kOciManifestMediaType) {
    return InvalidArgument("unsupported manifest media type '" + media_type +
                           "': blz stores " + kOciManifestMediaType);
  }
  auto at = m.find("artifactType");
  if (at != m.end() && (!at->is_string() || at->get<std::string>() != kBlzArtifactType)) {
    return InvalidArgument(std::string("manifest artifactType must be \"") + kBlzArtifactType +
                           "\"");
  }
  ManifestRefs refs;
  auto config = m.find("config");
  if (config == m.end()) return InvalidArgument("manifest has no config");
  BLZ_RETURN_IF_ERROR(ParseDescriptor(*config, "config", kBlzConfigMediaType,
                                      &refs.config_digest, &refs.config_size));
  auto layers = m.find("layers");
  if (layers == m.end() || !layers->is_array() || layers->size() != 1) {
    return InvalidArgument("manifest must have exactly one layer (the .blz archive)");
  }
  BLZ_RETURN_IF_ERROR(ParseDescriptor((*layers)[0], "layers[0]", kBlzArchiveMediaType,
                                      &refs.layer_digest, &refs.layer_size));
  return refs;
}

}  // namespace

Response Registry::PutManifest(const Route& route, const Request& request) {
  const std::string& ref = route.ref;
  const bool by_digest = ref.find(':') != std::string::npos;
  if (by_digest && !ParseDigest(ref).ok()) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid manifest digest '" + ref + "'",
                         json{{"digest", ref}});
  }
  if (!by_digest && !IsValidTag(ref)) {
    return ErrorResponse(OciError::kManifestInvalid,
                         "invalid tag '" + ref + "': must match [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}",
                         json{{"tag", ref}});
  }
  std::string body = request.body;
  if (!request.body_file.empty()) {
    Result<std::string> b = ReadSmallFile(request.body_file, options_.max_manifest_bytes);
    if (!b.ok()) return ErrorResponse(b.status(), ErrorContext::kManifest);
    body = std::move(*b);
  }
  if (body.size() > options_.max_manifest_bytes) {
    return ErrorResponse(OciError::kTooLarge, "manifest of " + std::to_string(body.size()) +
                                                  " bytes exceeds the limit of " +
                                                  std::to_string(options_.max_manifest_bytes));
  }
  Result<ManifestRefs> refs = ParseBlzManifest(body, request.head.Get("Content-Type"));
  if (!refs.ok()) return ErrorResponse(refs.status(), ErrorContext::kManifest);

  const std::pair<const std::string*, uint64_t> wanted[] = {
      {&refs->config_digest, refs->config_size}, {&refs->layer_digest, refs->layer_size}};
  for (const auto& [digest, size] : wanted) {
    Result<store::BlobInfo> info = storage_->Stat(*digest);
    if (!info.ok()) {
      if (info.status().code() == Code::kNotFound) {
        return ErrorResponse(OciError::kManifestBlobUnknown,
                             "manifest references blob " + *digest + ", which is not in the registry",
                             json{{"digest", *digest}});
      }
      return ErrorResponse(info.status(), ErrorContext::kManifest);
    }
    if (info->size != size) {
      return ErrorResponse(OciError::kManifestInvalid,
                           "manifest says blob " + *digest + " has " + std::to_string(size) +
                               " bytes, but it has " + std::to_string(info->size),
                           json{{"digest", *digest}});
    }
  }

  const std::string digest = MakeDigest(Sha256Hex(body));
  if (by_digest && digest != ref) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "manifest hashes to " + digest + ", not " + ref, json{{"digest", ref}});
  }
  // Every version records its structure; an archive blz cannot identify is not a version.
  Result<std::string> structural_hash = NotFound("archive blob missing");
  if (Result<store::BlobInfo> layer = storage_->File(refs->layer_digest); layer.ok()) {
    structural_hash = ArchiveStructuralHash(layer->path, refs->layer_digest);
  }
  if (!structural_hash.ok()) {
    const Status& e = structural_hash.status();
    if (e.code() == Code::kIOError || e.code() == Code::kInternal || e.code() == Code::kNotFound) {
      return ErrorResponse(OciError::kUnknown, "identifying the archive failed: " + e.ToString(),
                           json{{"digest", refs->layer_digest}});
    }
    return ErrorResponse(OciError::kManifestInvalid,
                         "layers[0] " + refs->layer_digest +
                             " is not a model archive whose structure blz can identify: " +
                             e.ToString(),
                         json{{"digest", refs->layer_digest}});
  }
  // The archive's data must pass `blz verify` (every tensor's xxh3-64 and SHA-256, every file's
  // SHA-256) before the version exists: a corrupt archive can be neither stored as a full patch
  // nor patched, and clients would receive it. Checked once per archive (remembered).
  if (Status v = storage_->VerifyArchive(refs->layer_digest); !v.ok()) {
    if (v.code() == Code::kIOError || v.code() == Code::kInternal ||
        v.code() == Code::kNotFound || v.code() == Code::kUnavailable) {
      return ErrorResponse(OciError::kUnknown, "verifying the archive failed: " + v.ToString(),
                           json{{"digest", refs->layer_digest}});
    }
    return ErrorResponse(OciError::kManifestInvalid,
                         "layers[0] " + refs->layer_digest +
                             " fails verification, nothing was stored: " + v.ToString(),
                         json{{"digest", refs->layer_digest}});
  }
  store::ManifestPut put;
  put.repository = route.name;
  put.digest = digest;
  put.media_type = kOciManifestMediaType;
  put.content = std::move(body);
  put.tag = by_digest ? "" : ref;
  put.archive_digest = refs->layer_digest;
  put.archive_size = refs->layer_size;
  put.structural_hash = std::move(*structural_hash);
  Status s = db_->PutManifest(put);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kManifest);
  storage_->Schedule(put.archive_digest);  // store it as a full patch, in the background
  Response res = Empty(201);
  res.Set("Location", "/v2/" + route.name + "/manifests/" + digest);
  res.Set("Docker-Content-Digest", digest);
  return res;
}

Response Registry::GetManifest(const Route& route) {
  const std::string& ref = route.ref;
  std::string digest;
  if (ref.find(':') != std::string::npos) {
    if (!ParseDigest(ref).ok()) {
      return ErrorResponse(OciError::kDigestInvalid, "invalid manifest digest '" + ref + "'",
                           json{{"digest", ref}});
    }
    digest = ref;
  } else {
    if (!IsValidTag(ref)) {
      return ErrorResponse(OciError::kManifestUnknown, "invalid tag '" + ref + "'",
                           json{{"tag", ref}});
    }
    Result<std::string> d = db_->ResolveTag(route.name, ref);
    if (!d.ok()) {
      return ErrorResponse(OciErrorFor(d.status(), ErrorContext::kManifest), d.status().message(),
                           json{{"tag", ref}});
    }
    digest = std::move(*d);
  }
  Result<store::ManifestRecord> m = db_->GetManifest(route.name, digest);
  if (!m.ok()) {
    return ErrorResponse(OciErrorFor(m.status(), ErrorContext::kManifest), m.status().message(),
                         json{{"digest", digest}});
  }
  Response res;
  res.body = std::move(m->content);
  res.Set("Content-Type", m->media_type);
  res.Set("Docker-Content-Digest", digest);
  res.Set("ETag", "\"" + digest + "\"");
  return res;
}

Response Registry::ListTags(const Route& route) {
  auto page_args = ParsePagination(route);
  if (!page_args.ok()) return ErrorResponse(page_args.status(), ErrorContext::kGeneral);
  auto [limit, last] = *page_args;
  Result<store::Page> page = db_->ListTags(route.name, limit, last);
  if (!page.ok()) {
    return ErrorResponse(OciErrorFor(page.status(), ErrorContext::kName), page.status().message(),
                         json{{"name", route.name}});
  }
  Response res;
  res.body = json{{"name", route.name}, {"tags", page->items}}.dump();
  res.Set("Content-Type", "application/json");
  if (page->more && !page->items.empty()) {
    res.Set("Link", "</v2/" + route.name + "/tags/list?n=" + std::to_string(*limit) + "&last=" +
                        page->items.back() + ">; rel=\"next\"");
  }
  return res;
}

}  // namespace blz::registry
