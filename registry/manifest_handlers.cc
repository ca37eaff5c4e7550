// Manifests, tags and referrers: GET, HEAD, PUT and DELETE /v2/<name>/manifests/<reference>,
// GET /v2/<name>/tags/list, GET /v2/<name>/referrers/<digest> (docs/registry-api.md). Any OCI
// image manifest, index or artifact and Docker schema 2 manifest or list is stored byte-exact;
// blz model manifests (config.mediaType application/vnd.blz.model.config.v1+json or artifactType
// application/vnd.blz.model.v1) are checked further and recorded as model versions.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "registry/errors.h"
#include "registry/hub/version_files.h"
#include "registry/oci_manifest.h"
#include "registry/ollama/ollama_handlers.h"
#include "registry/ollama/ollama_manifest.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {

namespace {

using json = nlohmann::json;
using internal::ArchiveStructuralHash;
using internal::Empty;
using internal::ParsePagination;

// The config and layer a blz manifest references (docs/registry-api.md).
struct ManifestRefs {
  std::string config_digest;
  uint64_t config_size = 0;
  std::string layer_digest;
  uint64_t layer_size = 0;
};

Status CheckBlzDescriptor(const OciDescriptor& d, std::string_view field,
                          std::string_view media_type) {
  if (d.media_type != media_type) {
    return InvalidArgument(std::string(field) + ".mediaType must be \"" +
                           std::string(media_type) + "\"");
  }
  if (!ParseDigest(d.digest).ok()) {
    return InvalidArgument(std::string(field) + ".digest must be \"sha256:<64 lower-case hex>\"");
  }
  return Status::Ok();
}

// What a blz model manifest must be beyond a valid OCI manifest: an OCI image manifest with the
// blz config and exactly one layer, the .blz archive, both addressed by sha256.
// Errors: kInvalidArgument (-> MANIFEST_INVALID).
Result<ManifestRefs> CheckBlzManifest(const OciManifest& m) {
  if (m.media_type != kOciManifestMediaType) {
    return InvalidArgument("unsupported manifest media type '" + m.media_type +
                           "' for a blz model: blz stores models as " + kOciManifestMediaType);
  }
  if (m.has_artifact_type_field && m.artifact_type != kBlzArtifactType) {
    return InvalidArgument(std::string("manifest artifactType must be \"") + kBlzArtifactType +
                           "\"");
  }
  BLZ_RETURN_IF_ERROR(CheckBlzDescriptor(*m.config, "config", kBlzConfigMediaType));
  if (m.layers.size() != 1) {
    return InvalidArgument("manifest must have exactly one layer (the .blz archive)");
  }
  BLZ_RETURN_IF_ERROR(CheckBlzDescriptor(m.layers[0], "layers[0]", kBlzArchiveMediaType));
  return ManifestRefs{m.config->digest, m.config->size, m.layers[0].digest, m.layers[0].size};
}

// Is this manifest a blz model version (checked by ParseBlzManifest, recorded as a version)?
bool IsBlzModelManifest(const OciManifest& m) {
  return (m.has_artifact_type_field && m.artifact_type == kBlzArtifactType) ||
         (m.config.has_value() && m.config->media_type == kBlzConfigMediaType);
}

// The digest of `body` with the algorithm of `like` ("sha256:..." or "sha512:...").
std::string DigestLike(std::string_view like, std::string_view body) {
  if (like.rfind("sha512:", 0) == 0) return "sha512:" + Sha512Hex(body);
  return MakeDigest(Sha256Hex(body));
}

}  // namespace

