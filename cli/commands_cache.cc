// The local store (client/local_store.h): `blz ls` (versions held, with their utility),
// `blz cache prune` (by age, a least-recently-used byte limit, or a budget by utility:
// client/cache_prune.h) and `blz cache rm` (one version); the automatic budget after a pull.
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "client/cache_prune.h"
#include "client/client_config.h"
#include "client/local_ref.h"
#include "client/local_store.h"
#include "client/partial_download.h"
#include "client/progress.h"
#include "client/usage.h"
#include "core/digest.h"
#include "core/time_format.h"

namespace blz::cli {
namespace {

nlohmann::json VersionJson(const client::CachedVersion& v) {
  return {{"digest", v.digest},
          {"size", v.size},
          {"last_used", FormatRfc3339UtcSeconds(v.last_used)},
          {"names", v.names}};
}

std::string NamesOf(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i > 0 ? " " : "") + names[i];
  return out.empty() ? "(no name)" : out;
}

void PrintVersionLine(const client::CachedVersion& v) {
  std::printf("%s  %10s  %s  %s\n", v.digest.substr(0, 19).c_str(),
              client::FormatBytes(v.size).c_str(), FormatRfc3339UtcSeconds(v.last_used).c_str(),
              Esc(NamesOf(v.names)).c_str());
}

Result<client::LocalStore> OpenStore(const std::string& flag_dir) {
  BLZ_ASSIGN_OR_RETURN(std::string dir, client::LocalStore::ResolveDir(flag_dir));
  return client::LocalStore::Open(dir);
}

// The client config, or its defaults with a note when it cannot be read.
client::ClientConfig ConfigOrDefaults() {
  Result<client::ClientConfig> config = client::LoadClientConfig();
  if (config.ok()) return *config;
  Note(config.status().message() + "; using the defaults");
  return client::ClientConfig{};
}

client::UsageMap UsageOrEmpty(const client::LocalStore& store) {
  std::string warning;
  Result<client::UsageMap> usage = client::ReadUsage(store.dir(), &warning);
  if (!warning.empty()) Note(warning);
  if (!usage.ok()) {
    Note(usage.status().ToString() + "; use counts ignored");
    return {};
  }
  return *usage;
}

std::string Num(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

nlohmann::json UtilityJson(const client::VersionUtility& v) {
  nlohmann::json j = {{"digest", v.digest},
                      {"size", v.size},
                      {"last_used", FormatRfc3339UtcSeconds(v.last_used)},
                      {"names", v.names},
                      {"uses", v.uses},
                      {"score", v.frequency},
                      {"gain", v.gain},
                      {"utility", v.utility},
                      {"base", v.base.empty() ? nlohmann::json() : nlohmann::json(v.base)},
                      {"base_held", v.base_held}};
  if (!v.reason.empty()) j["reason"] = v.reason;
  return j;
}

// DIGEST SIZE USES SCORE GAIN UTILITY, shared by ls and prune --budget.
std::string UtilityColumns(const client::VersionUtility& v) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s  %10s  %5llu  %7s  %10s  %8s", v.digest.substr(0, 19).c_str(),
                client::FormatBytes(v.size).c_str(), static_cast<unsigned long long>(v.uses),
                Num("%.3f", v.frequency).c_str(), client::FormatBytes(v.gain).c_str(),
                Num("%.4g", v.utility).c_str());
  return buf;
}

