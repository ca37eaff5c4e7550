// Revisions of the Hugging Face Hub API (registry/hub/hub_api.h) on blz's tags and versions.
//
// - A commit id is the first 40 hex digits of the version's archive digest (SHA-256): stable,
//   the same on every replica and for every repository holding that archive, and what the Hub's
//   clients require (40 lower-case hex). Two versions of one repository whose archives share
//   those 160 bits would make an id ambiguous: ResolveRevision refuses it (kAlreadyExists)
//   instead of picking one.
// - Branches and tags are blz tags (a tag may be asked for as either); "refs/heads/<t>" and
//   "refs/tags/<t>" name the tag <t>.
// - "main" (the clients' default revision) is the tag "main" when the repository has one, else
//   the tag "latest" (blz's default tag).
// - A revision is resolved in this order: a tag of that name, "main" as above, a commit id.
#ifndef BLZ_REGISTRY_HUB_REVISIONS_H_
#define BLZ_REGISTRY_HUB_REVISIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "store/metadata_db.h"

namespace blz::registry::hub {

inline constexpr char kMainRevision[] = "main";
inline constexpr char kLatestTag[] = "latest";

// The commit id of the version whose archive is `archive_digest` ("sha256:<64 hex>"): its first
// 40 hex digits. "" when the digest is not of that form.
std::string CommitId(std::string_view archive_digest);

// Is `s` 40 lower-case hex digits?
bool IsCommitId(std::string_view s);

struct Revision {
  std::string commit;           // 40 hex
  std::string archive_digest;   // "sha256:<hex>"
  std::string manifest_digest;  // the manifest the revision names
  int64_t created = 0;          // when the version was first pushed (Unix seconds)
};

// The version `revision` names in `repository` (see the file comment). The caller has checked
// that the repository exists and may be read. Errors: kNotFound (no such revision: unknown tag,
// a tag on a manifest that is not a model version, unknown commit id), kAlreadyExists (an
// ambiguous commit id), metadata DB errors.
Result<Revision> ResolveRevision(store::MetadataDb& db, std::string_view repository,
                                 std::string_view revision);

// The archive digest of the model version the manifest `manifest_digest` of `repository` is
// (its layer of media type application/vnd.blz.archive.v1, recorded as a version). kNotFound
// when it is none.
Result<std::string> ManifestArchive(store::MetadataDb& db, std::string_view repository,
                                    std::string_view manifest_digest);

}  // namespace blz::registry::hub

#endif  // BLZ_REGISTRY_HUB_REVISIONS_H_