Response Registry::PutManifest(const Route& route, const Request& request) {
  const std::string& ref = route.ref;
  const bool by_digest = ref.find(':') != std::string::npos;
  if (by_digest && !IsValidOciDigest(ref)) {
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
  const std::optional<std::string> content_type = request.head.Get("Content-Type");
  Result<OciManifest> manifest = ParseOciManifest(body, content_type);
  if (!manifest.ok()) return ErrorResponse(manifest.status(), ErrorContext::kManifest);
  const std::string digest = by_digest ? DigestLike(ref, body) : MakeDigest(Sha256Hex(body));
  if (by_digest && digest != ref) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "manifest hashes to " + digest + ", not " + ref, json{{"digest", ref}});
  }
  // The locks of every blob the manifest references, held from their checks to the commit:
  // garbage collection cannot remove one in between (registry/garbage_collector.h).
  std::vector<std::string> referenced;
  if (manifest->config.has_value()) referenced.push_back(manifest->config->digest);
  for (const OciDescriptor& layer : manifest->layers) referenced.push_back(layer.digest);
  std::sort(referenced.begin(), referenced.end());  // one order: no deadlock between PUTs
  referenced.erase(std::unique(referenced.begin(), referenced.end()), referenced.end());
  std::vector<std::unique_ptr<KeyedMutex::Lock>> blob_locks;
  for (const std::string& d : referenced) {
    blob_locks.push_back(std::make_unique<KeyedMutex::Lock>(&blob_locks_, d));
  }
  store::ManifestPut put;
  put.repository = route.name;
  put.digest = digest;
  put.media_type = manifest->media_type;
  put.tag = by_digest ? "" : ref;
  put.artifact_type = manifest->artifact_type;
  put.annotations = manifest->annotations;
  if (manifest->subject.has_value()) put.subject_digest = manifest->subject->digest;
  if (IsBlzModelManifest(*manifest)) {
    Response error;
    if (!PrepareModelVersion(*manifest, &put, &error)) return error;
  } else if (Response error; !CheckReferences(route, *manifest, &put, &error)) {
    return error;
  }
  put.content = std::move(body);
  Status s = db_->PutManifest(put);
  if (s.code() == Code::kNotFound) {
    // A blob checked above was collected since (by another replica: the in-process blob locks
    // keep this one's collector away); nothing was stored.
    return ErrorResponse(OciError::kManifestBlobUnknown, s.message());
  }
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kManifest);
  if (!put.archive_digest.empty()) {
    // Record its files for the Hugging Face Hub API now, while the raw archive is at hand (a
    // first listing later could need it rebuilt from its full patch); a failure only defers it.
    (void)version_files_->List(put.archive_digest);
    storage_->Schedule(put.archive_digest);  // store it as a full patch, in the background
  }
  Response res = Empty(201);
  res.Set("Location", "/v2/" + route.name + "/manifests/" + digest);
  res.Set("Docker-Content-Digest", digest);
  if (!put.subject_digest.empty()) res.Set("OCI-Subject", put.subject_digest);
  return res;
}

bool Registry::CheckManifestBlob(const std::string& repository, const std::string& digest,
                                 uint64_t size, store::ManifestPut* put, Response* error) {
  Result<bool> linked = db_->BlobLinked(repository, digest);
  if (!linked.ok()) {
    *error = ErrorResponse(linked.status(), ErrorContext::kManifest);
    return false;
  }
  Result<store::BlobInfo> info =
      *linked ? storage_->Stat(digest) : Result<store::BlobInfo>(NotFound("not linked"));
  if (!info.ok()) {
    const Code code = info.status().code();
    *error = code == Code::kNotFound || code == Code::kInvalidArgument
                 ? ErrorResponse(OciError::kManifestBlobUnknown,
                                 "manifest references blob " + digest + ", which is not in '" +
                                     repository + "'",
                                 json{{"digest", digest}})
                 : ErrorResponse(info.status(), ErrorContext::kManifest);
    return false;
  }
  if (info->size != size) {
    *error = ErrorResponse(OciError::kManifestInvalid,
                           "manifest says blob " + digest + " has " + std::to_string(size) +
                               " bytes, but it has " + std::to_string(info->size),
                           json{{"digest", digest}});
    return false;
  }
  put->blobs.push_back(digest);
  return true;
}

