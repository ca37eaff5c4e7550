// The budgeted prune (client/cache_prune.h PlanBudgetPrune, ComputeUtilities) and the decay of
// use counts it rests on (client/usage.h): pure functions, checked against numbers worked out
// by hand. (The least-recently-used PlanPrune is tested in base_choice_test.cc.)
#include "client/cache_prune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "client/usage.h"

namespace blz::client {
namespace {

constexpr int64_t kH = 1000;  // half-life of these tests, seconds

HeldVersion Held(std::string digest, int64_t pulled_at, uint64_t size) {
  HeldVersion v;
  v.digest = std::move(digest);
  v.registry = "r:1";
  v.repository = "org/m";
  v.pulled_at = pulled_at;
  v.size = size;
  return v;
}

// A record of `uses` uses, all at `at`, last fetched from `from` via `via` at `bytes`.
UseRecord Rec(int uses, int64_t at, std::string from, std::string via, uint64_t bytes) {
  UseRecord r;
  for (int i = 0; i < uses; ++i) r = AddUse(r, at, kH);
  r.from = std::move(from);
  r.via = std::move(via);
  r.fetch_bytes = bytes;
  return r;
}

std::vector<std::string> Digests(const std::vector<VersionUtility>& vs) {
  std::vector<std::string> out;
  for (const auto& v : vs) out.push_back(v.digest);
  return out;
}

const VersionUtility& Find(const std::vector<VersionUtility>& vs, const std::string& d) {
  auto it = std::find_if(vs.begin(), vs.end(), [&](const auto& v) { return v.digest == d; });
  EXPECT_NE(it, vs.end()) << d;
  return *it;
}

// No kept version whose recorded base (held before the prune) was evicted.
void ExpectNoOrphans(const BudgetPlan& plan) {
  std::set<std::string> evicted;
  for (const auto& v : plan.evict) evicted.insert(v.digest);
  for (const auto& v : plan.keep) {
    if (v.base_held) {
      EXPECT_EQ(evicted.count(v.base), 0u) << v.digest << " kept without its base " << v.base;
    }
  }
}

TEST(UsageDecayTest, IncrementalScoreEqualsTheSumOverUses) {
  UseRecord r;
  EXPECT_EQ(DecayedFrequency(r, 5000, kH), 0.0);
  r = AddUse(r, 0, kH);
  EXPECT_DOUBLE_EQ(r.score, 1.0);
  r = AddUse(r, kH, kH);  // 1 * 2^-1 + 1
  EXPECT_DOUBLE_EQ(r.score, 1.5);
  r = AddUse(r, 3 * kH, kH);  // 1.5 * 2^-2 + 1
  EXPECT_DOUBLE_EQ(r.score, 1.375);
  EXPECT_EQ(r.uses, 3u);
  EXPECT_EQ(r.updated_at, 3 * kH);
  // At 4h: 2^-4 + 2^-3 + 2^-1 (uses at 0, h, 3h) = 0.6875.
  EXPECT_DOUBLE_EQ(DecayedFrequency(r, 4 * kH, kH), 0.0625 + 0.125 + 0.5);
  // A record "from the future" (the clock moved back) is not inflated.
  EXPECT_DOUBLE_EQ(DecayedFrequency(r, 0, kH), 1.375);
  // Another half-life decays the time since the last use with it.
  EXPECT_DOUBLE_EQ(DecayedFrequency(r, 5 * kH, 2 * kH), 1.375 * 0.5);
}

TEST(CachePruneBudgetTest, GainIsThePatchWhileItsBaseIsHeldElseTheFullDownload) {
  // b: fetched as a full patch of 600 bytes; v: a 100-byte patch from b; w: a patch from x,
  // which is not held; old: held from before uses were recorded.
  const std::vector<HeldVersion> held = {Held("sha256:b", 0, 1000), Held("sha256:v", 0, 1000),
                                         Held("sha256:w", 0, 800), Held("sha256:old", 0, 500)};
  UsageMap usage;
  usage["sha256:b"] = Rec(2, 0, "", "full-patch", 600);
  usage["sha256:v"] = Rec(1, 0, "sha256:b", "patch", 100);
  usage["sha256:w"] = Rec(4, 0, "sha256:x", "patch", 50);
  std::vector<VersionUtility> u = ComputeUtilities(held, usage, kH, kH);
  ASSERT_EQ(u.size(), 4u);
  const VersionUtility& b = Find(u, "sha256:b");
  EXPECT_EQ(b.gain, 600u);
  EXPECT_DOUBLE_EQ(b.frequency, 1.0);           // 2 uses, one half-life ago
  EXPECT_DOUBLE_EQ(b.utility, 1.0 * 600 / 1000);
  const VersionUtility& v = Find(u, "sha256:v");
  EXPECT_EQ(v.gain, 100u);
  EXPECT_TRUE(v.base_held);
  EXPECT_DOUBLE_EQ(v.utility, 0.5 * 100 / 1000);
  const VersionUtility& w = Find(u, "sha256:w");
  EXPECT_FALSE(w.base_held);
  EXPECT_EQ(w.gain, 800u);  // its base is gone: the whole archive
  EXPECT_DOUBLE_EQ(w.utility, 2.0 * 800 / 800);
  const VersionUtility& old = Find(u, "sha256:old");
  EXPECT_EQ(old.uses, 0u);
  EXPECT_DOUBLE_EQ(old.frequency, 0.5);  // one use at its last pull (t=0)
  EXPECT_EQ(old.gain, 500u);
  // Highest utility first.
  EXPECT_EQ(Digests(u),
            (std::vector<std::string>{"sha256:w", "sha256:b", "sha256:old", "sha256:v"}));

  // Without b, v's gain is its whole archive.
  std::vector<VersionUtility> without_b =
      ComputeUtilities({held[1], held[2], held[3]}, usage, kH, kH);
  EXPECT_EQ(Find(without_b, "sha256:v").gain, 1000u);
  EXPECT_FALSE(Find(without_b, "sha256:v").base_held);
}

TEST(CachePruneBudgetTest, ABaseGoesOnlyWithTheVersionsThatNeedIt) {
  // b alone has the lowest utility (0.2), but v (utility 1.0) needs it: the group {b, v} is
  // worth (0.2*1000 + 10*100) / 2000 = 0.6, more than c (0.5).
  const std::vector<HeldVersion> held = {Held("sha256:b", 0, 1000), Held("sha256:v", 0, 1000),
                                         Held("sha256:c", 0, 1000)};
  UsageMap usage;
  usage["sha256:b"] = Rec(1, 0, "", "archive", 1000);
  usage["sha256:v"] = Rec(10, 0, "sha256:b", "patch", 100);
  usage["sha256:c"] = Rec(1, 0, "", "full-patch", 500);
  // At t = 0 frequencies are the use counts... except b: make it old.
  usage["sha256:b"].updated_at = -int64_t(2.321928 * kH);  // 2^-2.32 = 0.2
  BudgetRule rule;
  rule.half_life = kH;
  rule.budget = 2000;
  BudgetPlan plan = PlanBudgetPrune(held, usage, rule, 0);
  EXPECT_EQ(Digests(plan.evict), (std::vector<std::string>{"sha256:c"}));
  EXPECT_EQ(plan.bytes_before, 3000u);
  EXPECT_EQ(plan.bytes_after, 2000u);
  EXPECT_TRUE(plan.budget_met);
  EXPECT_NE(Find(plan.keep, "sha256:b").reason.find("base of 1 kept version"), std::string::npos)
      << Find(plan.keep, "sha256:b").reason;
  ExpectNoOrphans(plan);

  // A tighter budget: c goes, then the group {b, v}: 0 bytes left, far below the budget.
  // Given back, highest utility first: v does not fit with the base it needs (2000 bytes),
  // c does (1000).
  rule.budget = 1000;
  plan = PlanBudgetPrune(held, usage, rule, 0);
  EXPECT_EQ(Digests(plan.evict), (std::vector<std::string>{"sha256:b", "sha256:v"}));
  EXPECT_NE(plan.evict[1].reason.find("needs sha256:b"), std::string::npos) << plan.evict[1].reason;
  EXPECT_EQ(Digests(plan.keep), (std::vector<std::string>{"sha256:c"}));
  EXPECT_NE(plan.keep[0].reason.find("fits back"), std::string::npos) << plan.keep[0].reason;
  EXPECT_EQ(plan.bytes_after, 1000u);
  ExpectNoOrphans(plan);

  // A chain a <- b <- c (c needs b needs a), c the most used: the group of a is the cheapest
  // way down, then b and a fit back (c does not, with them).
  const std::vector<HeldVersion> chain = {Held("sha256:a", 0, 1000), Held("sha256:b", 0, 1000),
                                          Held("sha256:c", 0, 1000)};
  UsageMap chain_usage;
  chain_usage["sha256:a"] = Rec(1, 0, "", "archive", 1000);
  chain_usage["sha256:b"] = Rec(2, 0, "sha256:a", "patch", 400);
  chain_usage["sha256:c"] = Rec(9, 0, "sha256:b", "patch", 400);
  rule.protect.clear();
  rule.budget = 2500;
  plan = PlanBudgetPrune(chain, chain_usage, rule, 0);
  EXPECT_EQ(Digests(plan.evict), (std::vector<std::string>{"sha256:c"}));
  EXPECT_NE(plan.evict[0].reason.find("does not fit back"), std::string::npos)
      << plan.evict[0].reason;
  EXPECT_EQ(plan.bytes_after, 2000u);
  ExpectNoOrphans(plan);
  // Budget 1000: all three go as a's group; a fits back alone, b and c do not.
  rule.budget = 1000;
  plan = PlanBudgetPrune(chain, chain_usage, rule, 0);
  EXPECT_EQ(Digests(plan.keep), (std::vector<std::string>{"sha256:a"}));
  ASSERT_EQ(plan.evict.size(), 2u);
  EXPECT_NE(plan.evict[1].reason.find("does not fit back"), std::string::npos)
      << plan.evict[1].reason;
  EXPECT_EQ(plan.bytes_after, 1000u);
  ExpectNoOrphans(plan);
  // Budget 0: all go; c's reason names the version that took it along and its own base.
  rule.budget = 0;
  plan = PlanBudgetPrune(chain, chain_usage, rule, 0);
  EXPECT_EQ(Digests(plan.evict),
            (std::vector<std::string>{"sha256:a", "sha256:b", "sha256:c"}));
  EXPECT_EQ(plan.evict[1].reason, "needs sha256:a as its base: evicted with it");
  EXPECT_EQ(plan.evict[2].reason, "needs sha256:a through its base sha256:b: evicted with it");
  rule.budget = 1000;

  // v is protected (just pulled): b can never go; the budget (1000) is not reached.
  rule.protect = {"sha256:v"};
  plan = PlanBudgetPrune(held, usage, rule, 0);
  EXPECT_EQ(Digests(plan.evict), (std::vector<std::string>{"sha256:c"}));
  EXPECT_FALSE(plan.budget_met);
  EXPECT_EQ(plan.bytes_after, 2000u);
  ExpectNoOrphans(plan);
}

TEST(CachePruneBudgetTest, ChainsStayWholeForEveryBudget) {
  // Random chains and trees of versions; whatever the budget, no kept version loses its
  // base, and the budget is met (nothing is protected).
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    const int n = 2 + int(rng() % 10);
    std::vector<HeldVersion> held;
    UsageMap usage;
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) {
      const std::string d = "sha256:" + std::to_string(i);
      const uint64_t size = 100 + rng() % 1000;
      total += size;
      held.push_back(Held(d, int64_t(rng() % 5000), size));
      const bool patched = i > 0 && rng() % 3 != 0;
      const std::string from = patched ? "sha256:" + std::to_string(rng() % i) : "";
      usage[d] = Rec(1 + int(rng() % 5), int64_t(rng() % 5000), from,
                     patched ? "patch" : "archive", patched ? size / 10 : size);
    }
    for (uint64_t budget : {uint64_t{0}, total / 3, total / 2, total - 1, total}) {
      BudgetRule rule;
      rule.half_life = kH;
      rule.budget = budget;
      BudgetPlan plan = PlanBudgetPrune(held, usage, rule, 5000);
      ExpectNoOrphans(plan);
      EXPECT_TRUE(plan.budget_met);
      EXPECT_LE(plan.bytes_after, budget);
      EXPECT_EQ(plan.evict.size() + plan.keep.size(), size_t(n));
      if (budget == total) {
        EXPECT_TRUE(plan.evict.empty());
      }
    }
  }
}

