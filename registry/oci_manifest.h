// OCI manifests as the registry stores them: image manifests, image indexes, artifact manifests
// and Docker schema 2 manifests and manifest lists (OCI image-spec v1.1 manifest.md and
// image-index.md; OCI distribution-spec v1.1 "Pushing Manifests"). The registry keeps their
// bytes as pushed; this parser only extracts what the registry must check and index:
//  - the descriptors the manifest references (config and layers: blobs that must be in the
//    repository; manifests of an index: manifests that must be in the repository),
//  - its subject (referrers API), artifact type and annotations.
// Unknown fields are ignored, as the spec requires. Validation is what the spec requires of a
// registry and nothing blz-specific: blz model manifests are checked further by the manifest
// handler (registry/manifest_handlers.cc).
#ifndef BLZ_REGISTRY_OCI_MANIFEST_H_
#define BLZ_REGISTRY_OCI_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/digest.h"  // IsValidOciDigest
#include "core/status.h"

namespace blz::registry {

inline constexpr char kOciIndexMediaType[] = "application/vnd.oci.image.index.v1+json";
inline constexpr char kDockerManifestMediaType[] =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr char kDockerManifestListMediaType[] =
    "application/vnd.docker.distribution.manifest.list.v2+json";

// A content descriptor (image-spec descriptor.md): the fields the registry uses.
struct OciDescriptor {
  std::string media_type;
  std::string digest;  // "<algorithm>:<hex>", checked by IsValidOciDigest
  uint64_t size = 0;
};

struct OciManifest {
  enum class Kind : uint8_t { kImage, kIndex };
  Kind kind = Kind::kImage;
  // The manifest's media type: its `mediaType` field, else the request's Content-Type, else
  // inferred from the fields (config -> OCI image manifest, manifests -> OCI index).
  std::string media_type;
  std::optional<OciDescriptor> config;  // kImage only (required there)
  std::vector<OciDescriptor> layers;    // kImage (may be empty)
  std::vector<OciDescriptor> manifests; // kIndex
  std::optional<OciDescriptor> subject;
  // `artifactType`, else (image manifests) config.mediaType: what the referrers API reports.
  std::string artifact_type;
  std::string annotations;  // `annotations` re-serialized as compact JSON; "" = none
  bool has_artifact_type_field = false;  // `artifactType` was present
};

// Is `media_type` a non-distributable ("foreign") layer: application/vnd.oci.image.layer.
// nondistributable.v1.tar, +gzip, +zstd (image-spec layer.md) or Docker's
// application/vnd.docker.image.rootfs.foreign.diff.tar.gzip? Such layers are fetched from their
// descriptor's `urls`, are never uploaded, and a registry may accept a manifest without them
// (distribution-spec "Pushing Manifests").
bool IsNonDistributableLayer(std::string_view media_type);

// The media type part of a Content-Type header value ("type/subtype", parameters and spaces
// removed).
std::string MediaTypeOf(std::string_view content_type);

// Parses and checks a manifest body. `content_type` is the request's Content-Type, if any.
// Checks: strict JSON (formats/json_strict.h: UTF-8, no NUL, no duplicate keys), an object with
// schemaVersion 2; `mediaType`, when present, a string equal to the Content-Type's media type
// (when that is given); a supported media type (OCI image manifest or index, Docker schema 2
// manifest or list); descriptors with a string mediaType, a valid digest and a non-negative
// integer size; an image manifest has a config and a layers array; an index has a manifests
// array; `subject` (optional) is a descriptor; `artifactType` a string; `annotations` an object
// of strings. Errors: kInvalidArgument (-> MANIFEST_INVALID) naming the field.
Result<OciManifest> ParseOciManifest(std::string_view body,
                                     const std::optional<std::string>& content_type);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_OCI_MANIFEST_H_
