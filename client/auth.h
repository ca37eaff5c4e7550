// Registry credentials on the client: one bearer token per registry ("host:port").
//
// The auth file is JSON, {"registries": {"127.0.0.1:5000": {"token": "..."}}}, at
//   $BLZ_CONFIG_DIR/auth.json, else $XDG_CONFIG_HOME/blz/auth.json, else
//   $HOME/.config/blz/auth.json.
// It is written atomically (temp file + fsync + rename) with mode 0600, its directory created
// with mode 0700. $BLZ_TOKEN, when set and not empty, overrides the file for every registry.
#ifndef BLZ_CLIENT_AUTH_H_
#define BLZ_CLIENT_AUTH_H_

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace blz::client {

inline constexpr uint64_t kMaxAuthFileBytes = 1 << 20;

// The auth file path from the environment (see above). kNotFound when neither
// BLZ_CONFIG_DIR, XDG_CONFIG_HOME nor HOME is set.
Result<std::string> AuthFilePath();

// Tokens are 1..4096 printable ASCII characters without spaces (they go into an HTTP header).
bool IsValidToken(std::string_view token);

// Stores `token` for `registry` in the auth file at `auth_path`, keeping other registries'
// entries. Errors: kInvalidArgument (bad token), kCorruption (existing file is not valid auth
// JSON), kIOError.
Status StoreToken(const std::string& auth_path, const std::string& registry,
                  const std::string& token);

// Removes the entry of `registry` from the auth file at `auth_path` (atomically, keeping the
// others). Returns whether there was one. Errors: kCorruption, kIOError.
Result<bool> RemoveToken(const std::string& auth_path, const std::string& registry);

// The token stored for `registry` in `auth_path`; "" when the file or the entry is absent.
// Errors: kCorruption (unparseable file), kIOError.
Result<std::string> LookupToken(const std::string& auth_path, const std::string& registry);

// The token to send to `registry`: $BLZ_TOKEN if set and not empty, else the auth file's entry,
// else "". An unreadable auth file is an error (it would otherwise silently drop credentials).
Result<std::string> ResolveToken(const std::string& registry);

// Where the token ResolveToken(registry) gives comes from, for messages: "the token in
// BLZ_TOKEN" when $BLZ_TOKEN is set and not empty, else "the token `blz login` stored for
// REGISTRY".
std::string TokenSourceFor(const std::string& registry);

// `given` when set (a token the caller passed explicitly), else ResolveToken(registry).
Result<std::string> TokenFor(const std::optional<std::string>& given, const std::string& registry);

}  // namespace blz::client

#endif  // BLZ_CLIENT_AUTH_H_
