#include "client/cache_prune.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

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

std::vector<VersionUtility> ComputeUtilities(const std::vector<HeldVersion>& held,
                                             const UsageMap& usage, int64_t now,
                                             int64_t half_life) {
  std::vector<CachedVersion> grouped = GroupByDigest(held);
  std::set<std::string> present;
  for (const CachedVersion& c : grouped) present.insert(c.digest);
  std::vector<VersionUtility> out;
  for (CachedVersion& c : grouped) {
    VersionUtility u;
    u.digest = c.digest;
    u.size = c.size;
    u.last_used = c.last_used;
    u.names = std::move(c.names);
    UseRecord record;
    auto it = usage.find(c.digest);
    if (it != usage.end()) {
      record = it->second;
    } else {
      // Held from before uses were recorded: one use at its last pull.
      record.score = 1;
      record.updated_at = c.last_used;
    }
    u.uses = record.uses;
    u.frequency = DecayedFrequency(record, now, half_life);
    if (record.from != c.digest) u.base = record.from;
    u.base_held = !u.base.empty() && present.count(u.base) > 0;
    if (record.via.empty()) {
      u.gain = c.size;  // how it arrived is not known: the archive, an upper bound
    } else if (u.base.empty() || u.base_held) {
      u.gain = std::min(record.fetch_bytes, c.size);  // never more than the archive
    } else {
      u.gain = c.size;  // its base is gone: a re-fetch may cost up to the whole archive
    }
    u.utility = u.frequency * double(u.gain) / double(std::max<uint64_t>(u.size, 1));
    out.push_back(std::move(u));
  }
  std::sort(out.begin(), out.end(), [](const VersionUtility& a, const VersionUtility& b) {
    if (a.utility != b.utility) return a.utility > b.utility;
    return a.digest < b.digest;
  });
  return out;
}

namespace {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string Short(const std::string& digest) { return digest.substr(0, 19); }

}  // namespace