void AddLs(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string cache;
    std::string half_life;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("ls", "List the model versions held in the local store");
  sub->add_option("--cache", args->cache, "local store (default: $BLZ_CACHE_DIR, ~/.cache/blz)");
  sub->add_option("--half-life", args->half_life,
                  "half-life of the use score (e.g. 7d; default: client.json cache.half_life, "
                  "else 7d)");
  sub->add_flag("--json", args->json,
                "print {store, bytes, half_life, versions:[{digest, size, last_used, names, uses, "
                "score, gain, utility, base, base_held}]}");
  sub->footer(
      "One line per archive (digest, size, last pull, uses, decayed use score, gain, utility,\n"
      "and every registry/repository:tags it was pulled as), most recently used first.\n"
      "utility = score x gain / size, where gain is the bytes a re-download would cost\n"
      "(docs/client.md, \"Budgeted store\"); `blz cache prune --budget` evicts the lowest.\n"
      "The store is keyed by digest: a version pulled under several names is held once, and\n"
      "any of them serves as a patch base.");
  commands->push_back({sub, [args]() -> Status {
    int64_t half_life = 0;
    if (!args->half_life.empty()) {
      BLZ_ASSIGN_OR_RETURN(half_life, client::ParseDuration(args->half_life, "--half-life"));
      if (half_life <= 0) return InvalidArgument("--half-life must be positive");
    }
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(args->cache));
    BLZ_ASSIGN_OR_RETURN(std::vector<client::HeldVersion> held, store.AllVersions());
    if (half_life == 0) half_life = ConfigOrDefaults().half_life;
    std::vector<client::VersionUtility> versions =
        client::ComputeUtilities(held, UsageOrEmpty(store), client::ClientNow(), half_life);
    std::stable_sort(versions.begin(), versions.end(),
                     [](const client::VersionUtility& a, const client::VersionUtility& b) {
                       return a.last_used > b.last_used;
                     });
    uint64_t total = 0;
    for (const auto& v : versions) total += v.size;
    if (args->json) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& v : versions) list.push_back(UtilityJson(v));
      PrintJson({{"store", store.dir()}, {"bytes", total}, {"half_life", half_life},
                 {"versions", list}});
      return Status::Ok();
    }
    if (!versions.empty()) {
      std::printf("%-19s  %10s  %5s  %7s  %10s  %8s  %-20s  %s\n", "DIGEST", "SIZE", "USES",
                  "SCORE", "GAIN", "UTILITY", "LAST PULL", "NAMES");
    }
    for (const auto& v : versions) {
      std::printf("%s  %-20s  %s\n", UtilityColumns(v).c_str(),
                  FormatRfc3339UtcSeconds(v.last_used).c_str(), Esc(NamesOf(v.names)).c_str());
    }
    std::printf("%zu version%s, %s in %s\n", versions.size(), versions.size() == 1 ? "" : "s",
                client::FormatBytes(total).c_str(), Esc(store.dir()).c_str());
    return Status::Ok();
  }});
}

