// References resolved against what the local store holds (client/local_store.h): short
// digests, offline mode and local tags.
//
// - Short digests: `NAME@sha256:<hex prefix>` (at least 12 hex digits, as `blz ls` prints
//   them) names the one version whose archive (or manifest) digest starts with it: among the
//   versions the store holds first, else (online) among the versions the registry's tags of
//   NAME point at. Two or more matches are an error listing them.
// - Offline (`--offline`, BLZ_OFFLINE=1): NAME:TAG resolves to the version the store last
//   recorded under that tag (by a pull, a push or `blz tag`) and NAME@sha256:... to a version
//   held under that name; the registry is never contacted. A digest already held under that
//   name is served that way even online (pull.h).
// - Local tags (`blz tag SRC DST`, like `docker tag`): DST is recorded in the store as a name
//   of SRC's version; nothing is sent to a registry.
#ifndef BLZ_CLIENT_LOCAL_REF_H_
#define BLZ_CLIENT_LOCAL_REF_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/local_store.h"
#include "client/reference.h"
#include "core/status.h"

namespace blz::client {

class RegistryClient;

inline constexpr size_t kMinDigestPrefixHex = 12;

// A reference whose digest may be a prefix.
struct LooseReference {
  Reference ref;              // ref.digest is empty when digest_prefix is set
  std::string digest_prefix;  // "sha256:<12..63 hex>", or "" (a tag or a full digest)
};

// ParseReference, also accepting NAME@sha256:<12 to 63 lower-case hex>. Errors:
// kInvalidArgument (a prefix shorter than 12 hex digits says so).
Result<LooseReference> ParseLooseReference(std::string_view text,
                                           const AddressDefaults& defaults = {});

// Is `text` a (possibly short) digest: "sha256:<12..64 hex>" or "<12..64 hex>"? Returns it
// with the "sha256:" prefix, or "" when it is not one.
std::string AsDigestPrefix(std::string_view text);

// True when BLZ_OFFLINE is set to 1, true, yes or on (any case).
bool OfflineFromEnv();

// The one held version whose archive or manifest digest starts with `prefix` ("sha256:..."),
// preferring the versions of ref.registry/ref.name when several names hold it. kNotFound when
// none does, kInvalidArgument listing them when several distinct versions do.
Result<HeldVersion> FindHeldByPrefix(const LocalStore& store, const Reference& ref,
                                     std::string_view prefix);

// Completes loose.ref.digest from loose.digest_prefix: the store first; then, when `client`
// is not null, the registry's tags of the repository (each manifest GET'd; the manifest's or
// its archive's digest may match). Errors: kNotFound (no match, naming where it looked),
// kInvalidArgument (ambiguous, listing the candidates), the registry's.
Result<Reference> ResolveDigestPrefix(const LocalStore& store, const LooseReference& loose,
                                      RegistryClient* client);

// The held version `ref` names without asking a registry, as recorded for ref.registry and
// ref.name (by a pull, push or `blz tag`): by digest (archive or manifest digest) or by tag.
// nullopt when the store holds no such version under that name (a digest held under another
// name only does not count: that registry name or repository may not have it).
Result<std::optional<HeldVersion>> FindHeld(const LocalStore& store, const Reference& ref);

// `blz tag SRC DST`: records dst (a tag reference) as a name of the version `src` names,
// found with FindHeld (a short digest in src is resolved locally). Returns that version.
// Errors: kNotFound (src not held: "pull it first"), kInvalidArgument (dst by digest).
Result<HeldVersion> TagLocally(LocalStore* store, const LooseReference& src, const Reference& dst);

}  // namespace blz::client

#endif  // BLZ_CLIENT_LOCAL_REF_H_
