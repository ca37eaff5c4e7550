#include "client/manifest.h"

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/json_strict.h"

namespace blz::client {
namespace {

using ordered_json = nlohmann::ordered_json;

Status Bad(std::string_view what) {
  return Corruption("manifest: " + std::string(what));
}

// Reads a descriptor's digest and size.
Status ReadDescriptor(const nlohmann::json& d, std::string_view where, std::string* digest,
                      uint64_t* size) {
  if (!d.is_object()) return Bad(std::string(where) + " is not an object");
  auto dg = d.find("digest");
  if (dg == d.end() || !dg->is_string()) return Bad(std::string(where) + ".digest is missing");
  *digest = dg->get<std::string>();
  if (!ParseDigest(*digest).ok()) {
    return Bad(std::string(where) + ".digest '" + *digest + "' is not sha256:<64 hex>");
  }
  auto sz = d.find("size");
  if (sz == d.end() || !sz->is_number_unsigned()) {
    return Bad(std::string(where) + ".size is missing or not a non-negative integer");
  }
  *size = sz->get<uint64_t>();
  return Status::Ok();
}

}  // namespace

std::string BuildConfigJson(const ModelConfig& config) {
  ordered_json j;
  j["archive_digest"] = config.archive_digest;
  j["archive_size"] = config.archive_size;
  j["files"] = config.files;
  j["tensors"] = config.tensors;
  j["tensor_bytes"] = config.tensor_bytes;
  return j.dump();
}

std::string BuildManifestJson(const ModelManifest& m) {
  ordered_json config;
  config["mediaType"] = kConfigMediaType;
  config["digest"] = m.config_digest;
  config["size"] = m.config_size;
  ordered_json layer;
  layer["mediaType"] = kArchiveMediaType;
  layer["digest"] = m.archive_digest;
  layer["size"] = m.archive_size;
  layer["annotations"] = ordered_json{{"org.opencontainers.image.title", m.title}};
  ordered_json j;
  j["schemaVersion"] = 2;
  j["mediaType"] = kManifestMediaType;
  j["artifactType"] = kModelArtifactType;
  j["config"] = std::move(config);
  j["layers"] = ordered_json::array({std::move(layer)});
  return j.dump();
}

Result<ModelManifest> ParseManifest(std::string_view json) {
  if (json.size() > kMaxManifestBytes) return TooLarge("manifest larger than 4 MiB");
  // Strict: valid UTF-8, no NUL (nlohmann would stop reading there), no duplicate keys.
  Result<nlohmann::json> parsed = formats::ParseJsonStrict(json, "JSON", 0);
  if (!parsed.ok()) return Bad(parsed.status().message());
  nlohmann::json doc = std::move(parsed).value();
  if (!doc.is_object()) return Bad("not a JSON object");
  auto sv = doc.find("schemaVersion");
  if (sv == doc.end() || !sv->is_number_integer() || sv->get<int64_t>() != 2) {
    return Bad("schemaVersion is not 2");
  }
  auto mt = doc.find("mediaType");
  if (mt != doc.end() && (!mt->is_string() || mt->get<std::string>() != kManifestMediaType)) {
    return Unsupported("manifest: mediaType '" + (mt->is_string() ? mt->get<std::string>() : "") +
                       "' is not an OCI image manifest");
  }
  auto at = doc.find("artifactType");
  if (at != doc.end() && (!at->is_string() || at->get<std::string>() != kModelArtifactType)) {
    return Unsupported("manifest: artifactType is not " + std::string(kModelArtifactType) +
                       ": not a blz model");
  }
  ModelManifest m;
  auto config = doc.find("config");
  if (config == doc.end()) return Bad("config is missing");
  BLZ_RETURN_IF_ERROR(ReadDescriptor(*config, "config", &m.config_digest, &m.config_size));
  auto layers = doc.find("layers");
  if (layers == doc.end() || !layers->is_array()) return Bad("layers is missing");
  if (layers->size() != 1) {
    return Bad("expected exactly one layer, found " + std::to_string(layers->size()));
  }
  const nlohmann::json& layer = (*layers)[0];
  BLZ_RETURN_IF_ERROR(ReadDescriptor(layer, "layers[0]", &m.archive_digest, &m.archive_size));
  auto lmt = layer.find("mediaType");
  if (lmt == layer.end() || !lmt->is_string() || lmt->get<std::string>() != kArchiveMediaType) {
    return Unsupported("manifest: layers[0].mediaType is not " + std::string(kArchiveMediaType) +
                       ": not a blz model");
  }
  auto ann = layer.find("annotations");
  if (ann != layer.end() && ann->is_object()) {
    auto title = ann->find("org.opencontainers.image.title");
    if (title != ann->end() && title->is_string()) m.title = title->get<std::string>();
  }
  return m;
}

}  // namespace blz::client
