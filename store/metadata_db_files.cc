// MetadataDb's table version_files (migrations/0010_version_files.sql): the files of model
// versions as the Hugging Face Hub API lists them, read once per archive.
#include "store/metadata_db.h"

namespace blz::store {
namespace {
using sql::Statement;
using sql::Transaction;
}  // namespace

Result<std::vector<VersionFileRecord>> MetadataDb::ListVersionFiles(
    std::string_view archive_digest) {
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
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

}  // namespace blz::store