bool Registry::CheckReferences(const Route& route, const OciManifest& manifest,
                               store::ManifestPut* put, Response* error) {
  if (manifest.config.has_value() &&
      !CheckManifestBlob(route.name, manifest.config->digest, manifest.config->size, put, error)) {
    return false;
  }
  for (const OciDescriptor& layer : manifest.layers) {
    if (IsNonDistributableLayer(layer.media_type)) {
      // A foreign layer is usually not pushed (clients fetch it from its urls): then the manifest
      // does not link it, and nothing that walks manifest blobs (garbage collection) sees it.
      // When it was pushed, it is checked and linked like any layer.
      Result<bool> linked = db_->BlobLinked(route.name, layer.digest);
      if (!linked.ok()) {
        *error = ErrorResponse(linked.status(), ErrorContext::kManifest);
        return false;
      }
      if (!*linked) continue;
    }
    if (!CheckManifestBlob(route.name, layer.digest, layer.size, put, error)) return false;
  }
  for (const OciDescriptor& child : manifest.manifests) {
    Result<store::ManifestRecord> m = db_->GetManifest(route.name, child.digest);
    if (!m.ok()) {
      *error = m.status().code() == Code::kNotFound
                   ? ErrorResponse(OciError::kManifestBlobUnknown,
                                   "index references manifest " + child.digest +
                                       ", which is not in '" + route.name + "'",
                                   json{{"digest", child.digest}})
                   : ErrorResponse(m.status(), ErrorContext::kManifest);
      return false;
    }
    if (m->content.size() != child.size) {
      *error = ErrorResponse(OciError::kManifestInvalid,
                             "index says manifest " + child.digest + " has " +
                                 std::to_string(child.size) + " bytes, but it has " +
                                 std::to_string(m->content.size()),
                             json{{"digest", child.digest}});
      return false;
    }
  }
  return true;
}

bool Registry::PrepareModelVersion(const OciManifest& manifest, store::ManifestPut* put,
                                   Response* error) {
  Result<ManifestRefs> refs = CheckBlzManifest(manifest);
  if (!refs.ok()) {
    *error = ErrorResponse(refs.status(), ErrorContext::kManifest);
    return false;
  }
  if (!CheckManifestBlob(put->repository, refs->config_digest, refs->config_size, put, error) ||
      !CheckManifestBlob(put->repository, refs->layer_digest, refs->layer_size, put, error)) {
    return false;
  }
  // Every version records its structure; an archive blz cannot identify is not a version.
  Result<std::string> structural_hash = NotFound("archive blob missing");
  if (Result<store::BlobInfo> layer = storage_->File(refs->layer_digest); layer.ok()) {
    structural_hash = ArchiveStructuralHash(layer->path, refs->layer_digest);
  }
  if (!structural_hash.ok()) {
    const Status& e = structural_hash.status();
    if (e.code() == Code::kIOError || e.code() == Code::kInternal || e.code() == Code::kNotFound) {
      *error = ErrorResponse(OciError::kUnknown,
                             "identifying the archive failed: " + e.ToString(),
                             json{{"digest", refs->layer_digest}});
    } else {
      *error = ErrorResponse(OciError::kManifestInvalid,
                             "layers[0] " + refs->layer_digest +
                                 " is not a model archive whose structure blz can identify: " +
                                 e.ToString(),
                             json{{"digest", refs->layer_digest}});
    }
    return false;
  }
  // The archive's data must pass `blz verify` (every tensor's xxh3-64 and SHA-256, every file's
  // SHA-256) before the version exists: a corrupt archive can be neither stored as a full patch
  // nor patched, and clients would receive it. Checked once per archive (remembered).
  if (Status v = storage_->VerifyArchive(refs->layer_digest); !v.ok()) {
    if (v.code() == Code::kIOError || v.code() == Code::kInternal ||
        v.code() == Code::kNotFound || v.code() == Code::kUnavailable) {
      *error = ErrorResponse(OciError::kUnknown, "verifying the archive failed: " + v.ToString(),
                             json{{"digest", refs->layer_digest}});
    } else {
      *error = ErrorResponse(OciError::kManifestInvalid,
                             "layers[0] " + refs->layer_digest +
                                 " fails verification, nothing was stored: " + v.ToString(),
                             json{{"digest", refs->layer_digest}});
    }
    return false;
  }
  put->media_type = kOciManifestMediaType;
  put->archive_digest = refs->layer_digest;
  put->archive_size = refs->layer_size;
  put->structural_hash = std::move(*structural_hash);
  return true;
}

ollama::Context Registry::OllamaContext() {
  return ollama::Context{db_.get(), version_files_.get(), ollama_views_.get()};
}

