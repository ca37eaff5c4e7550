// Choosing a base (docs/registry-api.md, "Choosing a base"): GET /v2/<name>/blz/bases tells a
// client which of the archives it holds the registry should patch from to reach a version.
//
// The client sends every archive digest it holds (of any repository, from any registry alias:
// its store is keyed by digest); the registry keeps those that are versions of a repository
// the caller may pull from AND of the target's lineage (issue 24: TinyStories Llama was
// patched from tiny-gpt2), and ranks them by what it knows about the patch each would give.
// A candidate is of the same lineage when it has the target's structure, or is a version of
// the same repository, or shares most of the target's tensors (at least kMinSharedFraction of
// the target's tensor bytes are in tensors of the same name, dtype and shape in the candidate,
// or identical to one of its tensors whatever its name: formats/tensor_share.h; read from the
// archive headers, for at most kMaxHeaderReads such candidates). Anything else
// is left out: with no related base the client downloads the version's full patch instead.
// The order:
//   1. same structure as the target (a patch between equal structures is per-tensor XOR; a
//      different structure adds and removes whole tensors);
//   2. a patch already computed and cached: smallest first (a measured size beats a guess);
//   3. a version of the same repository before one of another;
//   4. the larger share of the target's tensor bytes;
//   5. nearest push time (versions pushed close together tend to be neighbouring fine-tunes);
//   6. the digest, so the order is total and stable.
// Each base (and the target) is named in the answer as "name": NAME:TAG, or NAME@<12 hex of
// the archive digest> when no tag points at it, so clients report it by name.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/tensor_share.h"
#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"

namespace blz::registry {
namespace {

using json = nlohmann::ordered_json;

// At most this many ?have= digests per request (about 4.6 KB of query string).
constexpr size_t kMaxHaveDigests = 64;
// A base of another repository and structure is related when it shares at least this share of
// the target's tensor bytes (formats/tensor_share.h).
constexpr double kMinSharedFraction = 0.5;
// Archive headers read per request to measure that share (each may need a rebuild of a
// version stored as a full patch); candidates past it are left out.
constexpr size_t kMaxHeaderReads = 8;

struct Candidate {
  store::VersionRecord version;
  bool same_structure = false;
  bool same_repository = false;
  double shared = 0;                   // share of the target's tensor bytes (1 = same structure)
  std::optional<uint64_t> patch_size;  // a cached patch from this base to the target
  uint64_t time_distance = 0;          // |created - target created|, seconds
  size_t offered = 0;  // push bases: the position in the client's `have` (its best guess first)
};

bool Better(const Candidate& a, const Candidate& b) {
  if (a.same_structure != b.same_structure) return a.same_structure;
  if (a.patch_size.has_value() != b.patch_size.has_value()) return a.patch_size.has_value();
  if (a.patch_size.has_value() && *a.patch_size != *b.patch_size) {
    return *a.patch_size < *b.patch_size;
  }
  if (a.same_repository != b.same_repository) return a.same_repository;
  if (a.shared != b.shared) return a.shared > b.shared;
  if (a.time_distance != b.time_distance) return a.time_distance < b.time_distance;
  // Versions pushed within the same second: the client's order (the newest it holds first).
  if (a.offered != b.offered) return a.offered < b.offered;
  return a.version.archive_digest < b.version.archive_digest;
}

// "d1,d2,..." (the query parameter `param`) -> digests. Errors: kInvalidArgument naming the
// bad entry.
Result<std::vector<std::string>> ParseHave(const std::string& text,
                                           const std::string& param = "have") {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string d = text.substr(start, comma - start);
    if (!d.empty()) {
      if (!ParseDigest(d).ok()) {
        return InvalidArgument(param + ": '" + d +
                               "' is not an archive digest (sha256:<64 hex>)");
      }
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
      if (out.size() > kMaxHaveDigests) {
        return InvalidArgument(param + ": more than " + std::to_string(kMaxHaveDigests) +
                               " digests; send the most promising ones");
      }
    }
    start = comma + 1;
  }
  return out;
}

}  // namespace

namespace internal {

std::string VersionDisplayName(const std::string& repository, const std::string& archive_digest,
                               const std::vector<std::string>& tags) {
  if (!tags.empty()) {
    // "latest" when it is one of them, else the first (the listing's order).
    const std::string& tag =
        std::find(tags.begin(), tags.end(), "latest") != tags.end() ? "latest" : tags.front();
    return repository + ":" + tag;
  }
  const size_t colon = archive_digest.find(':');
  return repository + "@" + archive_digest.substr(colon == std::string::npos ? 0 : colon + 1, 12);
}

}  // namespace internal

