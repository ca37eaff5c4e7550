// The local store (client/local_store.h): `blz ls` (versions held), `blz cache prune` (by age
// or a byte budget) and `blz cache rm` (one version).
#include <cctype>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "client/cache_prune.h"
#include "client/local_store.h"
#include "client/partial_download.h"
#include "client/progress.h"
#include "core/digest.h"
#include "core/time_format.h"

namespace blz::cli {
namespace {

// "90s", "45m", "12h", "30d", "2w" (a bare number is seconds) -> seconds.
Result<int64_t> ParseAge(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  const std::string unit = text.substr(digits);
  if (digits == 0 || digits > 9 || unit.size() > 1) {
    return InvalidArgument("--older-than '" + text + "': expected a number and a unit (s, m, h, "
                           "d or w), e.g. 30d");
  }
  const int64_t n = std::stoll(text.substr(0, digits));
  switch (unit.empty() ? 's' : unit[0]) {
    case 's': return n;
    case 'm': return n * 60;
    case 'h': return n * 3600;
    case 'd': return n * 86400;
    case 'w': return n * 7 * 86400;
    default:
      return InvalidArgument("--older-than '" + text + "': unknown unit '" + unit +
                             "' (s, m, h, d or w)");
  }
}

nlohmann::json VersionJson(const client::CachedVersion& v) {
  return {{"digest", v.digest},
          {"size", v.size},
          {"last_used", FormatRfc3339UtcSeconds(v.last_used)},
          {"names", v.names}};
}

void PrintVersionLine(const client::CachedVersion& v) {
  std::string names;
  for (size_t i = 0; i < v.names.size(); ++i) names += (i > 0 ? " " : "") + v.names[i];
  if (names.empty()) names = "(no name)";
  std::printf("%s  %10s  %s  %s\n", v.digest.substr(0, 19).c_str(),
              client::FormatBytes(v.size).c_str(), FormatRfc3339UtcSeconds(v.last_used).c_str(),
              Esc(names).c_str());
}

Result<client::LocalStore> OpenStore(const std::string& flag_dir) {
  BLZ_ASSIGN_OR_RETURN(std::string dir, client::LocalStore::ResolveDir(flag_dir));
  return client::LocalStore::Open(dir);
}

void AddLs(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string cache;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("ls", "List the model versions held in the local store");
  sub->add_option("--cache", args->cache, "local store (default: $BLZ_CACHE_DIR, ~/.cache/blz)");
  sub->add_flag("--json", args->json,
                "print {store, bytes, versions:[{digest, size, last_used, names}]}");
  sub->footer(
      "One line per archive (digest, size, last pull, and every registry/repository:tags it\n"
      "was pulled as), most recently used first. The store is keyed by digest: a version\n"
      "pulled under several names is held once, and any of them serves as a patch base.");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(args->cache));
    BLZ_ASSIGN_OR_RETURN(std::vector<client::HeldVersion> held, store.AllVersions());
    std::vector<client::CachedVersion> versions = client::GroupByDigest(held);
    uint64_t total = 0;
    for (const auto& v : versions) total += v.size;
    if (args->json) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& v : versions) list.push_back(VersionJson(v));
      PrintJson({{"store", store.dir()}, {"bytes", total}, {"versions", list}});
      return Status::Ok();
    }
    for (const auto& v : versions) PrintVersionLine(v);
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
    bool dry_run = false;
    bool json = false;
  };
  auto prune_args = std::make_shared<PruneArgs>();
  CLI::App* prune = cache->add_subcommand("prune", "Evict versions by age or a byte budget");
  prune->add_option("--cache", prune_args->cache, "local store");
  prune->add_option("--older-than", prune_args->older_than,
                    "evict versions not pulled for this long (e.g. 30d, 12h, 2w)");
  prune->add_option("--max-size", prune_args->max_size,
                    "then evict the least recently used until the store holds at most this "
                    "(e.g. 50GB, 512MiB)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true));
  prune->add_flag("--dry-run", prune_args->dry_run, "report what would be evicted; keep all");
  prune->add_flag("--json", prune_args->json, "print {evicted, kept, bytes_before, bytes_after}");
  prune->footer(
      "Needs --older-than, --max-size or both. --older-than also removes interrupted\n"
      "downloads (partial/) not resumed for that long. A version is evicted everywhere it is named\n"
      "(all registries and repositories); the next pull of it, or of a version that would\n"
      "have patched from it, downloads more.");
  commands->push_back({prune, [prune_args]() -> Status {
    client::PruneRule rule;
    if (!prune_args->older_than.empty()) {
      BLZ_ASSIGN_OR_RETURN(rule.max_age, ParseAge(prune_args->older_than));
      if (rule.max_age <= 0) return InvalidArgument("--older-than must be positive");
    }
    rule.max_bytes = prune_args->max_size;
    if (rule.max_age == 0 && rule.max_bytes == 0) {
      return InvalidArgument("cache prune: give --older-than, --max-size or both");
    }
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(prune_args->cache));
    BLZ_ASSIGN_OR_RETURN(std::vector<client::HeldVersion> held, store.AllVersions());
    const int64_t now = int64_t(std::time(nullptr));
    client::PrunePlan plan = client::PlanPrune(held, rule, now);
    std::pair<int, uint64_t> partials{0, 0};
    if (!prune_args->dry_run) {
      for (const auto& v : plan.evict) {
        BLZ_RETURN_IF_ERROR(store.ForgetVersion(v.digest).status());
      }
      // Interrupted downloads nobody resumed for that long (docs/client.md).
      if (rule.max_age > 0) partials = client::PartialStore(store.dir()).RemoveIdle(rule.max_age, now);
    }
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
      std::printf("%s", prune_args->dry_run ? "would evict " : "evicted ");
      PrintVersionLine(v);
    }
    std::printf("%s%zu version%s evicted, %s -> %s\n", prune_args->dry_run ? "dry run: " : "",
                plan.evict.size(), plan.evict.size() == 1 ? "" : "s",
                client::FormatBytes(plan.bytes_before).c_str(),
                client::FormatBytes(plan.bytes_after).c_str());
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
  rm->add_option("digest", rm_args->digests, "archive digest(s), sha256:<hex> (see `blz ls`)")
      ->required();
  commands->push_back({rm, [rm_args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, OpenStore(rm_args->cache));
    for (const std::string& d : rm_args->digests) {
      if (!ParseDigest(d).ok()) {
        return InvalidArgument("cache rm: '" + d + "' is not a digest (sha256:<64 hex>)");
      }
    }
    for (const std::string& d : rm_args->digests) {
      if (!store.HasBlob(d)) return NotFound("cache rm: " + d + " is not held (see `blz ls`)");
      BLZ_ASSIGN_OR_RETURN(uint64_t freed, store.ForgetVersion(d));
      std::printf("removed %s (%s)\n", d.c_str(), client::FormatBytes(freed).c_str());
    }
    return Status::Ok();
  }});
}

}  // namespace

void AddCacheCommands(CLI::App& app, std::vector<Command>* commands) {
  AddLs(app, commands);
  AddCache(app, commands);
}

}  // namespace blz::cli
