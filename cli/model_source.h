// Models named on the command line of `blz inspect` and `blz diff`: a path that exists locally
// is a file (or directory); otherwise a text that parses as a registry reference
// (client/reference.h) is fetched from the registry with the client code of `blz pull`: the
// token of `blz login` or $BLZ_TOKEN, --ca-cert / $BLZ_CA_BUNDLE, --insecure, --plain-http.
#ifndef BLZ_CLI_MODEL_SOURCE_H_
#define BLZ_CLI_MODEL_SOURCE_H_

#include <string>

#include "cli/commands.h"
#include "client/progress.h"
#include "core/status.h"

namespace blz::cli {

struct ModelSourceArgs {
  RegistryConnectionArgs conn;
  std::string cache;  // --cache: the local store ("" = from the environment, as pull)
};

// Registers --ca-cert, --insecure, --plain-http and --cache on `sub`.
void AddModelSourceOptions(CLI::App* sub, ModelSourceArgs* args);

// True when `text` is not an existing path and parses as a reference with a scheme, a registry
// host, a tag or a digest ("org/model:v1" on $BLZ_REGISTRY counts; "dir/missing.safetensors"
// does not, so a missing file is still reported as "no such file").
bool IsModelReference(const std::string& text, const RegistryConnectionArgs& conn);

// `blz pull` of reference `text` into the local store (a held version costs nothing, others
// come as patches when the store holds a base); returns the archive's path in the store.
// Fallback notes go to stderr, as do one "pulled ..." line when something was downloaded.
// Errors: those of client::Pull.
Result<std::string> PullModelSource(const std::string& text, const ModelSourceArgs& args,
                                    client::ProgressMode progress);

// What `blz inspect REF` needs, fetching the least: the manifest, then, unless the store
// already holds the archive (its path is returned), the archive's prefix (magic and JSON
// header) and each safetensors / GGUF file's stored header piece, by HTTP Range requests,
// written at their offsets into a sparse file of the archive's size inside `tmp` (created in
// the system temp directory) whose tensor bytes are holes. That file passes BlzArchive::Open
// and formats::Describe (which never read tensor data), not Verify. `*archive_digest` is set
// to the archive's digest. Errors: the registry's (as pull), kCorruption for a malformed
// prefix, kIOError.
Result<std::string> FetchArchiveHeaders(const std::string& text, const ModelSourceArgs& args,
                                        ScopedTempDir* tmp, std::string* archive_digest);

}  // namespace blz::cli

#endif  // BLZ_CLI_MODEL_SOURCE_H_