namespace {

using internal::VersionDisplayName;

json VersionJson(const store::VersionRecord& v, const std::string& name) {
  json j;
  j["digest"] = v.archive_digest;
  j["name"] = name;
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
  if (!to.has_value() && route.Query("push").has_value()) return GetPushBases(route);
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

  // Display names: NAME:TAG or NAME@short-digest (tags looked up once per repository).
  std::map<std::string, std::vector<store::TagTarget>> tags_by_repo;
  auto name_of = [&](const store::VersionRecord& v) -> Result<std::string> {
    auto it = tags_by_repo.find(v.repository);
    if (it == tags_by_repo.end()) {
      BLZ_ASSIGN_OR_RETURN(std::vector<store::TagTarget> tags, db_->ListTagTargets(v.repository));
      it = tags_by_repo.emplace(v.repository, std::move(tags)).first;
    }
    std::vector<std::string> names;
    for (const store::TagTarget& t : it->second) {
      if (t.manifest_digest == v.manifest_digest) names.push_back(t.tag);
    }
    return VersionDisplayName(v.repository, v.archive_digest, names);
  };
  // The target's header, read once when a candidate needs it.
  std::optional<formats::ArchiveHeader> target_header;
  size_t header_reads = 0;
  auto header_of = [&](const std::string& digest) -> std::optional<formats::ArchiveHeader> {
    std::string path;
    Response ignored;
    if (!ArchiveFile(digest, &path, &ignored)) return std::nullopt;
    Result<formats::BlzArchive> a = formats::BlzArchive::Open(path);
    if (!a.ok()) return std::nullopt;
    return a->header();
  };

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
    if (c.same_structure) {
      c.shared = 1;
    } else {
      // Another structure: how much of the target it holds (headers only). Unrelated
      // versions (another architecture) are never offered as bases.
      if (header_reads >= kMaxHeaderReads && !c.same_repository) continue;
      ++header_reads;
      if (!target_header.has_value()) target_header = header_of(*to);
      std::optional<formats::ArchiveHeader> mine = header_of(digest);
      if (target_header.has_value() && mine.has_value()) {
        c.shared = formats::ShareOf(*target_header, *mine).fraction();
      }
      if (!c.same_repository && c.shared < kMinSharedFraction) continue;
    }
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
    Result<std::string> name = name_of(c.version);
    if (!name.ok()) return ErrorResponse(name.status(), ErrorContext::kGeneral);
    json j = VersionJson(c.version, *name);
    j["same_structure"] = c.same_structure;
    j["same_repository"] = c.same_repository;
    j["shared_fraction"] = c.shared;
    j["patch_size"] = c.patch_size.has_value() ? json(*c.patch_size) : json(nullptr);
    bases.push_back(std::move(j));
  }
  Result<std::string> target_name = name_of(*target);
  if (!target_name.ok()) return ErrorResponse(target_name.status(), ErrorContext::kGeneral);
  json doc;
  doc["to"] = VersionJson(*target, *target_name);
  doc["bases"] = std::move(bases);
  Response res;
  res.body = doc.dump();
  res.Set("Content-Type", "application/json");
  return res;
}

// Push mode (docs/registry-api.md, "Choosing a base for a push"): the version is not pushed
// yet, so there is no target to read. Of the `have` archives that are versions the caller may
// read, those of the same structure (?structure=, the pushed archive's structural hash), of
// this repository, or that the client found to hold most of the pushed archive's tensors
// (?related=, a subset of `have`: formats/tensor_share.h on its own copies) are bases,
// ranked: same structure, a version of this repository, related, the most recent push (a new
// version is nearest to the latest ones), the client's order, the digest.
Response Registry::GetPushBases(const Route& route) {
  Result<std::vector<std::string>> have = ParseHave(route.Query("have").value_or(""));
  if (!have.ok()) return ErrorResponse(OciError::kBadRequest, have.status().message());
  Result<std::vector<std::string>> related =
      ParseHave(route.Query("related").value_or(""), "related");
  if (!related.ok()) return ErrorResponse(OciError::kBadRequest, related.status().message());
  const std::string structure = route.Query("structure").value_or("");
  if (!structure.empty() && !IsLowerHex(structure, 64)) {
    return ErrorResponse(OciError::kBadRequest,
                         "structure: '" + structure + "' is not a structural hash (64 hex)");
  }
  const std::optional<std::string> exclude = route.Query("to-push");
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < have->size(); ++i) {
    const std::string& digest = (*have)[i];
    if (exclude.has_value() && digest == *exclude) continue;
    Result<store::VersionRecord> v = ReadableVersionOf(route, digest);
    if (!v.ok()) {
      if (v.status().code() == Code::kNotFound) continue;  // unknown here, or not readable
      return ErrorResponse(v.status(), ErrorContext::kGeneral);
    }
    Candidate c;
    c.version = std::move(*v);
    c.same_structure = !structure.empty() && c.version.structural_hash == structure;
    c.same_repository = c.version.repository == route.name;
    const bool is_related =
        std::find(related->begin(), related->end(), digest) != related->end();
    if (!c.same_structure && !c.same_repository && !is_related) continue;  // another model's
    c.shared = c.same_structure ? 1 : is_related ? kMinSharedFraction : 0;
    // Most recent first: the distance from the newest possible push time.
    c.time_distance = uint64_t(INT64_MAX - c.version.created);
    c.offered = i;
    candidates.push_back(std::move(c));
  }
  std::sort(candidates.begin(), candidates.end(), Better);
  std::map<std::string, std::vector<store::TagTarget>> tags_by_repo;
  json bases = json::array();
  for (const Candidate& c : candidates) {
    auto it = tags_by_repo.find(c.version.repository);
    if (it == tags_by_repo.end()) {
      Result<std::vector<store::TagTarget>> tags = db_->ListTagTargets(c.version.repository);
      if (!tags.ok()) return ErrorResponse(tags.status(), ErrorContext::kGeneral);
      it = tags_by_repo.emplace(c.version.repository, std::move(*tags)).first;
    }
    std::vector<std::string> names;
    for (const store::TagTarget& t : it->second) {
      if (t.manifest_digest == c.version.manifest_digest) names.push_back(t.tag);
    }
    json j = VersionJson(c.version,
                         VersionDisplayName(c.version.repository, c.version.archive_digest, names));
    j["same_structure"] = c.same_structure;
    j["same_repository"] = c.same_repository;
    j["shared_fraction"] = c.shared;
    j["patch_size"] = nullptr;
    bases.push_back(std::move(j));
  }
  json doc;
  doc["to"] = nullptr;
  doc["bases"] = std::move(bases);
  Response res;
  res.body = doc.dump();
  res.Set("Content-Type", "application/json");
  return res;
}

}  // namespace blz::registry
