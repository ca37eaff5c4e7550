// `blz cache prune`: which held versions to evict from the local store.
//
// A version is one archive (by digest), however many registry+repository indexes name it; its
// last use is the latest pull of it under any name. Eviction, in this order:
//   1. with max_age > 0: every version last used more than max_age seconds before `now`;
//   2. with max_bytes > 0: then the least recently used versions until the archives kept add
//      up to at most max_bytes (ties: larger first, then by digest).
// Nothing else is removed: the plan is pure and the caller applies it (LocalStore::ForgetVersion).
//
// `blz cache prune --budget` (and the automatic budget of client.json) uses PlanBudgetPrune
// instead: eviction by utility (docs/client.md, "Budgeted store"). For each held version V:
//   frequency(V) = sum over its uses t_i of 2^(-(now - t_i) / half_life)   (client/usage.h;
//                  a version with no usage record counts as one use at its last pull)
//   gain(V)      = the bytes getting V back would cost if it were evicted: the bytes its last
//                  fetch cost (usage.json fetch_bytes) when that fetch had no base (full patch
//                  or raw archive) or its base B is still held; its archive size when B is not
//                  held or nothing was recorded (an upper bound: the registry may find another
//                  base)
//   cost(V)      = its archive bytes in the store
//   utility(V)   = frequency(V) * gain(V) / cost(V)
// Archives are stored whole, never as patches: evicting B loses no data of V. But V's gain
// assumes B is held, so V "needs" B: B is only evicted together with every held version that
// needs it (transitively), as one group whose utility is sum(frequency * gain) / sum(cost).
#ifndef BLZ_CLIENT_CACHE_PRUNE_H_
#define BLZ_CLIENT_CACHE_PRUNE_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "client/client_config.h"
#include "client/local_store.h"
#include "client/usage.h"

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

// One held version with its utility (see above).
struct VersionUtility {
  std::string digest;
  uint64_t size = 0;                // cost: archive bytes in the store
  int64_t last_used = 0;            // latest pull under any name (unix seconds)
  std::vector<std::string> names;   // as in CachedVersion
  uint64_t uses = 0;                // recorded uses (0 with no usage record)
  double frequency = 0;             // decayed use frequency at `now`
  std::string base;                 // recorded base of its last fetch ("" = none)
  bool base_held = false;           // that base is among the versions considered
  uint64_t gain = 0;                // bytes to get it back
  double utility = 0;               // frequency * gain / max(size, 1)
  std::string reason;               // PlanBudgetPrune: why it is evicted or kept
};

// Utilities of the versions `held` (grouped by digest), highest first (ties: by digest).
std::vector<VersionUtility> ComputeUtilities(const std::vector<HeldVersion>& held,
                                             const UsageMap& usage, int64_t now,
                                             int64_t half_life);

struct BudgetRule {
  uint64_t budget = std::numeric_limits<uint64_t>::max();  // bytes; max = no budget
  int64_t max_age = 0;                        // seconds; 0 = no age limit
  int64_t half_life = kDefaultHalfLifeSeconds;
  std::vector<std::string> protect;           // digests never evicted (a pull's own and base)
};

struct BudgetPlan {
  std::vector<VersionUtility> evict;  // in eviction order
  std::vector<VersionUtility> keep;   // highest utility first
  uint64_t bytes_before = 0;
  uint64_t bytes_after = 0;
  bool budget_met = true;             // false: protected versions and their bases exceed it
};

// 1. with max_age > 0: versions last used more than max_age before `now`, least recently used
//    first, each with the versions that need it (all of which must be as old; else it is kept);
// 2. then, while the kept archives exceed `budget`: the group (a version and every kept version
//    that needs it, transitively) of lowest group utility; ties: more bytes first, then the
//    smaller digest. Groups holding a protected digest are never evicted.
// 3. whole groups can overshoot: then every version step 2 evicted, highest utility first,
//    is kept again if it fits within the budget together with the evicted bases it needs.
// Never leaves a kept version whose recorded base was evicted. Pure: the caller applies it.
BudgetPlan PlanBudgetPrune(const std::vector<HeldVersion>& held, const UsageMap& usage,
                           const BudgetRule& rule, int64_t now);

}  // namespace blz::client

#endif  // BLZ_CLIENT_CACHE_PRUNE_H_
