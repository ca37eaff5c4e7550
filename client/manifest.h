// The OCI manifest and config blob of a blz model version, exactly as docs/registry-api.md
// specifies them ("A model version as an OCI artifact").
#ifndef BLZ_CLIENT_MANIFEST_H_
#define BLZ_CLIENT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace blz::client {

inline constexpr std::string_view kManifestMediaType =
    "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kModelArtifactType = "application/vnd.blz.model.v1";
inline constexpr std::string_view kConfigMediaType = "application/vnd.blz.model.config.v1+json";
inline constexpr std::string_view kArchiveMediaType = "application/vnd.blz.archive.v1";
inline constexpr std::string_view kPatchMediaType = "application/vnd.blz.patch.v1";
inline constexpr uint64_t kMaxManifestBytes = 4ull << 20;

// What the config blob summarizes.
struct ModelConfig {
  std::string archive_digest;  // "sha256:<hex>"
  uint64_t archive_size = 0;
  uint64_t files = 0;
  uint64_t tensors = 0;
  uint64_t tensor_bytes = 0;
};

// {"archive_digest":"sha256:…","archive_size":N,"files":N,"tensors":N,"tensor_bytes":N}
// (compact, keys in that order).
std::string BuildConfigJson(const ModelConfig& config);

struct ModelManifest {
  std::string config_digest;
  uint64_t config_size = 0;
  std::string archive_digest;
  uint64_t archive_size = 0;
  std::string title = "model.blz";  // the layer's org.opencontainers.image.title
};

// The manifest JSON (compact, keys in the documented order).
std::string BuildManifestJson(const ModelManifest& manifest);

// Parses and checks a manifest: schemaVersion 2, the OCI image manifest media type (when
// present), a config descriptor, exactly one layer of media type application/vnd.blz.archive.v1,
// valid sha256 digests and sizes. Errors: kCorruption (not JSON / wrong shape), kUnsupported
// (a manifest of some other artifact, e.g. a container image), each naming the field.
Result<ModelManifest> ParseManifest(std::string_view json);

}  // namespace blz::client

#endif  // BLZ_CLIENT_MANIFEST_H_