TEST(CachePruneBudgetTest, TiesAreBrokenByBytesThenDigestWhateverTheInputOrder) {
  std::vector<HeldVersion> held = {Held("sha256:c", 0, 100), Held("sha256:a", 0, 100),
                                   Held("sha256:big", 0, 200), Held("sha256:b", 0, 100)};
  UsageMap usage;  // no records: one use each at t=0, gain = size: utility 1 for all
  BudgetRule rule;
  rule.half_life = kH;
  rule.budget = 250;
  BudgetPlan first = PlanBudgetPrune(held, usage, rule, 0);
  // Equal utility: the larger frees more first, then digest order.
  EXPECT_EQ(Digests(first.evict), (std::vector<std::string>{"sha256:big", "sha256:a"}));
  std::reverse(held.begin(), held.end());
  BudgetPlan second = PlanBudgetPrune(held, usage, rule, 0);
  EXPECT_EQ(Digests(second.evict), Digests(first.evict));
  EXPECT_EQ(Digests(second.keep), Digests(first.keep));
}

TEST(CachePruneBudgetTest, AgeLimitKeepsAnOldBaseARecentVersionNeeds) {
  const std::vector<HeldVersion> held = {Held("sha256:b", 100, 1000), Held("sha256:v", 9000, 100),
                                         Held("sha256:o", 200, 300), Held("sha256:p", 300, 50)};
  UsageMap usage;
  usage["sha256:v"] = Rec(1, 9000, "sha256:b", "patch", 10);
  usage["sha256:p"] = Rec(1, 300, "sha256:o", "patch", 10);
  BudgetRule rule;  // no budget
  rule.half_life = kH;
  rule.max_age = 5000;
  BudgetPlan plan = PlanBudgetPrune(held, usage, rule, 10000);
  // o and p are both old: o goes with p; b is old but v is not.
  EXPECT_EQ(Digests(plan.evict), (std::vector<std::string>{"sha256:o", "sha256:p"}));
  EXPECT_NE(Find(plan.keep, "sha256:b").reason.find("needs it as its base"), std::string::npos)
      << Find(plan.keep, "sha256:b").reason;
  EXPECT_EQ(Find(plan.keep, "sha256:v").reason, "recent enough");
  ExpectNoOrphans(plan);
}

}  // namespace
}  // namespace blz::client
