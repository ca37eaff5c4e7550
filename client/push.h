// `blz push DIR|M.blz HOST:PORT/NAME:TAG`: uploads a model version to a registry.
//
// A directory (or a single .safetensors file) is first packed to a temporary archive in the
// local store's staging area (formats::Pack); a .blz archive is pushed as is, after
// BlzArchive::Verify(). The config blob and the manifest are built exactly as
// docs/registry-api.md specifies. Each blob is HEADed first and uploaded (POST, then PUT
// ?digest=, streamed from the file) only when the registry lacks it; the manifest is PUT by
// tag last, so a tag never points at missing blobs.
#ifndef BLZ_CLIENT_PUSH_H_
#define BLZ_CLIENT_PUSH_H_

#include <cstdint>
#include <optional>
#include <string>

#include "client/http_client.h"
#include "client/progress.h"
#include "core/status.h"

namespace blz::client {

struct PushOptions {
  std::string cache_dir;  // local store (staging for packing); "" = from the environment
  ProgressMode progress = ProgressMode::kOff;  // progress on stderr (client/progress.h)
  HttpClientOptions http;
  std::optional<std::string> token;  // nullopt = ResolveToken() (BLZ_TOKEN, then auth file)
};

struct PushResult {
  std::string reference;        // canonical "host:port/name:tag"
  std::string manifest_digest;  // "sha256:..." of the manifest as pushed
  std::string archive_digest;   // the model version
  uint64_t archive_size = 0;
  std::string config_digest;
  uint64_t bytes_uploaded = 0;  // blob bytes actually sent
  uint64_t total_bytes = 0;     // archive + config sizes
  int blobs_uploaded = 0;
  int blobs_skipped = 0;        // already in the registry
  bool packed = false;          // the input was packed first
};

// Errors: kInvalidArgument (bad reference, a digest reference), kNotFound (input), the
// packing / archive errors of formats, and the registry's (see registry_client.h).
Result<PushResult> Push(const std::string& input, const std::string& reference,
                        const PushOptions& options);

}  // namespace blz::client

#endif  // BLZ_CLIENT_PUSH_H_
