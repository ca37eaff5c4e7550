// Choosing a base (docs/registry-api.md, "Choosing a base"): GET /v2/<name>/blz/bases tells a
// client which of the archives it holds the registry should patch from to reach a version.
//
// The client sends every archive digest it holds (of any repository, from any registry alias:
// its store is keyed by digest); the registry keeps those that are versions of a repository
// the caller may pull from and ranks them by what it knows about the patch each would give:
//   1. same structure as the target (a patch between equal structures is per-tensor XOR; a
//      different structure adds and removes whole tensors);
//   2. a patch already computed and cached: smallest first (a measured size beats a guess);
//   3. a version of the same repository before one of another;
//   4. nearest push time (versions pushed close together tend to be neighbouring fine-tunes);
//   5. the digest, so the order is total and stable.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"

namespace blz::registry {
namespace {

using json = nlohmann::ordered_json;

// At most this many ?have= digests per request (about 4.6 KB of query string).
constexpr size_t kMaxHaveDigests = 64;

struct Candidate {
  store::VersionRecord version;
  bool same_structure = false;
  bool same_repository = false;
  std::optional<uint64_t> patch_size;  // a cached patch from this base to the target
  uint64_t time_distance = 0;          // |created - target created|, seconds
};

bool Better(const Candidate& a, const Candidate& b) {
  if (a.same_structure != b.same_structure) return a.same_structure;
  if (a.patch_size.has_value() != b.patch_size.has_value()) return a.patch_size.has_value();
  if (a.patch_size.has_value() && *a.patch_size != *b.patch_size) {
    return *a.patch_size < *b.patch_size;
  }
  if (a.same_repository != b.same_repository) return a.same_repository;
  if (a.time_distance != b.time_distance) return a.time_distance < b.time_distance;
  return a.version.archive_digest < b.version.archive_digest;
}

// "d1,d2,..." -> digests. Errors: kInvalidArgument naming the bad entry.
Result<std::vector<std::string>> ParseHave(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string d = text.substr(start, comma - start);
    if (!d.empty()) {
      if (!ParseDigest(d).ok()) {
        return InvalidArgument("have: '" + d + "' is not an archive digest (sha256:<64 hex>)");
      }
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
      if (out.size() > kMaxHaveDigests) {
        return InvalidArgument("have: more than " + std::to_string(kMaxHaveDigests) +
                               " digests; send the most promising ones");
      }
    }
    start = comma + 1;
  }
  return out;
}

json VersionJson(const store::VersionRecord& v) {
  json j;
  j["digest"] = v.archive_digest;
  j["repository"] = v.repository;
  j["manifest_digest"] = v.manifest_digest;
  j["size"] = v.archive_size;
  j["structure"] = v.structural_hash.empty() ? json(nullptr) : json(v.structural_hash);
  j["created"] = v.created;
  return j;
}

}  // namespace

Response Registry::GetBases(const Route& route, const RequestHead& /*head*/) {
  std::optional<std::string> to = route.Query("to");
  if (!to.has_value() || !ParseDigest(*to).ok()) {
    return ErrorResponse(OciError::kDigestInvalid,
                         "bases needs ?to=<archive digest> (sha256:<64 lower-case hex>) and "
                         "optionally ?have=<archive digest>,...",
                         nlohmann::json{{"to", to.value_or("")}});
  }
  Result<std::vector<std::string>> have = ParseHave(route.Query("have").value_or(""));
  if (!have.ok()) {
    return ErrorResponse(OciError::kBadRequest, have.status().message());
  }
  Result<store::VersionRecord> target = db_->FindVersion(route.name, *to);
  if (!target.ok()) {
    return ErrorResponse(OciErrorFor(target.status(), ErrorContext::kPatch),
                         target.status().message(), nlohmann::json{{"digest", *to}});
  }

  std::vector<Candidate> candidates;
  for (const std::string& digest : *have) {
    if (digest == *to) continue;
    Result<store::VersionRecord> v = ReadableVersionOf(route, digest);
    if (!v.ok()) {
      if (v.status().code() == Code::kNotFound) continue;  // unknown here, or not readable
      return ErrorResponse(v.status(), ErrorContext::kGeneral);
    }
    Candidate c;
    c.version = std::move(*v);
    c.same_structure = !target->structural_hash.empty() &&
                       c.version.structural_hash == target->structural_hash;
    c.same_repository = c.version.repository == route.name;
    Result<store::PatchRecord> cached = db_->FindPatch(digest, *to);
    if (cached.ok()) {
      c.patch_size = cached->patch_size;
    } else if (cached.status().code() != Code::kNotFound) {
      return ErrorResponse(cached.status(), ErrorContext::kGeneral);
    }
    c.time_distance = uint64_t(std::llabs(c.version.created - target->created));
    candidates.push_back(std::move(c));
  }
  std::sort(candidates.begin(), candidates.end(), Better);

  json bases = json::array();
  for (const Candidate& c : candidates) {
    json j = VersionJson(c.version);
    j["same_structure"] = c.same_structure;
    j["patch_size"] = c.patch_size.has_value() ? json(*c.patch_size) : json(nullptr);
    bases.push_back(std::move(j));
  }
  json doc;
  doc["to"] = VersionJson(*target);
  doc["bases"] = std::move(bases);
  Response res;
  res.body = doc.dump();
  res.Set("Content-Type", "application/json");
  return res;
}

}  // namespace blz::registry
