// How often each held version is used, and how it arrived: the inputs of the budgeted prune
// (client/cache_prune.h PlanBudgetPrune).
//
// <store>/usage.json (one per store; keyed by archive digest, whatever names it is held as):
//   {"versions": {"sha256:...": {
//       "score": 2.41,            decayed use count at updated_at
//       "updated_at": 1700000000, unix seconds of the last use
//       "half_life": 604800,      seconds; the half-life `score` was accumulated with
//       "uses": 5,                plain count, for display
//       "from": "sha256:...",     base the version was last fetched from ("" = no base)
//       "via": "patch",           how: "patch", "full-patch" or "archive"
//       "fetch_bytes": 123456}}}  bytes that fetch cost (see RecordPullUse)
//
// A use is a pull of the version (also one that finds it held) and its use as the base of a
// patch or of a lossy delta (`pull --lossy`, which records nothing for the approximation). The score is kept incrementally: on a use at time t,
//   score' = score * 2^(-(t - updated_at) / half_life) + 1,   updated_at' = t,
// which equals sum_i 2^(-(t - t_i) / half_life) over all uses t_i (DecayedFrequency decays it
// further to "now"). Past uses are combined with the half-life in effect when they were
// recorded; a different --half-life at prune time changes the decay since the last use only.
//
// A record 30 half-lives without a use is dropped when the file is next written (the version
// then counts as held from before uses were recorded: cache_prune.h).
//
// The file is written atomically (temp + rename) under <store>/usage.lock, by processes that
// hold the store open; a temp file left by one that died is removed by the next
// LocalStore::Open that finds the store unused. A file that cannot
// be parsed is moved aside to usage.json.corrupt and the record starts fresh (a warning is
// returned); blobs and indexes are never touched by anything here.
#ifndef BLZ_CLIENT_USAGE_H_
#define BLZ_CLIENT_USAGE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace blz::client {

struct PullResult;

inline constexpr uint64_t kMaxUsageFileBytes = 64ull << 20;

struct UseRecord {
  double score = 0;
  int64_t updated_at = 0;
  int64_t half_life = 0;
  uint64_t uses = 0;
  std::string from;  // base digest of the last fetch; "" = fetched without a base
  std::string via;   // "" = never fetched since usage was recorded (held before)
  uint64_t fetch_bytes = 0;
};

using UsageMap = std::map<std::string, UseRecord>;  // by archive digest

// One use of `digest` at `at`; with `fetched`, also how it arrived (replacing the old record).
struct UseEvent {
  std::string digest;
  bool fetched = false;
  std::string from;
  std::string via;
  uint64_t fetch_bytes = 0;
};

// Unix seconds now, or $BLZ_NOW when it is set to an integer (for tests and
// bench/cache_prune_pattern.sh, which simulate uses over days; not for everyday use).
int64_t ClientNow();

// sum_i 2^(-(now - t_i) / half_life) over the record's uses (see above); 0 for no use.
// A record from the future (clock moved back) is not decayed. REQUIRES: half_life > 0.
double DecayedFrequency(const UseRecord& record, int64_t now, int64_t half_life);

// The record after one more use at `at` (the formula above, with `half_life`).
UseRecord AddUse(UseRecord record, int64_t at, int64_t half_life);

// Reads <store_dir>/usage.json. A missing file is an empty map; an unparseable one is an empty
// map and `*warning` says so (ReadUsage leaves the file alone; RecordUses moves it aside).
// Errors: kIOError only.
Result<UsageMap> ReadUsage(const std::string& store_dir, std::string* warning);

// Adds `events` (all at time `at`, accumulated with `half_life` > 0) to usage.json, under its
// lock. `*warning` is set when a corrupt file was moved aside. Errors: kIOError.
Status RecordUses(const std::string& store_dir, const std::vector<UseEvent>& events, int64_t at,
                  int64_t half_life, std::string* warning);

// The events of one successful pull: a use of the version (how it arrived, unless it was
// already held: "local" keeps the earlier record) and a use of the base it patched from.
// fetch_bytes is the archive size for a raw archive download, else the bytes the pull
// received plus those resumed from an earlier run, capped at the archive size (an over-estimate
// when an earlier route failed or a part was retried).
std::vector<UseEvent> PullUseEvents(const PullResult& result);

// RecordUses(events) at ClientNow() with the client config's half-life (its default when
// client.json cannot be read: `*warning` then says so).
Status RecordUsesNow(const std::string& store_dir, const std::vector<UseEvent>& events,
                     std::string* warning);

// RecordUsesNow(PullUseEvents(result)).
Status RecordPullUse(const std::string& store_dir, const PullResult& result,
                     std::string* warning);

}  // namespace blz::client

#endif  // BLZ_CLIENT_USAGE_H_
