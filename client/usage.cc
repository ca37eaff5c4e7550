#include "client/usage.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "client/client_config.h"
#include "client/pull.h"
#include "core/digest.h"
#include "core/file_lock.h"
#include "core/file_util.h"

namespace blz::client {
namespace {

// Timestamps and half-lives past this (year 36812) are not believed.
constexpr int64_t kMaxTimestamp = int64_t(1) << 40;

// A record this far decayed (30 half-lives without a use) is dropped when the file is written.
constexpr double kForgottenScore = 1.0 / double(1 << 30);

std::string UsagePath(const std::string& store_dir) { return store_dir + "/usage.json"; }

// Parses usage.json text; false (and *why) when it is not a valid usage record. Entries with an
// invalid digest or fields of the wrong type make the whole file invalid: it is then set aside
// rather than half-trusted.
bool ParseUsage(const std::string& text, UsageMap* out, std::string* why) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    *why = "not a JSON object";
    return false;
  }
  if (!doc.contains("versions")) return true;
  if (!doc["versions"].is_object()) {
    *why = "'versions' is not an object";
    return false;
  }
  try {
    for (const auto& [digest, v] : doc["versions"].items()) {
      if (!ParseDigest(digest).ok()) {
        *why = "invalid digest '" + digest + "'";
        return false;
      }
      UseRecord r;
      r.score = v.at("score").get<double>();
      r.updated_at = v.at("updated_at").get<int64_t>();
      r.half_life = v.value("half_life", kDefaultHalfLifeSeconds);
      r.uses = v.value("uses", uint64_t{0});
      r.from = v.value("from", std::string());
      r.via = v.value("via", std::string());
      r.fetch_bytes = v.value("fetch_bytes", uint64_t{0});
      if (!std::isfinite(r.score) || r.score < 0 || r.half_life <= 0 ||
          r.half_life > kMaxTimestamp || r.updated_at < 0 || r.updated_at > kMaxTimestamp ||
          (!r.from.empty() && !ParseDigest(r.from).ok())) {
        *why = "invalid entry for " + digest;
        return false;
      }
      (*out)[digest] = std::move(r);
    }
  } catch (const nlohmann::json::exception& e) {
    *why = e.what();
    return false;
  }
  return true;
}

std::string SerializeUsage(const UsageMap& usage) {
  nlohmann::ordered_json versions = nlohmann::ordered_json::object();
  for (const auto& [digest, r] : usage) {
    nlohmann::ordered_json e;
    e["score"] = r.score;
    e["updated_at"] = r.updated_at;
    e["half_life"] = r.half_life;
    e["uses"] = r.uses;
    e["from"] = r.from;
    e["via"] = r.via;
    e["fetch_bytes"] = r.fetch_bytes;
    versions[digest] = std::move(e);
  }
  nlohmann::ordered_json doc;
  doc["versions"] = std::move(versions);
  return doc.dump(1) + "\n";
}

}  // namespace

int64_t ClientNow() {
  if (const char* env = std::getenv("BLZ_NOW"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(env, &end, 10);
    if (errno == 0 && end != nullptr && *end == '\0' && v >= 0) return int64_t(v);
  }
  return int64_t(std::time(nullptr));
}

double DecayedFrequency(const UseRecord& record, int64_t now, int64_t half_life) {
  if (record.score <= 0) return 0;
  const double dt = std::max(0.0, double(now) - double(record.updated_at));
  return record.score * std::exp2(-dt / double(half_life));
}

UseRecord AddUse(UseRecord record, int64_t at, int64_t half_life) {
  record.score = DecayedFrequency(record, at, half_life) + 1.0;
  record.updated_at = std::max(record.updated_at, at);
  record.half_life = half_life;
  record.uses += 1;
  return record;
}

Result<UsageMap> ReadUsage(const std::string& store_dir, std::string* warning) {
  UsageMap usage;
  const std::string path = UsagePath(store_dir);
  Result<std::string> text = ReadSmallFile(path, kMaxUsageFileBytes);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return usage;
    if (text.status().code() == Code::kIOError) return text.status();
    *warning = path + ": " + text.status().message() + "; use counts start afresh";
    return usage;
  }
  std::string why;
  if (!ParseUsage(*text, &usage, &why)) {
    *warning = path + ": unreadable (" + why + "); use counts start afresh";
    return UsageMap{};
  }
  return usage;
}

Status RecordUses(const std::string& store_dir, const std::vector<UseEvent>& events, int64_t at,
                  int64_t half_life, std::string* warning) {
  if (events.empty()) return Status::Ok();
  BLZ_ASSIGN_OR_RETURN(FileLock lock, FileLock::Wait(store_dir + "/usage.lock"));
  const std::string path = UsagePath(store_dir);
  std::string read_warning;
  BLZ_ASSIGN_OR_RETURN(UsageMap usage, ReadUsage(store_dir, &read_warning));
  if (!read_warning.empty()) {
    // Keep the bad file for inspection; the record starts fresh.
    const std::string aside = path + ".corrupt";
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      return IOError(path + ": cannot move the unreadable usage record aside: " +
                     std::strerror(errno));
    }
    *warning = read_warning + " (the old file is " + aside + ")";
  }
  for (const UseEvent& e : events) {
    if (!ParseDigest(e.digest).ok()) continue;
    UseRecord& r = usage[e.digest];
    r = AddUse(r, at, half_life);
    if (e.fetched) {
      r.from = e.from;
      r.via = e.via;
      r.fetch_bytes = e.fetch_bytes;
    }
  }
  std::erase_if(usage, [&](const auto& entry) {
    return DecayedFrequency(entry.second, at, half_life) < kForgottenScore;
  });
  return WriteFileAtomic(path, SerializeUsage(usage));
}

std::vector<UseEvent> PullUseEvents(const PullResult& result) {
  std::vector<UseEvent> events;
  UseEvent self;
  self.digest = result.digest;
  if (result.transfer != "local" && !result.transfer.empty()) {
    self.fetched = true;
    self.via = result.transfer;
    self.from = result.used_patch ? result.patch_from : std::string();
    self.fetch_bytes = result.transfer == "archive"
                           ? result.full_bytes
                           : std::min(result.full_bytes,
                                      result.bytes_downloaded + result.bytes_resumed);
  }
  events.push_back(std::move(self));
  if (result.used_patch && !result.patch_from.empty() && result.patch_from != result.digest) {
    UseEvent base;
    base.digest = result.patch_from;
    events.push_back(std::move(base));
  }
  return events;
}

Status RecordUsesNow(const std::string& store_dir, const std::vector<UseEvent>& events,
                     std::string* warning) {
  int64_t half_life = kDefaultHalfLifeSeconds;
  Result<ClientConfig> config = LoadClientConfig();
  if (config.ok()) {
    half_life = config->half_life;
  } else {
    *warning = config.status().message() + "; using the default half-life";
  }
  std::string record_warning;
  Status s = RecordUses(store_dir, events, ClientNow(), half_life, &record_warning);
  if (!record_warning.empty()) {
    *warning += (warning->empty() ? "" : "; ") + record_warning;
  }
  return s;
}

Status RecordPullUse(const std::string& store_dir, const PullResult& result,
                     std::string* warning) {
  return RecordUsesNow(store_dir, PullUseEvents(result), warning);
}

}  // namespace blz::client
