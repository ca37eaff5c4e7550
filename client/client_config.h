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
#ifndef BLZ_CLIENT_CLIENT_CONFIG_H_
#define BLZ_CLIENT_CLIENT_CONFIG_H_

#include <cstdint>
#include <string>

#include "core/status.h"

namespace blz::client {

inline constexpr int64_t kDefaultHalfLifeSeconds = 7 * 86400;
inline constexpr uint64_t kMaxClientConfigBytes = 1 << 20;

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

// "10GiB", "500MB", "2g", "123" (bytes): a non-negative integer and an optional unit, case
// insensitive: B; K, KB = 1000; KiB = 1024; M, MB, MiB; G, GB, GiB; T, TB, TiB. Errors:
// kInvalidArgument naming `what` (e.g. "--budget") and the accepted forms; overflow.
Result<uint64_t> ParseByteSize(const std::string& text, const std::string& what);

// "90s", "45m", "12h", "7d", "2w"; a bare number is seconds. Errors: kInvalidArgument naming
// `what`.
Result<int64_t> ParseDuration(const std::string& text, const std::string& what);

}  // namespace blz::client

#endif  // BLZ_CLIENT_CLIENT_CONFIG_H_
