// MetadataDb's tables of archive contents: version_files (migrations/0010_version_files.sql),
// the files of model versions as the Hugging Face Hub API lists them, read once per archive;
// archive_tensors (0014), their large tensors by content, for chain storage's choice of parent.
#include "store/metadata_db.h"

namespace blz::store {
namespace {
using sql::Statement;
using sql::Transaction;
}  // namespace

Result<std::vector<VersionFileRecord>> MetadataDb::ListVersionFiles(
    std::string_view archive_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT path, size, sha256, git_oid, lfs FROM version_files "
                                   "WHERE archive_digest = ?1 ORDER BY position"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
  std::vector<VersionFileRecord> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(VersionFileRecord{st.ColumnText(0), uint64_t(st.ColumnInt(1)),
                                    st.ColumnText(2), st.ColumnText(3), st.ColumnInt(4) != 0});
  }
  return out;
}

Status MetadataDb::RecordVersionFiles(std::string_view archive_digest,
                                      const std::vector<VersionFileRecord>& files) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Retrying<Status>([&]() -> Status {
    BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
    for (size_t i = 0; i < files.size(); ++i) {
      const VersionFileRecord& f = files[i];
      BLZ_ASSIGN_OR_RETURN(
          Statement st,
          db_.Prepare("INSERT INTO version_files (archive_digest, position, path, size, sha256, "
                      "git_oid, lfs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                      "ON CONFLICT (archive_digest, position) DO NOTHING"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(2, int64_t(i)));
      BLZ_RETURN_IF_ERROR(st.Bind(3, f.path));
      BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(f.size)));
      BLZ_RETURN_IF_ERROR(st.Bind(5, f.sha256));
      BLZ_RETURN_IF_ERROR(st.Bind(6, f.git_oid));
      BLZ_RETURN_IF_ERROR(st.Bind(7, int64_t(f.lfs ? 1 : 0)));
      BLZ_RETURN_IF_ERROR(st.Run());
    }
    return tx.Commit();
  });
}

Status MetadataDb::RecordArchiveTensors(std::string_view archive_digest,
                                        const std::vector<ArchiveTensorRecord>& tensors) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Retrying<Status>([&]() -> Status {
    BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
    for (const ArchiveTensorRecord& t : tensors) {
      BLZ_ASSIGN_OR_RETURN(
          Statement st,
          db_.Prepare("INSERT INTO archive_tensors (archive_digest, position, sha256, length) "
                      "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (archive_digest, position) DO NOTHING"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(2, int64_t(t.position)));
      BLZ_RETURN_IF_ERROR(st.Bind(3, t.sha256));
      BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(t.length)));
      BLZ_RETURN_IF_ERROR(st.Run());
    }
    return tx.Commit();
  });
}

Result<bool> MetadataDb::HasArchiveTensors(std::string_view archive_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("SELECT 1 FROM archive_tensors "
                                                 "WHERE archive_digest = ?1 LIMIT 1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
  return st.Step();
}

Result<std::vector<std::string>> MetadataDb::ListVersionArchivesWithoutTensors() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT DISTINCT v.archive_digest FROM versions v WHERE NOT EXISTS "
                  "(SELECT 1 FROM archive_tensors t WHERE t.archive_digest = v.archive_digest) "
                  "ORDER BY v.archive_digest"));
  return st.ColumnTexts();
}

Result<std::vector<SharedTensors>> MetadataDb::ListArchivesSharingTensors(
    std::string_view archive_digest, uint64_t limit) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  // DISTINCT: a tensor with several twins in one archive (all-zero tensors) counts once.
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT archive_digest, CAST(SUM(length) AS BIGINT) AS shared FROM ("
                  "SELECT DISTINCT o.archive_digest AS archive_digest, m.position AS position, "
                  "m.length AS length FROM archive_tensors m JOIN archive_tensors o "
                  "ON o.sha256 = m.sha256 AND o.length = m.length "
                  "AND o.archive_digest <> m.archive_digest "
                  "WHERE m.archive_digest = ?1 AND EXISTS "
                  "(SELECT 1 FROM versions v WHERE v.archive_digest = o.archive_digest)) s "
                  "GROUP BY archive_digest ORDER BY shared DESC, archive_digest LIMIT ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, int64_t(limit)));
  std::vector<SharedTensors> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(SharedTensors{st.ColumnText(0), uint64_t(st.ColumnInt(1))});
  }
  return out;
}

Status MetadataDb::ForgetUnversionedArchiveTensors() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("DELETE FROM archive_tensors WHERE NOT EXISTS (SELECT 1 FROM "
                                   "versions v WHERE v.archive_digest = "
                                   "archive_tensors.archive_digest)"));
  return st.Run();
}

}  // namespace blz::store