void AddCache(CLI::App& app, std::vector<Command>* commands) {
  CLI::App* cache = app.add_subcommand("cache", "Manage the local store (prune, rm)");
  cache->require_subcommand(1);

  struct PruneArgs {
    std::string cache;
    std::string older_than;
    uint64_t max_size = 0;
    std::string budget;
    std::string half_life;
    bool dry_run = false;
    bool json = false;
  };
  auto prune_args = std::make_shared<PruneArgs>();
  CLI::App* prune =
      cache->add_subcommand("prune", "Evict versions by age, a byte limit or a budget by utility");
  prune->add_option("--cache", prune_args->cache, "local store");
  prune->add_option("--older-than", prune_args->older_than,
                    "evict versions not pulled for this long (e.g. 30d, 12h, 2w)");
  prune->add_option("--max-size", prune_args->max_size,
                    "then evict the least recently used until the store holds at most this "
                    "(e.g. 50GB, 512MiB)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true));
  prune->add_option("--budget", prune_args->budget,
                    "then evict the versions of lowest utility (use score x gain / size) until "
                    "the store holds at most this (e.g. 10GiB, 500MB, or bytes)");
  prune->add_option("--half-life", prune_args->half_life,
                    "with --budget: half-life of the use score (e.g. 7d; default: client.json "
                    "cache.half_life, else 7d)");
  prune->add_flag("--dry-run", prune_args->dry_run,
                  "report what would be evicted (with --budget: every version's utility and "
                  "why it goes or stays); keep all");
  prune->add_flag("--json", prune_args->json, "print {evicted, kept, bytes_before, bytes_after}");
  prune->footer(
      "Needs --older-than, --max-size or --budget (--older-than combines with either).\n"
      "--older-than also removes interrupted downloads (partial/) not resumed for that long.\n"
      "--budget: utility = decayed use frequency x gain / size, gain = the bytes getting the\n"
      "version back would cost (its recorded patch from a base still held, else its full\n"
      "download); a base is only evicted together with the versions whose gain assumes it\n"
      "(docs/client.md, \"Budgeted store\"). A version is evicted everywhere it is named\n"
      "(all registries and repositories); the next pull of it, or of a version that would\n"
      "have patched from it, downloads more.");
  commands->push_back({prune, [prune_args]() -> Status {
    const bool by_budget = !prune_args->budget.empty();
    client::BudgetRule budget_rule;
    client::PruneRule rule;
    if (!prune_args->older_than.empty()) {
      BLZ_ASSIGN_OR_RETURN(rule.max_age, client::ParseDuration(prune_args->older_than, "--older-than"));
      if (rule.max_age <= 0) return InvalidArgument("--older-than must be positive");
    }
    rule.max_bytes = prune_args->max_size;
    if (by_budget && rule.max_bytes > 0) {
      return InvalidArgument("cache prune: --budget and --max-size exclude each other "
                             "(--max-size evicts the least recently used, --budget by utility)");
    }
    if (!by_budget && !prune_args->half_life.empty()) {
      return InvalidArgument("cache prune: --half-life applies to --budget only");
    }
    if (by_budget) {
      BLZ_ASSIGN_OR_RETURN(budget_rule.budget,
                           client::ParseByteSize(prune_args->budget, "--budget"));
      budget_rule.max_age = rule.max_age;
      if (!prune_args->half_life.empty()) {
        BLZ_ASSIGN_OR_RETURN(budget_rule.half_life,
                             client::ParseDuration(prune_args->half_life, "--half-life"));
        if (budget_rule.half_life <= 0) return InvalidArgument("--half-life must be positive");
      }
    }
    if (!by_budget && rule.max_age == 0 && rule.max_bytes == 0) {
      return InvalidArgument("cache prune: give --older-than, --max-size or --budget");
    }
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(prune_args->cache));
    BLZ_ASSIGN_OR_RETURN(std::vector<client::HeldVersion> held, store.AllVersions());
    const int64_t now = client::ClientNow();
    std::vector<std::string> doomed;
    client::PrunePlan plan;
    client::BudgetPlan budget_plan;
    if (by_budget) {
      if (prune_args->half_life.empty()) budget_rule.half_life = ConfigOrDefaults().half_life;
      budget_plan = client::PlanBudgetPrune(held, UsageOrEmpty(store), budget_rule, now);
      for (const auto& v : budget_plan.evict) doomed.push_back(v.digest);
    } else {
      plan = client::PlanPrune(held, rule, now);
      for (const auto& v : plan.evict) doomed.push_back(v.digest);
    }
    std::pair<int, uint64_t> partials{0, 0};
    if (!prune_args->dry_run) {
      for (const std::string& d : doomed) BLZ_RETURN_IF_ERROR(store.ForgetVersion(d).status());
      // Interrupted downloads nobody resumed for that long (docs/client.md).
      if (rule.max_age > 0) partials = client::PartialStore(store.dir()).RemoveIdle(rule.max_age, now);
    }
    const char* evict_verb = prune_args->dry_run ? "would evict" : "evicted";
    if (by_budget) {
      if (prune_args->json) {
        nlohmann::json evicted = nlohmann::json::array(), kept = nlohmann::json::array();
        for (const auto& v : budget_plan.evict) evicted.push_back(UtilityJson(v));
        for (const auto& v : budget_plan.keep) kept.push_back(UtilityJson(v));
        PrintJson({{"dry_run", prune_args->dry_run},
                   {"budget", budget_rule.budget},
                   {"half_life", budget_rule.half_life},
                   {"budget_met", budget_plan.budget_met},
                   {"evicted", evicted},
                   {"kept", kept},
                   {"bytes_before", budget_plan.bytes_before},
                   {"bytes_after", budget_plan.bytes_after},
                   {"partial_downloads_removed", partials.first},
                   {"partial_bytes_freed", partials.second}});
        return Status::Ok();
      }
      std::printf("%-11s  %-19s  %10s  %5s  %7s  %10s  %8s  %s\n", "", "DIGEST", "SIZE", "USES",
                  "SCORE", "GAIN", "UTILITY", "WHY");
      for (const auto& v : budget_plan.evict) {
        std::printf("%-11s  %s  %s  [%s]\n", evict_verb, UtilityColumns(v).c_str(),
                    v.reason.c_str(), Esc(NamesOf(v.names)).c_str());
      }
      for (const auto& v : budget_plan.keep) {
        std::printf("%-11s  %s  %s  [%s]\n", "keep", UtilityColumns(v).c_str(), v.reason.c_str(),
                    Esc(NamesOf(v.names)).c_str());
      }
      std::printf("%s%zu version%s evicted, %s -> %s (budget %s, half-life %s)%s\n",
                  prune_args->dry_run ? "dry run: " : "", budget_plan.evict.size(),
                  budget_plan.evict.size() == 1 ? "" : "s",
                  client::FormatBytes(budget_plan.bytes_before).c_str(),
                  client::FormatBytes(budget_plan.bytes_after).c_str(),
                  client::FormatBytes(budget_rule.budget).c_str(),
                  Num("%.4gd", double(budget_rule.half_life) / 86400).c_str(),
                  budget_plan.budget_met ? "" : "; budget not reached");
    } else {
      if (prune_args->json) {
        nlohmann::json evicted = nlohmann::json::array(), kept = nlohmann::json::array();
        for (const auto& v : plan.evict) evicted.push_back(VersionJson(v));
        for (const auto& v : plan.keep) kept.push_back(VersionJson(v));
        PrintJson({{"dry_run", prune_args->dry_run},
                   {"evicted", evicted},
                   {"kept", kept},
                   {"bytes_before", plan.bytes_before},
                   {"bytes_after", plan.bytes_after},
                   {"partial_downloads_removed", partials.first},
                   {"partial_bytes_freed", partials.second}});
        return Status::Ok();
      }
      for (const auto& v : plan.evict) {
        std::printf("%s ", evict_verb);
        PrintVersionLine(v);
      }
      std::printf("%s%zu version%s evicted, %s -> %s\n", prune_args->dry_run ? "dry run: " : "",
                  plan.evict.size(), plan.evict.size() == 1 ? "" : "s",
                  client::FormatBytes(plan.bytes_before).c_str(),
                  client::FormatBytes(plan.bytes_after).c_str());
    }
    if (partials.first > 0) {
      std::printf("%d interrupted download%s removed, %s freed\n", partials.first,
                  partials.first == 1 ? "" : "s", client::FormatBytes(partials.second).c_str());
    }
    return Status::Ok();
  }});

  struct RmArgs {
    std::string cache;
    std::vector<std::string> digests;
  };
  auto rm_args = std::make_shared<RmArgs>();
  CLI::App* rm = cache->add_subcommand("rm", "Remove versions from the local store by digest");
  rm->add_option("--cache", rm_args->cache, "local store");
  rm->footer("The version's snapshot directories (`blz pull` without -o) go with it, and the\n"
             "unpacked files no other snapshot shares.");
  rm->add_option("digest", rm_args->digests,
                 "archive digest(s), sha256:<hex>; a unique prefix of 12+ hex digits will do, as "
                 "`blz ls` prints it")
      ->required();
  commands->push_back({rm, [rm_args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(rm_args->cache));
    // Full digests, or short ones as `blz ls` prints them (a unique prefix of 12+ hex digits).
    std::vector<std::string> digests;
    for (const std::string& d : rm_args->digests) {
      const std::string prefix = client::AsDigestPrefix(d);
      if (prefix.empty()) {
        return InvalidArgument("cache rm: '" + d + "' is not a digest (sha256:<hex>, at least 12 "
                               "hex digits, as `blz ls` prints it)");
      }
      if (ParseDigest(prefix).ok()) {
        digests.push_back(prefix);
        continue;
      }
      Result<client::HeldVersion> held =
          client::FindHeldByPrefix(store, client::Reference{}, prefix);
      if (!held.ok()) {
        if (held.status().code() == Code::kNotFound) {
          return NotFound("cache rm: " + d + " is not held (see `blz ls`)");
        }
        return held.status().WithContext("cache rm");
      }
      digests.push_back(held->digest);
    }
    for (const std::string& d : digests) {
      if (!store.Holds(d)) return NotFound("cache rm: " + d + " is not held (see `blz ls`)");
      BLZ_ASSIGN_OR_RETURN(uint64_t freed, store.ForgetVersion(d));
      std::printf("removed %s (%s)\n", d.c_str(), client::FormatBytes(freed).c_str());
    }
    return Status::Ok();
  }});
}

}  // namespace

