#include "registry/oci_manifest.h"

#include <utility>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/json_strict.h"
#include "registry/registry.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;

Status ParseDescriptor(const json& d, const std::string& field, OciDescriptor* out) {
  if (!d.is_object()) return InvalidArgument(field + " must be an object");
  auto mt = d.find("mediaType");
  if (mt == d.end() || !mt->is_string() || mt->get<std::string>().empty()) {
    return InvalidArgument(field + ".mediaType must be a non-empty string");
  }
  auto dg = d.find("digest");
  if (dg == d.end() || !dg->is_string() || !IsValidOciDigest(dg->get<std::string>())) {
    return InvalidArgument(field +
                           ".digest must be \"sha256:<64 hex>\" or \"sha512:<128 hex>\"");
  }
  auto sz = d.find("size");
  if (sz == d.end() || !sz->is_number_unsigned()) {
    return InvalidArgument(field + ".size must be a non-negative integer");
  }
  out->media_type = mt->get<std::string>();
  out->digest = dg->get<std::string>();
  out->size = sz->get<uint64_t>();
  return Status::Ok();
}

Status ParseDescriptorArray(const json& m, const char* key, std::vector<OciDescriptor>* out) {
  auto it = m.find(key);
  if (it == m.end() || !it->is_array()) {
    return InvalidArgument(std::string("manifest must have a '") + key + "' array");
  }
  out->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    OciDescriptor d;
    BLZ_RETURN_IF_ERROR(
        ParseDescriptor((*it)[i], std::string(key) + "[" + std::to_string(i) + "]", &d));
    out->push_back(std::move(d));
  }
  return Status::Ok();
}

}  // namespace

bool IsNonDistributableLayer(std::string_view media_type) {
  return media_type == "application/vnd.oci.image.layer.nondistributable.v1.tar" ||
         media_type == "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip" ||
         media_type == "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" ||
         media_type == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
}

std::string MediaTypeOf(std::string_view content_type) {
  std::string_view t = content_type.substr(0, content_type.find(';'));
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  return std::string(t);
}

Result<OciManifest> ParseOciManifest(std::string_view body,
                                     const std::optional<std::string>& content_type) {
  Result<json> parsed = formats::ParseJsonStrict(body, "manifest", 0);
  if (!parsed.ok()) return InvalidArgument(parsed.status().message());
  const json m = std::move(parsed).value();
  if (!m.is_object()) return InvalidArgument("manifest must be a JSON object");
  auto sv = m.find("schemaVersion");
  if (sv == m.end() || !sv->is_number_integer() || sv->get<int64_t>() != 2) {
    return InvalidArgument("manifest schemaVersion must be 2");
  }
  OciManifest out;
  auto mt = m.find("mediaType");
  if (mt != m.end()) {
    if (!mt->is_string()) return InvalidArgument("manifest mediaType must be a string");
    out.media_type = mt->get<std::string>();
  }
  const std::string ct = content_type.has_value() ? MediaTypeOf(*content_type) : std::string();
  if (!ct.empty()) {
    if (!out.media_type.empty() && ct != out.media_type) {
      return InvalidArgument("Content-Type '" + ct + "' does not match the manifest mediaType '" +
                             out.media_type + "'");
    }
    if (out.media_type.empty()) out.media_type = ct;
  }
  if (out.media_type.empty()) {  // neither: what the fields say
    out.media_type = m.contains("manifests") ? kOciIndexMediaType : kOciManifestMediaType;
  }
  if (out.media_type == kOciManifestMediaType || out.media_type == kDockerManifestMediaType) {
    out.kind = OciManifest::Kind::kImage;
  } else if (out.media_type == kOciIndexMediaType ||
             out.media_type == kDockerManifestListMediaType) {
    out.kind = OciManifest::Kind::kIndex;
  } else {
    return InvalidArgument("unsupported manifest media type '" + out.media_type +
                           "': blz stores " + kOciManifestMediaType + ", " + kOciIndexMediaType +
                           ", " + kDockerManifestMediaType + " and " +
                           kDockerManifestListMediaType);
  }
  if (out.kind == OciManifest::Kind::kImage) {
    auto config = m.find("config");
    if (config == m.end()) return InvalidArgument("image manifest has no config");
    OciDescriptor c;
    BLZ_RETURN_IF_ERROR(ParseDescriptor(*config, "config", &c));
    out.config = std::move(c);
    BLZ_RETURN_IF_ERROR(ParseDescriptorArray(m, "layers", &out.layers));
  } else {
    BLZ_RETURN_IF_ERROR(ParseDescriptorArray(m, "manifests", &out.manifests));
  }
  if (auto subject = m.find("subject"); subject != m.end()) {
    OciDescriptor s;
    BLZ_RETURN_IF_ERROR(ParseDescriptor(*subject, "subject", &s));
    out.subject = std::move(s);
  }
  if (auto at = m.find("artifactType"); at != m.end()) {
    if (!at->is_string()) return InvalidArgument("manifest artifactType must be a string");
    out.artifact_type = at->get<std::string>();
    out.has_artifact_type_field = true;
  } else if (out.config.has_value()) {
    out.artifact_type = out.config->media_type;
  }
  if (auto an = m.find("annotations"); an != m.end()) {
    if (!an->is_object()) return InvalidArgument("manifest annotations must be an object");
    for (const auto& [key, value] : an->items()) {
      if (!value.is_string()) {
        return InvalidArgument("manifest annotation '" + key + "' must be a string");
      }
    }
    out.annotations = an->dump();
  }
  return out;
}

}  // namespace blz::registry
