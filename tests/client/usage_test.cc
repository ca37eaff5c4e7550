// The store's use record (client/usage.h): uses accumulate in <store>/usage.json, a pull's
// events say how the version arrived, a corrupt file is set aside and the record starts fresh
// without touching a blob; and the client settings it reads (client/client_config.h).
#include "client/usage.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "client/client_config.h"
#include "client/local_store.h"
#include "client/pull.h"
#include "core/digest.h"
#include "tests/client/env_guard.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::EnvGuard;
using blz::testing::ReadFileBytes;
using blz::testing::TempDir;
using blz::testing::WriteFileBytes;
namespace fs = std::filesystem;

const std::string kA = MakeDigest(Sha256Hex("a"));
const std::string kB = MakeDigest(Sha256Hex("b"));

TEST(UsageTest, UsesAccumulateAndAFetchReplacesHowItArrived) {
  TempDir tmp;
  std::string warning;
  UseEvent fetched_a{kA, true, kB, "patch", 123};
  UseEvent use_b{kB, false, "", "", 0};
  ASSERT_TRUE(RecordUses(tmp.path(), {fetched_a, use_b}, 1000, 100, &warning).ok());
  EXPECT_TRUE(warning.empty());
  // A later pull that found a held: a use, how it arrived unchanged.
  ASSERT_TRUE(RecordUses(tmp.path(), {UseEvent{kA, false, "", "", 0}}, 1100, 100, &warning).ok());
  Result<UsageMap> usage = ReadUsage(tmp.path(), &warning);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  EXPECT_TRUE(warning.empty());
  ASSERT_EQ(usage->size(), 2u);
  const UseRecord& a = usage->at(kA);
  EXPECT_DOUBLE_EQ(a.score, 1.5);  // 1 * 2^(-100/100) + 1
  EXPECT_EQ(a.updated_at, 1100);
  EXPECT_EQ(a.half_life, 100);
  EXPECT_EQ(a.uses, 2u);
  EXPECT_EQ(a.from, kB);
  EXPECT_EQ(a.via, "patch");
  EXPECT_EQ(a.fetch_bytes, 123u);
  const UseRecord& b = usage->at(kB);
  EXPECT_EQ(b.uses, 1u);
  EXPECT_TRUE(b.via.empty());
  // Fetched again as a raw archive: the record of how it arrived is replaced.
  ASSERT_TRUE(
      RecordUses(tmp.path(), {UseEvent{kA, true, "", "archive", 999}}, 1200, 100, &warning).ok());
  usage = ReadUsage(tmp.path(), &warning);
  EXPECT_EQ(usage->at(kA).from, "");
  EXPECT_EQ(usage->at(kA).via, "archive");
  EXPECT_EQ(usage->at(kA).fetch_bytes, 999u);
  EXPECT_EQ(usage->at(kA).uses, 3u);
  // 30 half-lives later, a use of b drops a's record (decayed below 2^-30); b's stays.
  ASSERT_TRUE(RecordUses(tmp.path(), {use_b}, 1200 + 31 * 100, 100, &warning).ok());
  usage = ReadUsage(tmp.path(), &warning);
  EXPECT_EQ(usage->count(kA), 0u);
  EXPECT_EQ(usage->at(kB).uses, 2u);
}

TEST(UsageTest, ACorruptRecordIsSetAsideAndNothingElseIsLost) {
  TempDir tmp;
  Result<LocalStore> store = LocalStore::Open(tmp / "s");
  ASSERT_TRUE(store.ok());
  Result<std::string> staging = store->MakeStagingDir();
  ASSERT_TRUE(staging.ok());
  WriteFileBytes(*staging + "/f", "a");
  ASSERT_TRUE(store->PublishBlob(*staging + "/f", kA).ok());
  ASSERT_TRUE(store->RecordVersion("127.0.0.1:5000", "org/m", kA, 1, "v1").ok());

  for (const std::string& bad :
       {std::string("{not json"), std::string(R"({"versions":{"sha256:zz":{"score":1}}})"),
        std::string(R"({"versions":{")") + kA + R"(":{"score":-1,"updated_at":0}}})",
        std::string(R"({"versions":{")") + kA +
            R"(":{"score":1,"updated_at":-9223372036854775807}}})"}) {
    WriteFileBytes(tmp / "s/usage.json", bad);
    std::string warning;
    Result<UsageMap> read = ReadUsage(store->dir(), &warning);
    ASSERT_TRUE(read.ok());
    EXPECT_TRUE(read->empty());
    EXPECT_NE(warning.find("usage.json"), std::string::npos) << warning;
    EXPECT_EQ(ReadFileBytes(tmp / "s/usage.json"), bad);  // reading changes nothing

    warning.clear();
    ASSERT_TRUE(RecordUses(store->dir(), {UseEvent{kA, false, "", "", 0}}, 50, 100, &warning).ok());
    EXPECT_NE(warning.find("start afresh"), std::string::npos) << warning;
    EXPECT_EQ(ReadFileBytes(tmp / "s/usage.json.corrupt"), bad);
    read = ReadUsage(store->dir(), &warning);
    ASSERT_TRUE(read.ok());
    ASSERT_EQ(read->size(), 1u);
    EXPECT_EQ(read->at(kA).uses, 1u);
    // The blob and its index are untouched.
    EXPECT_TRUE(store->VerifyBlob(kA).ok());
    EXPECT_EQ(store->Versions("127.0.0.1:5000", "org/m")->size(), 1u);
  }
}