std::vector<std::string> AutoPruneAfterPull(const std::string& cache_flag,
                                            const std::string& pulled_digest,
                                            const std::string& pulled_base) {
  Result<client::ClientConfig> config = client::LoadClientConfig();
  if (!config.ok()) {
    Note(config.status().message() + "; no automatic prune");
    return {};
  }
  if (config->budget == 0) return {};
  Result<client::LocalStore> store = OpenStore(cache_flag);
  Result<std::vector<client::HeldVersion>> held =
      store.ok() ? store->AllVersions() : Result<std::vector<client::HeldVersion>>(store.status());
  if (!held.ok()) {
    Note("automatic prune skipped: " + held.status().ToString());
    return {};
  }
  client::BudgetRule rule;
  rule.budget = config->budget;
  rule.half_life = config->half_life;
  rule.protect = {pulled_digest};
  if (!pulled_base.empty()) rule.protect.push_back(pulled_base);
  client::BudgetPlan plan =
      client::PlanBudgetPrune(*held, UsageOrEmpty(*store), rule, client::ClientNow());
  std::vector<std::string> evicted;
  const std::string budget = client::FormatBytes(rule.budget) + " (cache.budget in " +
                             config->path + ")";
  for (const client::VersionUtility& v : plan.evict) {
    Result<uint64_t> freed = store->ForgetVersion(v.digest);
    if (!freed.ok()) {
      Note("automatic prune stopped: " + freed.status().ToString());
      break;
    }
    evicted.push_back(v.digest);
    Note("budget " + budget + ": evicted " + v.digest + " (" + client::FormatBytes(v.size) +
         ", utility " + Num("%.4g", v.utility) + "): " + v.reason);
  }
  if (!plan.budget_met) {
    Note("budget " + budget + " not reached: the store holds " +
         client::FormatBytes(plan.bytes_after) +
         " that the version just pulled and its base need");
  }
  return evicted;
}