Response Registry::GetManifest(const Route& route, const RequestHead& head) {
  const std::string& ref = route.ref;
  std::string digest;
  if (ref.find(':') != std::string::npos) {
    if (!IsValidOciDigest(ref)) {
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
      // A repository that does not exist is not a missing tag (NAME_UNKNOWN, as for tags/list).
      if (d.status().code() == Code::kNotFound) {
        if (Result<bool> exists = db_->RepositoryExists(route.name); exists.ok() && !*exists) {
          return ErrorResponse(OciError::kNameUnknown, "no repository '" + route.name + "'",
                               json{{"name", route.name}});
        }
      }
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
  // Ollama's pull (Accept: the Docker schema 2 type only) of a blz version: its GGUF as a Docker
  // manifest (registry/ollama/ollama_handlers.h); any other client gets the stored bytes.
  if (ollama::WantsOllamaManifest(head.Get("Accept"))) {
    if (std::optional<Response> r = ollama::ServeManifest(OllamaContext(), route.name, ref, *m)) {
      return std::move(*r);
    }
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
    if (page.status().code() == Code::kNotFound) {
      return ErrorResponse(OciError::kNameUnknown, "no repository '" + route.name + "'",
                           json{{"name", route.name}});
    }
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

Response Registry::DeleteManifest(const Route& route) {
  const std::string& ref = route.ref;
  if (!options_.allow_delete) {
    return ErrorResponse(OciError::kUnsupported, "deletes are disabled on this registry");
  }
  if (ref.find(':') == std::string::npos) {  // a tag: only the tag goes
    if (!IsValidTag(ref)) {
      return ErrorResponse(OciError::kManifestUnknown, "invalid tag '" + ref + "'",
                           json{{"tag", ref}});
    }
    Result<bool> deleted = db_->DeleteTag(route.name, ref);
    if (!deleted.ok()) return ErrorResponse(deleted.status(), ErrorContext::kManifest);
    if (!*deleted) {
      return ErrorResponse(OciError::kManifestUnknown,
                           "tag '" + ref + "' is not in repository '" + route.name + "'",
                           json{{"tag", ref}});
    }
    return Empty(202);
  }
  if (!IsValidOciDigest(ref)) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid manifest digest '" + ref + "'",
                         json{{"digest", ref}});
  }
  Result<store::ManifestDeletion> deleted = db_->DeleteManifest(route.name, ref);
  if (!deleted.ok()) {
    return ErrorResponse(OciErrorFor(deleted.status(), ErrorContext::kManifest),
                         deleted.status().message(), json{{"digest", ref}});
  }
  return Empty(202);
}

Response Registry::ListReferrers(const Route& route) {
  if (!IsValidOciDigest(route.ref)) {
    return ErrorResponse(OciError::kDigestInvalid, "invalid digest '" + route.ref + "'",
                         json{{"digest", route.ref}});
  }
  Result<std::vector<store::ReferrerRecord>> referrers =
      db_->ListReferrers(route.name, route.ref);
  if (!referrers.ok()) return ErrorResponse(referrers.status(), ErrorContext::kManifest);
  const std::optional<std::string> filter = route.Query("artifactType");
  json manifests = json::array();
  for (const store::ReferrerRecord& r : *referrers) {
    if (filter.has_value() && r.artifact_type != *filter) continue;
    json d = {{"mediaType", r.media_type}, {"digest", r.digest}, {"size", r.size}};
    if (!r.artifact_type.empty()) d["artifactType"] = r.artifact_type;
    if (!r.annotations.empty()) {
      // Stored by PutManifest from a parsed object: parses back.
      d["annotations"] = json::parse(r.annotations, nullptr, /*allow_exceptions=*/false);
    }
    manifests.push_back(std::move(d));
  }
  Response res;
  res.body = json{{"schemaVersion", 2}, {"mediaType", kOciIndexMediaType},
                  {"manifests", std::move(manifests)}}
                 .dump();
  res.Set("Content-Type", kOciIndexMediaType);
  if (filter.has_value()) res.Set("OCI-Filters-Applied", "artifactType");
  return res;
}

}  // namespace blz::registry