TEST(UsageTest, PullEventsSayHowTheVersionArrived) {
  PullResult r;
  r.digest = kA;
  r.full_bytes = 1000;
  r.transfer = "patch";
  r.used_patch = true;
  r.patch_from = kB;
  r.bytes_downloaded = 100;
  r.bytes_resumed = 20;
  std::vector<UseEvent> events = PullUseEvents(r);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].digest, kA);
  EXPECT_TRUE(events[0].fetched);
  EXPECT_EQ(events[0].from, kB);
  EXPECT_EQ(events[0].via, "patch");
  EXPECT_EQ(events[0].fetch_bytes, 120u);
  EXPECT_EQ(events[1].digest, kB);  // the base was used too
  EXPECT_FALSE(events[1].fetched);

  r.transfer = "full-patch";
  r.used_patch = false;
  r.patch_from.clear();
  r.bytes_downloaded = 5000;  // a failed route and retries: capped at the archive
  events = PullUseEvents(r);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].from, "");
  EXPECT_EQ(events[0].fetch_bytes, 1000u);

  r.transfer = "archive";
  r.bytes_downloaded = 10;
  EXPECT_EQ(PullUseEvents(r)[0].fetch_bytes, 1000u);

  r.transfer = "local";
  events = PullUseEvents(r);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].fetched);
}

TEST(UsageTest, ClientNowHonoursBlzNowForTests) {
  EnvGuard env;
  env.Set("BLZ_NOW", "1234567");
  EXPECT_EQ(ClientNow(), 1234567);
  env.Set("BLZ_NOW", "soon");
  EXPECT_GT(ClientNow(), 1700000000);
  env.Unset("BLZ_NOW");
  EXPECT_GT(ClientNow(), 1700000000);
}

TEST(ClientConfigTest, SizesAndDurations) {
  EXPECT_EQ(*ParseByteSize("123", "--budget"), 123u);
  EXPECT_EQ(*ParseByteSize("500MB", "--budget"), 500'000'000u);
  EXPECT_EQ(*ParseByteSize("10GiB", "--budget"), 10ull << 30);
  EXPECT_EQ(*ParseByteSize("2k", "--budget"), 2000u);
  EXPECT_EQ(*ParseByteSize("1tib", "--budget"), 1ull << 40);
  EXPECT_EQ(*ParseByteSize("0", "--budget"), 0u);
  for (const char* bad : {"", "GB", "10 GB", "1.5GB", "10XB", "-1", "99999999999999999TB"}) {
    Result<uint64_t> r = ParseByteSize(bad, "--budget");
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--budget"), std::string::npos);
  }
  EXPECT_EQ(*ParseDuration("90", "--half-life"), 90);
  EXPECT_EQ(*ParseDuration("7d", "--half-life"), 7 * 86400);
  EXPECT_EQ(*ParseDuration("2w", "--half-life"), 14 * 86400);
  EXPECT_EQ(*ParseDuration("12h", "--half-life"), 12 * 3600);
  for (const char* bad : {"", "d", "7days", "7y", "1.5d"}) {
    EXPECT_EQ(ParseDuration(bad, "--half-life").status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(ClientConfigTest, FileGivesBudgetAndHalfLifeAndBadValuesAreNamed) {
  TempDir tmp;
  EnvGuard env;
  env.Set("BLZ_CONFIG_DIR", tmp / "cfg");
  EXPECT_EQ(*ClientConfigPath(), tmp / "cfg/client.json");
  Result<ClientConfig> none = LoadClientConfig();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->budget, 0u);
  EXPECT_EQ(none->half_life, kDefaultHalfLifeSeconds);

  WriteFileBytes(tmp / "cfg/client.json",
                 R"({"cache":{"budget":"2MiB","half_life":"3d"},"future":1})");
  Result<ClientConfig> c = LoadClientConfig();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->budget, 2u << 20);
  EXPECT_EQ(c->half_life, 3 * 86400);
  WriteFileBytes(tmp / "cfg/client.json", R"({"cache":{"budget":5000,"half_life":60}})");
  c = LoadClientConfig();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->budget, 5000u);
  EXPECT_EQ(c->half_life, 60);

  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"{not json", "not a JSON object"},
           {R"({"cache":[]})", "'cache'"},
           {R"({"cache":{"budget":"lots"}})", "cache.budget"},
           {R"({"cache":{"budget":-5}})", "cache.budget"},
           {R"({"cache":{"half_life":"0d"}})", "cache.half_life"},
           {R"({"cache":{"half_life":true}})", "cache.half_life"}}) {
    WriteFileBytes(tmp / "cfg/client.json", text);
    Result<ClientConfig> bad = LoadClientConfig();
    EXPECT_EQ(bad.status().code(), Code::kCorruption) << text;
    EXPECT_NE(bad.status().message().find(key), std::string::npos) << bad.status().ToString();
    EXPECT_NE(bad.status().message().find("client.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace blz::client