BudgetPlan PlanBudgetPrune(const std::vector<HeldVersion>& held, const UsageMap& usage,
                           const BudgetRule& rule, int64_t now) {
  BudgetPlan plan;
  std::vector<VersionUtility> all = ComputeUtilities(held, usage, now, rule.half_life);
  const size_t n = all.size();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) {
    index[all[i].digest] = i;
    plan.bytes_before += all[i].size;
  }
  // needed_by[b]: versions whose recorded base is b.
  std::vector<std::vector<size_t>> needed_by(n);
  for (size_t i = 0; i < n; ++i) {
    if (all[i].base_held) needed_by[index[all[i].base]].push_back(i);
  }
  std::vector<bool> is_protected(n, false), evicted(n, false);
  for (const std::string& d : rule.protect) {
    if (auto it = index.find(d); it != index.end()) is_protected[it->second] = true;
  }
  // The group of i: i and every kept version that needs it, transitively (sorted).
  auto group_of = [&](size_t i) {
    std::vector<size_t> group{i}, todo{i};
    std::vector<bool> seen(n, false);
    seen[i] = true;
    while (!todo.empty()) {
      const size_t b = todo.back();
      todo.pop_back();
      for (size_t d : needed_by[b]) {
        if (evicted[d] || seen[d]) continue;
        seen[d] = true;
        group.push_back(d);
        todo.push_back(d);
      }
    }
    return group;
  };
  uint64_t kept_bytes = plan.bytes_before;
  std::vector<size_t> head_of(n);  // the version whose eviction took it along
  auto evict_group = [&](const std::vector<size_t>& group, const std::string& why) {
    for (size_t k = 0; k < group.size(); ++k) {
      VersionUtility v = all[group[k]];
      const std::string& head = all[group[0]].digest;
      if (k == 0) {
        v.reason = why;
      } else if (v.base == head) {
        v.reason = "needs " + Short(head) + " as its base: evicted with it";
      } else {
        v.reason = "needs " + Short(head) + " through its base " + Short(v.base) +
                   ": evicted with it";
      }
      head_of[group[k]] = group[0];
      evicted[group[k]] = true;
      kept_bytes -= v.size;
      plan.evict.push_back(std::move(v));
    }
  };
  std::vector<std::string> kept_reason(n);
  std::vector<bool> by_budget(n, false);  // evicted by step 2

  // 1. Age: least recently used first.
  if (rule.max_age > 0) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (all[a].last_used != all[b].last_used) return all[a].last_used < all[b].last_used;
      return all[a].digest < all[b].digest;
    });
    auto too_old = [&](size_t i) { return now - all[i].last_used > rule.max_age; };
    for (size_t i : order) {
      if (evicted[i] || !too_old(i)) continue;
      std::vector<size_t> group = group_of(i);
      bool ok = true;
      for (size_t g : group) {
        if (is_protected[g]) {
          ok = false;
          kept_reason[i] = "older than the age limit but protected";
          if (g != i) kept_reason[i] += " (" + Short(all[g].digest) + " needs it)";
        } else if (!too_old(g)) {
          ok = false;
          kept_reason[i] = "older than the age limit but " + Short(all[g].digest) +
                           " (kept) needs it as its base";
        }
        if (!ok) break;
      }
      if (ok) evict_group(group, "not used for longer than the age limit");
    }
  }

  // 2. Budget: the lowest group utility first.
  while (kept_bytes > rule.budget) {
    bool found = false;
    std::vector<size_t> best_group;
    double best_utility = 0;
    uint64_t best_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      if (evicted[i] || is_protected[i]) continue;
      std::vector<size_t> group = group_of(i);
      double value = 0;
      uint64_t bytes = 0;
      bool has_protected = false;
      for (size_t g : group) {
        has_protected = has_protected || is_protected[g];
        value += all[g].frequency * double(all[g].gain);
        bytes += all[g].size;
      }
      if (has_protected) continue;
      const double utility = value / double(std::max<uint64_t>(bytes, 1));
      const bool better =
          !found || utility < best_utility ||
          (utility == best_utility &&
           (bytes > best_bytes ||
            (bytes == best_bytes && all[i].digest < all[best_group[0]].digest)));
      if (better) {
        found = true;
        best_group = std::move(group);
        best_utility = utility;
        best_bytes = bytes;
      }
    }
    if (!found) {
      plan.budget_met = false;
      break;
    }
    std::string why = "lowest utility (" + Fmt("%.4g", all[best_group[0]].utility) + ")";
    if (best_group.size() > 1) {
      why = "lowest group utility (" + Fmt("%.4g", best_utility) + " for " +
            std::to_string(best_group.size()) + " versions)";
    }
    evict_group(best_group, why + " while over the budget");
    for (size_t g : best_group) by_budget[g] = true;
  }

  // 3. Whole groups can overshoot the budget: give back, highest utility first, each version
  // the budget evicted that fits again together with the evicted bases it needs.
  std::vector<bool> given_back(n, false);
  if (plan.budget_met && rule.budget != std::numeric_limits<uint64_t>::max()) {
    for (size_t i = 0; i < n; ++i) {  // `all` is highest utility first
      if (!evicted[i] || !by_budget[i]) continue;
      std::vector<size_t> unit;
      std::vector<bool> seen(n, false);
      uint64_t bytes = 0;
      bool ok = true;
      for (size_t cur = i;;) {
        if (seen[cur]) break;
        seen[cur] = true;
        if (!by_budget[cur]) {
          ok = false;  // a base the age limit evicted stays evicted
          break;
        }
        unit.push_back(cur);
        bytes += all[cur].size;
        if (!all[cur].base_held) break;
        const size_t base = index[all[cur].base];
        if (!evicted[base]) break;
        cur = base;
      }
      if (!ok || kept_bytes + bytes > rule.budget) continue;
      for (size_t u : unit) {
        evicted[u] = false;
        given_back[u] = true;
        kept_bytes += all[u].size;
      }
    }
    std::vector<VersionUtility> still;
    for (VersionUtility& v : plan.evict) {
      const size_t i = index[v.digest];
      if (given_back[i]) continue;
      if ((all[i].base_held && given_back[index[all[i].base]]) || given_back[head_of[i]]) {
        v.reason = "over the budget: does not fit back together with the bases it needs";
      }
      still.push_back(std::move(v));
    }
    plan.evict = std::move(still);
  }

  for (size_t i = 0; i < n; ++i) {
    if (evicted[i]) continue;
    VersionUtility v = all[i];
    size_t dependents = 0;
    for (size_t d : needed_by[i]) dependents += evicted[d] ? 0 : 1;
    if (!kept_reason[i].empty()) {
      v.reason = kept_reason[i];
    } else if (is_protected[i]) {
      v.reason = "protected (the version just pulled, or its base)";
    } else if (given_back[i]) {
      v.reason = "evicted with a group, then fits back within the budget";
    } else if (dependents > 0) {
      v.reason = "within the budget; base of " + std::to_string(dependents) +
                 " kept version" + (dependents == 1 ? "" : "s");
    } else {
      v.reason = "within the budget";
    }
    if (rule.budget == std::numeric_limits<uint64_t>::max() && kept_reason[i].empty() &&
        !is_protected[i]) {
      v.reason = dependents > 0 ? "recent enough; base of " + std::to_string(dependents) +
                                      " kept version" + (dependents == 1 ? "" : "s")
                                : "recent enough";
    }
    plan.keep.push_back(std::move(v));  // `all` is highest utility first
  }
  plan.bytes_after = kept_bytes;
  return plan;
}

}  // namespace blz::client
