// Candidate order for choosing a base (client/base_choice.h) and the eviction plan of
// `blz cache prune` (client/cache_prune.h): pure functions over held versions.
#include "client/base_choice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/cache_prune.h"

namespace blz::client {
namespace {

HeldVersion V(std::string digest, std::string registry, std::string repository, uint64_t seq,
              int64_t pulled_at, uint64_t size = 100) {
  HeldVersion v;
  v.digest = std::move(digest);
  v.registry = std::move(registry);
  v.repository = std::move(repository);
  v.seq = seq;
  v.pulled_at = pulled_at;
  v.size = size;
  return v;
}

TEST(BaseChoiceTest, SameRepositoryFirstThenEverythingElseByRecency) {
  const std::vector<HeldVersion> held = {
      V("sha256:old-here", "r:1", "org/m", 1, 100),
      V("sha256:new-elsewhere", "r:1", "org/other", 5, 900),
      V("sha256:new-here", "r:1", "org/m", 2, 200),
      V("sha256:alias", "localhost:1", "org/m", 9, 500),  // another name: "elsewhere"
      V("sha256:loose", "", "", 0, 50),
      V("sha256:target", "r:1", "org/m", 3, 300),
      V("sha256:new-elsewhere", "localhost:1", "org/other", 1, 800),  // duplicate digest
  };
  EXPECT_EQ(CandidateBases(held, "r:1", "org/m", "sha256:target"),
            (std::vector<std::string>{"sha256:new-here", "sha256:old-here",
                                      "sha256:new-elsewhere", "sha256:alias", "sha256:loose"}));
  EXPECT_EQ(CandidateBases(held, "r:1", "org/m", "sha256:target", 2),
            (std::vector<std::string>{"sha256:new-here", "sha256:old-here"}));
  EXPECT_TRUE(CandidateBases({}, "r:1", "org/m", "sha256:t").empty());
}

// Issue 24 item 5: reports name a base NAME:TAG, not a bare digest; without the registry's
// name the store's index gives it (the most recent pull that recorded the digest).
TEST(BaseChoiceTest, ABaseIsNamedByRepositoryAndTag) {
  const std::string d = "sha256:0123456789abcdef0123456789abcdef";
  HeldVersion tagged = V(d, "r:1", "org/tinystories", 2, 200);
  tagged.tags = {"v1"};
  HeldVersion older = V(d, "r:1", "org/old", 1, 100);
  older.tags = {"x"};
  EXPECT_EQ(BaseDisplayName({older, tagged}, d), "org/tinystories:v1");
  EXPECT_EQ(BaseDisplayName({V(d, "r:1", "org/a", 1, 1)}, d), "org/a@0123456789ab");
  EXPECT_EQ(BaseDisplayName({V(d, "", "", 0, 1)}, d), "0123456789ab");
  EXPECT_EQ(BaseDisplayName({}, d), "0123456789ab");
}

TEST(CachePruneTest, AgeThenLeastRecentlyUsedUntilTheBudgetHolds) {
  const std::vector<HeldVersion> held = {
      V("sha256:a", "r:1", "x", 1, 1000, 300),
      V("sha256:a", "r:2", "x", 1, 5000, 300),  // the same archive used later under an alias
      V("sha256:b", "r:1", "y", 1, 2000, 200),
      V("sha256:c", "r:1", "z", 1, 3000, 100),
      V("sha256:d", "", "", 0, 100, 50),
  };
  // Grouped by digest: a (5000, 300), c (3000), b (2000), d (100).
  std::vector<CachedVersion> grouped = GroupByDigest(held);
  ASSERT_EQ(grouped.size(), 4u);
  EXPECT_EQ(grouped[0].digest, "sha256:a");
  EXPECT_EQ(grouped[0].last_used, 5000);
  EXPECT_EQ(grouped[0].names.size(), 2u);

  PruneRule age;
  age.max_age = 3500;  // now 6000: d (100) and b (2000) are too old; c (3000), a are not
  PrunePlan p = PlanPrune(held, age, 6000);
  ASSERT_EQ(p.evict.size(), 2u);
  EXPECT_EQ(p.evict[0].digest, "sha256:d");
  EXPECT_EQ(p.evict[1].digest, "sha256:b");
  EXPECT_EQ(p.bytes_before, 650u);
  EXPECT_EQ(p.bytes_after, 400u);

  PruneRule budget;
  budget.max_bytes = 350;  // evict d, b (least recently used), then c: 300 <= 350
  p = PlanPrune(held, budget, 6000);
  ASSERT_EQ(p.evict.size(), 3u);
  EXPECT_EQ(p.evict[2].digest, "sha256:c");
  ASSERT_EQ(p.keep.size(), 1u);
  EXPECT_EQ(p.keep[0].digest, "sha256:a");
  EXPECT_EQ(p.bytes_after, 300u);

  PruneRule none;
  p = PlanPrune(held, none, 6000);
  EXPECT_TRUE(p.evict.empty());
  EXPECT_EQ(p.keep.size(), 4u);
  EXPECT_EQ(p.keep[0].digest, "sha256:a");  // most recently used first
}

}  // namespace
}  // namespace blz::client
