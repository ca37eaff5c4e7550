#include "client/cache_prune.h"

#include <algorithm>
#include <map>

namespace blz::client {

std::vector<CachedVersion> GroupByDigest(const std::vector<HeldVersion>& held) {
  std::map<std::string, CachedVersion> by_digest;
  for (const HeldVersion& v : held) {
    CachedVersion& c = by_digest[v.digest];
    c.digest = v.digest;
    c.size = std::max(c.size, v.size);
    c.last_used = std::max(c.last_used, v.pulled_at);
    if (!v.repository.empty()) {
      std::string name = v.registry + "/" + v.repository;
      if (!v.tags.empty()) {
        name += ":";
        for (size_t i = 0; i < v.tags.size(); ++i) name += (i > 0 ? "," : "") + v.tags[i];
      }
      c.names.push_back(std::move(name));
    }
  }
  std::vector<CachedVersion> out;
  for (auto& [digest, c] : by_digest) out.push_back(std::move(c));
  std::stable_sort(out.begin(), out.end(), [](const CachedVersion& a, const CachedVersion& b) {
    return a.last_used > b.last_used;
  });
  return out;
}

PrunePlan PlanPrune(const std::vector<HeldVersion>& held, const PruneRule& rule, int64_t now) {
  PrunePlan plan;
  std::vector<CachedVersion> all = GroupByDigest(held);
  for (const CachedVersion& c : all) plan.bytes_before += c.size;
  // Least recently used first; ties: larger first, then by digest.
  std::sort(all.begin(), all.end(), [](const CachedVersion& a, const CachedVersion& b) {
    if (a.last_used != b.last_used) return a.last_used < b.last_used;
    if (a.size != b.size) return a.size > b.size;
    return a.digest < b.digest;
  });
  uint64_t kept_bytes = plan.bytes_before;
  std::vector<bool> evicted(all.size(), false);
  for (size_t i = 0; i < all.size(); ++i) {
    if (rule.max_age > 0 && now - all[i].last_used > rule.max_age) {
      evicted[i] = true;
      kept_bytes -= all[i].size;
    }
  }
  for (size_t i = 0; i < all.size() && rule.max_bytes > 0 && kept_bytes > rule.max_bytes; ++i) {
    if (evicted[i]) continue;
    evicted[i] = true;
    kept_bytes -= all[i].size;
  }
  for (size_t i = 0; i < all.size(); ++i) {
    (evicted[i] ? plan.evict : plan.keep).push_back(all[i]);
  }
  std::reverse(plan.keep.begin(), plan.keep.end());
  plan.bytes_after = kept_bytes;
  return plan;
}

}  // namespace blz::client
