// What Ollama's pull sees of a blz model version holding one GGUF file (docs/ollama.md): a Docker
// schema 2 manifest whose one layer, of media type application/vnd.ollama.image.model, is the
// GGUF file itself (its own SHA-256 and size), and a config blob shaped as Ollama's own
// (types/model ConfigV2). Pure functions: no I/O; registry/ollama/ollama_handlers.h serves them.
//
// Followed source (ollama/ollama, as stored by the code search; see docs/ollama.md):
//   server/images.go    @ 5dbb81b72c4b  pullModelManifest (Accept header), PullModel (layers then
//                                        config, downloadBlob each, verifyBlob = SHA-256),
//                                        makeRequestWithRetry / parseRegistryChallenge (401)
//   server/download.go  @ 01ca4ec3b61e  Prepare (HEAD -> Content-Length, 100 MB..1000 MB parts),
//                                        run (a GET for the direct URL, then Range GETs
//                                        "bytes=<start>-<end>" per part)
//   server/create.go (createConfigLayer; model_format / family / type / file_type from the GGUF)
//   types/model/config.go @ 8852220f59c1 (ConfigV2, RootFS), types/model/name.go @ 5c0caaff8698
#ifndef BLZ_REGISTRY_OLLAMA_OLLAMA_MANIFEST_H_
#define BLZ_REGISTRY_OLLAMA_OLLAMA_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/bytes.h"
#include "core/status.h"

namespace blz::registry::ollama {

inline constexpr char kDockerManifestMediaType[] =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr char kDockerConfigMediaType[] = "application/vnd.docker.container.image.v1+json";
inline constexpr char kOllamaModelMediaType[] = "application/vnd.ollama.image.model";

// Does a manifest GET with this Accept header want the Ollama view? Yes when the header lists
// the Docker schema 2 manifest type and not the OCI image manifest type: Ollama sends exactly
// "application/vnd.docker.distribution.manifest.v2+json"; OCI clients (and docker, which lists
// both) keep getting the stored blz manifest. Media types compare case-insensitively, parameters
// (";q=...") are ignored.
bool WantsOllamaManifest(const std::optional<std::string>& accept);

// What the config blob says about the model, read from the GGUF header as Ollama's create does.
struct GgufModelInfo {
  std::string architecture;  // general.architecture ("" when absent)
  std::string parameters;    // HumanNumber(general.parameter_count, else the tensors' elements)
  std::string file_type;     // FileTypeName(general.file_type), "unknown" when absent
};

// Reads GgufModelInfo from the first bytes of a GGUF file (`prefix` must hold at least its whole
// header, up to the end of the tensor infos; more is ignored). Errors: those of
// formats::ParseGguf (kCorruption for a truncated or bad header, kTooLarge, kUnsupported),
// naming `source`.
Result<GgufModelInfo> ReadGgufModelInfo(ByteSpan prefix, std::string_view source);

// Ollama's format.HumanNumber: 7000000000 -> "7B", 1500000000 -> "1.5B", 102714 -> "103K",
// 999 -> "999".
std::string HumanNumber(uint64_t n);

// llama.cpp's file type names for general.file_type (0 "F32", 1 "F16", 2 "Q4_0", ..., 15
// "Q4_K_M", 32 "BF16"), "unknown" for others.
std::string FileTypeName(uint32_t file_type);

// The config blob: ConfigV2 as Go's json.Encoder writes it (fields in struct order, omitempty
// ones left out, a trailing newline): model_format "gguf", model_family and model_families from
// the architecture, model_type, file_type, architecture "amd64", os "linux", rootfs {"type":
// "layers", "diff_ids": [gguf_digest]}. Deterministic: the same inputs give the same bytes.
std::string ConfigJson(const GgufModelInfo& info, std::string_view gguf_digest);

// The Docker schema 2 manifest: config (kDockerConfigMediaType) and one layer
// (kOllamaModelMediaType, the GGUF file). Deterministic.
std::string ManifestJson(std::string_view config_digest, uint64_t config_size,
                         std::string_view gguf_digest, uint64_t gguf_size);

}  // namespace blz::registry::ollama

#endif  // BLZ_REGISTRY_OLLAMA_OLLAMA_MANIFEST_H_
