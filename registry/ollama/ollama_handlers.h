// Ollama pulls of GGUF versions (docs/ollama.md): the manifest view and the blobs it names.
//
//   GET|HEAD /v2/<namespace>/<model>/manifests/<tag or digest>
//     with Accept: application/vnd.docker.distribution.manifest.v2+json (WantsOllamaManifest),
//     of a blz model version holding exactly one *.gguf file: 200 with the Docker schema 2
//     manifest of registry/ollama/ollama_manifest.h (Content-Type the Docker type,
//     Docker-Content-Digest its SHA-256). A blz version with no or several GGUF files: 406
//     UNSUPPORTED naming the version's files. Any other stored manifest (not a blz version): not
//     handled here (served as stored).
//   GET|HEAD /v2/<namespace>/<model>/blobs/<digest>, for a digest that is not a blob of the
//     repository: the GGUF file (its SHA-256) or the generated config of one of the repository's
//     versions, with Range (206 / 416) as any blob. The GGUF bytes are read straight from the
//     archive's pieces (registry/hub/version_files.h), streamed, never buffered.
//
// Authorization is the route's (pull on the repository, registry/auth.h): everything served is
// a file of a version of that repository.
//
// Views depend only on the archive's bytes, so they are cached in-process by archive digest
// (ViewCache); every replica computes the same bytes and digests.
#ifndef BLZ_REGISTRY_OLLAMA_OLLAMA_HANDLERS_H_
#define BLZ_REGISTRY_OLLAMA_OLLAMA_HANDLERS_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "core/status.h"
#include "registry/http_message.h"
#include "store/metadata_db.h"

namespace blz::registry::hub {
class VersionFiles;  // registry/hub/version_files.h
}  // namespace blz::registry::hub

namespace blz::registry::ollama {

// What Ollama sees of one version.
struct OllamaView {
  std::string archive_digest;
  std::string gguf_path;  // the GGUF file's path in the version
  uint64_t gguf_size = 0;
  std::string gguf_digest;  // "sha256:<hex>" of the GGUF file
  std::string config;       // ConfigJson
  std::string config_digest;
  std::string manifest;     // ManifestJson
  std::string manifest_digest;
};

// Views (or the reason a version has none) by archive digest, least recently used out.
class ViewCache {
 public:
  static constexpr size_t kEntries = 256;
  using Entry = std::shared_ptr<const Result<OllamaView>>;
  Entry Get(const std::string& archive_digest);
  void Put(const std::string& archive_digest, Entry entry);

 private:
  std::mutex mu_;
  std::list<std::pair<std::string, Entry>> entries_;  // most recent first
};

// What the handlers use; all pointers must outlive the call.
struct Context {
  store::MetadataDb* db = nullptr;
  hub::VersionFiles* files = nullptr;
  ViewCache* cache = nullptr;
};

// The view of the archive `archive_digest` (cached). Errors: kUnsupported (the version holds no
// or several *.gguf files; the message names them and says what Ollama can pull), those of
// VersionFiles::List / Read and of ReadGgufModelInfo (a GGUF whose header blz cannot read).
Result<OllamaView> ViewOf(const Context& ctx, const std::string& archive_digest);

// The Ollama manifest of `record` (manifest `record_digest` of `repository`, asked for as
// `reference`), or nullopt when it is not a blz model version (then it is served as stored).
std::optional<Response> ServeManifest(const Context& ctx, const std::string& repository,
                                      const std::string& reference,
                                      const store::ManifestRecord& record);

// A blob GET/HEAD of `digest`, which is not a blob of `repository`: the GGUF file or config of
// one of its versions, or nullopt when it is neither (then BLOB_UNKNOWN as before).
std::optional<Response> ServeBlob(const Context& ctx, const std::string& repository,
                                  const std::string& digest, const RequestHead& head);

}  // namespace blz::registry::ollama

#endif  // BLZ_REGISTRY_OLLAMA_OLLAMA_HANDLERS_H_
