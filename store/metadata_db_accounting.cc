// MetadataDb's query for storage accounting (GET /v2/_blz/storage, the blz_storage_* gauges;
// registry/storage_accounting.h): every model version and every other blob repositories'
// manifests reference, read in one snapshot.
#include <string>

#include "store/metadata_db.h"

namespace blz::store {
namespace {
using sql::Statement;
using sql::Transaction;

// Each query in two forms: every repository, or the one named ?1.
constexpr char kVersionsSql[] =
    "SELECT r.name, v.archive_digest, v.manifest_digest, v.archive_size, v.created "
    "FROM versions v JOIN repositories r ON r.id = v.repository_id ";
constexpr char kVersionsOrder[] = " ORDER BY r.name, v.created, v.rowid";
// The blobs a repository's manifests reference that are not one of its model archives
// (configs, other layers, the blobs of non-model manifests), once per (repository, blob); the
// exclusion is a primary-key probe of `versions`.
constexpr char kOtherBlobsSql[] =
    "SELECT DISTINCT r.name, mb.blob_digest, b.size FROM manifest_blobs mb "
    "JOIN repositories r ON r.id = mb.repository_id JOIN blobs b ON b.digest = mb.blob_digest "
    "WHERE NOT EXISTS (SELECT 1 FROM versions v "
    "WHERE v.repository_id = mb.repository_id AND v.archive_digest = mb.blob_digest) ";
constexpr char kOtherBlobsOrder[] = " ORDER BY r.name, mb.blob_digest";
}  // namespace

Result<StorageInventory> MetadataDb::ReadStorageInventory(std::string_view repository) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Transaction tx,
                       Transaction::Begin(&db_, sql::TransactionMode::kSnapshot));
  StorageInventory inv;
  const bool one = !repository.empty();
  {
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare(std::string(kVersionsSql) + (one ? "WHERE r.name = ?1" : "") + kVersionsOrder));
    if (one) BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
    while (true) {
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      VersionRecord v;
      v.repository = st.ColumnText(0);
      v.archive_digest = st.ColumnText(1);
      v.manifest_digest = st.ColumnText(2);
      v.archive_size = uint64_t(st.ColumnInt(3));
      v.created = st.ColumnInt(4);
      inv.versions.push_back(std::move(v));
    }
  }
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare(std::string(kOtherBlobsSql) + (one ? "AND r.name = ?1" : "") +
                                     kOtherBlobsOrder));
    if (one) BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
    while (true) {
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      inv.other_blobs.push_back(
          StorageInventory::Blob{st.ColumnText(0), st.ColumnText(1), uint64_t(st.ColumnInt(2))});
    }
  }
  BLZ_RETURN_IF_ERROR(tx.Commit());
  return inv;
}

}  // namespace blz::store
