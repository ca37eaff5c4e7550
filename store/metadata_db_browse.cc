// MetadataDb's queries for browsing (the registry's web view endpoints, docs/registry-api.md
// "Browsing"): repository names by substring, tags with their manifests, cached statistics.
#include <ctime>

#include "store/metadata_db.h"

namespace blz::store {
namespace {
using sql::Statement;
}  // namespace

Result<std::vector<std::string>> MetadataDb::ListRepositoryNames(std::string_view contains) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  // The substring test is bytewise in C++: SQLite's instr() and PostgreSQL's strpos() differ,
  // and LIKE folds ASCII case on SQLite.
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("SELECT name FROM repositories ORDER BY name"));
  std::vector<std::string> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    std::string name = st.ColumnText(0);
    if (name.find(contains) != std::string::npos) out.push_back(std::move(name));
  }
  return out;
}

Result<std::vector<TagTarget>> MetadataDb::ListTagTargets(std::string_view repository) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT t.tag, t.manifest_digest FROM tags t JOIN repositories r "
                  "ON r.id = t.repository_id WHERE r.name = ?1 ORDER BY t.tag"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  std::vector<TagTarget> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(TagTarget{st.ColumnText(0), st.ColumnText(1)});
  }
  return out;
}

Result<VersionStatsRecord> MetadataDb::FindVersionStats(std::string_view archive_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT stats_digest, stats_size FROM version_stats "
                                   "WHERE archive_digest = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return NotFound("no statistics of " + std::string(archive_digest));
  return VersionStatsRecord{std::string(archive_digest), st.ColumnText(0),
                            uint64_t(st.ColumnInt(1))};
}

Status MetadataDb::RecordVersionStats(const VersionStatsRecord& stats) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("INSERT INTO version_stats (archive_digest, stats_digest, stats_size, created) "
                  "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (archive_digest) DO UPDATE SET "
                  "stats_digest = excluded.stats_digest, stats_size = excluded.stats_size"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, stats.archive_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, stats.stats_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, int64_t(stats.stats_size)));
  BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(std::time(nullptr))));
  return st.Run();
}

}  // namespace blz::store
