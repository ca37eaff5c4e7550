// `blz cache prune`: which held versions to evict from the local store.
//
// A version is one archive (by digest), however many registry+repository indexes name it; its
// last use is the latest pull of it under any name. Eviction, in this order:
//   1. with max_age > 0: every version last used more than max_age seconds before `now`;
//   2. with max_bytes > 0: then the least recently used versions until the archives kept add
//      up to at most max_bytes (ties: larger first, then by digest).
// Nothing else is removed: the plan is pure and the caller applies it (LocalStore::ForgetVersion).
#ifndef BLZ_CLIENT_CACHE_PRUNE_H_
#define BLZ_CLIENT_CACHE_PRUNE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/local_store.h"

namespace blz::client {

struct PruneRule {
  int64_t max_age = 0;     // seconds; 0 = no age limit
  uint64_t max_bytes = 0;  // bytes; 0 = no size budget
};

struct CachedVersion {
  std::string digest;
  uint64_t size = 0;
  int64_t last_used = 0;              // unix seconds
  std::vector<std::string> names;     // "registry/repository:tag,..." it is held as
};

struct PrunePlan {
  std::vector<CachedVersion> evict;  // in eviction order
  std::vector<CachedVersion> keep;   // most recently used first
  uint64_t bytes_before = 0;
  uint64_t bytes_after = 0;
};

// One entry per digest, most recently used first (for `blz ls`).
std::vector<CachedVersion> GroupByDigest(const std::vector<HeldVersion>& held);

PrunePlan PlanPrune(const std::vector<HeldVersion>& held, const PruneRule& rule, int64_t now);

}  // namespace blz::client

#endif  // BLZ_CLIENT_CACHE_PRUNE_H_
