// Which held archive a pull patches from (docs/registry-api.md, "Choosing a base").
//
// The local store is keyed by digest: a base pulled from another repository, or from the same
// registry under another name (localhost:5000 after 127.0.0.1:5000), is as good as one pulled
// from here. A pull offers the registry the archives it holds, in this order, at most
// kMaxBaseCandidates of them:
//   1. versions recorded for the same registry+repository, most recently pulled first;
//   2. every other held archive (other repositories, other registry aliases, blobs no index
//      names), most recently pulled first.
// The registry keeps the ones it can patch from (versions of repositories the caller may
// read) and ranks them (same structure, measured patch size, same repository, nearest push
// time). A registry without that endpoint (an older blz) gets the old behaviour: the most
// recently pulled version of the same registry+repository.
#ifndef BLZ_CLIENT_BASE_CHOICE_H_
#define BLZ_CLIENT_BASE_CHOICE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "client/local_store.h"
#include "client/registry_client.h"
#include "core/status.h"

namespace blz::client {

inline constexpr size_t kMaxBaseCandidates = 64;

// The candidates of a pull of `target` from registry/repository, in the order above, without
// `target` itself and without duplicates, at most `max`.
std::vector<std::string> CandidateBases(const std::vector<HeldVersion>& held,
                                        std::string_view registry, std::string_view repository,
                                        std::string_view target, size_t max = kMaxBaseCandidates);

struct BaseChoice {
  std::vector<std::string> bases;  // archive digests to try, best first (may be empty)
  // Per base, how reports name it: NAME:TAG (or NAME@<12 hex> untagged), from the registry's
  // answer, else from the local store's index (BaseDisplayName); parallel to `bases`.
  std::vector<std::string> names;
  bool registry_ranked = false;    // the registry chose (else the client's fallback)
  std::vector<std::string> notes;  // worth telling the user (e.g. why the fallback was used)
};

// How a held archive is named in reports without the registry's word: REPOSITORY:TAG of the
// most recent pull that recorded it (REPOSITORY@<12 hex> untagged), else the 12 hex alone.
std::string BaseDisplayName(const std::vector<HeldVersion>& held, std::string_view digest);

// Asks the registry (GET /v2/<repository>/blz/bases) which of the held archives to patch from.
// Errors: kUnauthorized from the registry (everything else falls back, with a note).
Result<BaseChoice> ChooseBases(RegistryClient* client, const LocalStore& store,
                               std::string_view registry, std::string_view repository,
                               std::string_view target);

}  // namespace blz::client

#endif  // BLZ_CLIENT_BASE_CHOICE_H_