Result<client::Reference> ResolveLocalReference(const std::string& text,
                                                const RegistryConnectionArgs& conn,
                                                const std::string& cache_flag, bool offline,
                                                int timeout_seconds) {
  BLZ_ASSIGN_OR_RETURN(client::LooseReference loose,
                       client::ParseLooseReference(text, AddressDefaultsFor(conn)));
  if (loose.digest_prefix.empty()) return loose.ref;
  BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(cache_flag));
  std::unique_ptr<client::RegistryClient> registry;
  if (!offline) {
    BLZ_ASSIGN_OR_RETURN(registry, RegistryClientFor(loose.ref.registry, conn, timeout_seconds,
                                                     /*require_token=*/false));
  }
  return client::ResolveDigestPrefix(store, loose, registry.get());
}

namespace {

void AddTag(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string source, target, cache;
    RegistryConnectionArgs conn;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "tag", "Give a version held in the local store another name (like `docker tag`)");
  sub->add_option("source", args->source,
                  "a held version: [HOST[:PORT]/]NAME[:TAG], NAME@sha256:<hex>, or a digest "
                  "(sha256:<12+ hex>) as `blz ls` prints it")
      ->required();
  sub->add_option("target", args->target, "the new name, [HOST[:PORT]/]NAME[:TAG]")->required();
  sub->add_option("--cache", args->cache, "local store");
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->footer(
      "Local only: nothing is sent to a registry (push the version to publish the name).\n"
      "The new name can then be pulled (from the store: `blz pull --offline TARGET`), used\n"
      "as a base, and is listed by `blz ls`. A tag already on another version moves.");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::Reference dst, ResolveReference(args->target, args->conn));
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(args->cache));
    client::HeldVersion v;
    const std::string bare = client::AsDigestPrefix(args->source);
    if (!bare.empty() && args->source.find('/') == std::string::npos) {
      // A digest (as `blz ls` prints it), whatever name the version is held under.
      if (dst.by_digest()) return InvalidArgument("tag: the new name needs a tag (NAME:TAG)");
      BLZ_ASSIGN_OR_RETURN(v, client::FindHeldByPrefix(store, dst, bare));
      BLZ_RETURN_IF_ERROR(store.RecordVersion(dst.registry.ToString(), dst.name, v.digest, v.size,
                                              dst.tag, v.manifest_digest));
    } else {
      BLZ_ASSIGN_OR_RETURN(client::LooseReference src,
                           client::ParseLooseReference(args->source,
                                                       AddressDefaultsFor(args->conn)));
      BLZ_ASSIGN_OR_RETURN(v, client::TagLocally(&store, src, dst));
    }
    std::printf("tagged %s as %s\n", Esc(v.digest).c_str(), Esc(dst.ToString()).c_str());
    return Status::Ok();
  }});
}

}  // namespace

void AddCacheCommands(CLI::App& app, std::vector<Command>* commands) {
  AddLs(app, commands);
  AddCache(app, commands);
  AddTag(app, commands);
}

}  // namespace blz::cli
