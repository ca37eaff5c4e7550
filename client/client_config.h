// The client's settings file (beside auth.json, client/auth.h):
//   $BLZ_CONFIG_DIR/client.json, else $XDG_CONFIG_HOME/blz/client.json, else
//   $HOME/.config/blz/client.json.
//
//   {"cache": {"budget": "10GiB", "half_life": "7d"}}
//
// cache.budget     automatic budget of the local store: after every successful pull the store
//                  is pruned to it by utility (client/cache_prune.h PlanBudgetPrune), never
//                  evicting the version just pulled nor the base it was patched from. A size
//                  (ParseByteSize) or a number of bytes; absent or 0 = no automatic prune.
// cache.half_life  half-life of the decayed use frequency (ParseDuration); default 7d.
// A missing file means the defaults. Unknown keys are ignored (for newer clients).
//
// Registries remembered by `blz login` (docs/client.md, "Registries: scheme and CA"):
//   client.json  {"registries": {"HOST:PORT": {"scheme": "https"}}}   the scheme to speak
//   <config dir>/certs.d/HOST:PORT/ca.crt                            the CA bundle to trust
// where <config dir> is the directory of client.json (and of auth.json) and HOST:PORT is
// RegistryAddress::ToString() (the key of auth.json). As in docker, a registry on port 443 may
// have its CA at certs.d/HOST/ca.crt instead.
#ifndef BLZ_CLIENT_CLIENT_CONFIG_H_
#define BLZ_CLIENT_CLIENT_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace blz::client {

inline constexpr int64_t kDefaultHalfLifeSeconds = 7 * 86400;
inline constexpr uint64_t kMaxClientConfigBytes = 1 << 20;

// A small JSON file holding one object (client.json, auth.json): an absent file is {}.
// Errors: kCorruption (not a JSON object, naming the file), kInvalidArgument/kIOError from
// reading (over max_bytes, unreadable).
Result<nlohmann::json> ReadJsonObjectFile(const std::string& path, uint64_t max_bytes);

struct ClientConfig {
  std::string path;        // the file read ("" when none could be located)
  uint64_t budget = 0;     // bytes; 0 = no automatic prune
  int64_t half_life = kDefaultHalfLifeSeconds;  // seconds, > 0
};

// The settings file path from the environment (see above). kNotFound when neither
// BLZ_CONFIG_DIR, XDG_CONFIG_HOME nor HOME is set.
Result<std::string> ClientConfigPath();

// Reads `path`; a missing file gives the defaults. Errors: kCorruption (not JSON, or a key of
// the wrong type or value, the message names the key), kIOError.
Result<ClientConfig> LoadClientConfig(const std::string& path);
// LoadClientConfig(ClientConfigPath()), defaults when no path can be located.
Result<ClientConfig> LoadClientConfig();

// The directory of client.json (see above). kNotFound when neither BLZ_CONFIG_DIR,
// XDG_CONFIG_HOME nor HOME is set.
Result<std::string> ClientConfigDir();

// "HOST:PORT" -> true (https) / false (http) for every registry client.json remembers. A missing
// file or no "registries" object: empty. Errors: kCorruption (names the file and the key),
// kIOError.
Result<std::map<std::string, bool>> LoadRememberedSchemes(const std::string& config_path);

// The CA bundle remembered for the registry `host`:`port` (`key` its "HOST:PORT" form) under
// `config_dir`: certs.d/KEY/ca.crt, else (port 443 only) certs.d/HOST/ca.crt; "" when neither
// is a regular file.
std::string RememberedCaFile(const std::string& config_dir, const std::string& key,
                             std::string_view host, uint16_t port);

// Remembers the registry `key` ("HOST:PORT"): its scheme (`tls`: https, else http) in
// config_dir/client.json (written atomically, every other key kept), and, when `ca_file` is not
// "", a copy of it at config_dir/certs.d/KEY/ca.crt (directories 0700, the file 0644, replaced
// atomically). Errors: kNotFound (no such ca_file), kCorruption (client.json is not a JSON
// object), kIOError.
Status RememberRegistry(const std::string& config_dir, const std::string& key, bool tls,
                        const std::string& ca_file);

// "10GiB", "500MB", "2g", "123" (bytes): a non-negative integer and an optional unit, case
// insensitive: B; K, KB = 1000; KiB = 1024; M, MB, MiB; G, GB, GiB; T, TB, TiB. Errors:
// kInvalidArgument naming `what` (e.g. "--budget") and the accepted forms; overflow.
Result<uint64_t> ParseByteSize(const std::string& text, const std::string& what);

// "90s", "45m", "12h", "7d", "2w"; a bare number is seconds. Errors: kInvalidArgument naming
// `what`.
Result<int64_t> ParseDuration(const std::string& text, const std::string& what);

}  // namespace blz::client

#endif  // BLZ_CLIENT_CLIENT_CONFIG_H_
