#include "registry/hub/revisions.h"

#include <nlohmann/json.hpp>

#include "registry/registry.h"

namespace blz::registry::hub {
namespace {

constexpr std::string_view kSha256Prefix = "sha256:";

Result<Revision> FromArchive(store::MetadataDb& db, std::string_view repository,
                             const std::string& archive_digest,
                             const std::string& manifest_digest) {
  BLZ_ASSIGN_OR_RETURN(store::VersionRecord v, db.FindVersion(repository, archive_digest));
  return Revision{CommitId(archive_digest), archive_digest,
                  manifest_digest.empty() ? v.manifest_digest : manifest_digest, v.created};
}

// The version the tag `tag` points at; kNotFound when there is no such tag or it is not on a
// model version.
Result<Revision> FromTag(store::MetadataDb& db, std::string_view repository,
                         std::string_view tag) {
  BLZ_ASSIGN_OR_RETURN(std::string manifest, db.ResolveTag(repository, tag));
  BLZ_ASSIGN_OR_RETURN(std::string archive, ManifestArchive(db, repository, manifest));
  return FromArchive(db, repository, archive, manifest);
}

}  // namespace

std::string CommitId(std::string_view archive_digest) {
  if (archive_digest.substr(0, kSha256Prefix.size()) != kSha256Prefix) return "";
  std::string_view hex = archive_digest.substr(kSha256Prefix.size());
  if (hex.size() != 64) return "";
  return std::string(hex.substr(0, 40));
}

bool IsCommitId(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<std::string> ManifestArchive(store::MetadataDb& db, std::string_view repository,
                                    std::string_view manifest_digest) {
  BLZ_ASSIGN_OR_RETURN(store::ManifestRecord m, db.GetManifest(repository, manifest_digest));
  nlohmann::json doc = nlohmann::json::parse(m.content, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() && doc.contains("layers") && doc["layers"].is_array()) {
    for (const nlohmann::json& layer : doc["layers"]) {
      if (layer.is_object() && layer.value("mediaType", "") == kBlzArchiveMediaType &&
          layer.contains("digest") && layer["digest"].is_string()) {
        const std::string archive = layer["digest"].get<std::string>();
        Result<store::VersionRecord> v = db.FindVersion(repository, archive);
        if (v.ok()) return archive;
        if (v.status().code() != Code::kNotFound) return v.status();
      }
    }
  }
  return NotFound("manifest " + std::string(manifest_digest) + " of " + std::string(repository) +
                  " is not a model version");
}

Result<Revision> ResolveRevision(store::MetadataDb& db, std::string_view repository,
                                 std::string_view revision) {
  std::string_view name = revision;
  for (std::string_view prefix : {std::string_view("refs/heads/"), std::string_view("refs/tags/")}) {
    if (name.substr(0, prefix.size()) == prefix) name = name.substr(prefix.size());
  }
  if (!name.empty()) {
    Result<Revision> tagged = FromTag(db, repository, name);
    if (tagged.ok() || tagged.status().code() != Code::kNotFound) return tagged;
  }
  if (name == kMainRevision) {
    Result<Revision> latest = FromTag(db, repository, kLatestTag);
    if (latest.ok() || latest.status().code() != Code::kNotFound) return latest;
    return NotFound("revision main: " + std::string(repository) +
                    " has neither a tag 'main' nor a tag 'latest'");
  }
  if (IsCommitId(revision)) {
    BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> versions, db.ListVersions(repository));
    const store::VersionRecord* found = nullptr;
    for (const store::VersionRecord& v : versions) {
      if (CommitId(v.archive_digest) != revision) continue;
      if (found != nullptr && found->archive_digest != v.archive_digest) {
        return AlreadyExists("commit id " + std::string(revision) + " is ambiguous in " +
                             std::string(repository) + ": it names " + found->archive_digest +
                             " and " + v.archive_digest + "; use a tag");
      }
      found = &v;
    }
    if (found != nullptr) {
      return Revision{std::string(revision), found->archive_digest, found->manifest_digest,
                      found->created};
    }
  }
  return NotFound("revision '" + std::string(revision) + "' is not a tag or commit of " +
                  std::string(repository));
}

}  // namespace blz::registry::hub
