// MetadataDb's OCI content: blobs linked into repositories, the referrers of a manifest, and
// deletes of tags and manifests (migrations/0003_oci_content.sql).
#include <ctime>

#include "store/metadata_db.h"

namespace blz::store {
namespace {

using sql::Statement;
using sql::Transaction;

int64_t Now() { return int64_t(std::time(nullptr)); }

}  // namespace

Status MetadataDb::LinkBlobLocked(sql::Database& db_, std::string_view repository,
                                  std::string_view digest) {
  {  // a touch (DeleteBlobUnlessTouched): on PostgreSQL it also waits for a collector's delete
    BLZ_ASSIGN_OR_RETURN(std::string epoch, GcEpochForTouchLocked(db_));
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare(std::string("UPDATE blobs SET touched = ") + epoch +
                                     " WHERE digest = ?1 RETURNING 1"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
    BLZ_ASSIGN_OR_RETURN(bool present, st.Step());
    while (present) {
      BLZ_ASSIGN_OR_RETURN(bool more, st.Step());
      if (!more) break;
    }
    // The conditional write that replaces the in-process blob lock across replicas: a
    // collector (of any replica) that removed the blob after the caller checked it has
    // deleted its row in the same transaction as the bytes, so the link fails instead of
    // pointing at nothing. (Its row is written by RecordBlob before any link.)
    if (!present) {
      return NotFound("blob " + std::string(digest) +
                      " is no longer stored (garbage collection removed it); push it again");
    }
  }
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("INSERT INTO repository_blobs (repository, digest, created) "
                                   "VALUES (?1, ?2, ?3) ON CONFLICT (repository, digest) DO UPDATE SET "
                                   "created = excluded.created"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, Now()));
  return st.Run();
}

Status MetadataDb::LinkBlob(std::string_view repository, std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  if (db_.engine() != "postgresql") return LinkBlobLocked(db_, repository, digest);
  // The epoch's share lock (GcEpochForTouchLocked) is held until the touch commits.
  BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
  BLZ_RETURN_IF_ERROR(LinkBlobLocked(db_, repository, digest));
  return tx.Commit();
}

Result<bool> MetadataDb::BlobLinked(std::string_view repository, std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT 1 FROM repository_blobs WHERE repository = ?1 AND "
                                   "digest = ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
  return st.Step();
}

Result<bool> MetadataDb::BlobLinkedAnywhere(std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT 1 FROM repository_blobs WHERE digest = ?1 LIMIT 1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
  return st.Step();
}

Result<bool> MetadataDb::UnlinkBlob(std::string_view repository, std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("DELETE FROM repository_blobs WHERE repository = ?1 AND "
                                   "digest = ?2 RETURNING 1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (row) {
    BLZ_ASSIGN_OR_RETURN(bool more, st.Step());  // finish the statement
    (void)more;
  }
  return row;
}

Result<std::vector<ReferrerRecord>> MetadataDb::ListReferrers(std::string_view repository,
                                                              std::string_view subject_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT m.digest, m.media_type, length(m.content), m.artifact_type, "
                  "m.annotations FROM manifests m JOIN repositories r ON r.id = m.repository_id "
                  "WHERE r.name = ?1 AND m.subject_digest = ?2 ORDER BY m.digest"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(2, subject_digest));
  std::vector<ReferrerRecord> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    ReferrerRecord r;
    r.digest = st.ColumnText(0);
    r.media_type = st.ColumnText(1);
    r.size = uint64_t(st.ColumnInt(2));
    if (!st.ColumnIsNull(3)) r.artifact_type = st.ColumnText(3);
    if (!st.ColumnIsNull(4)) r.annotations = st.ColumnText(4);
    out.push_back(std::move(r));
  }
  return out;
}

Result<bool> MetadataDb::DeleteTag(std::string_view repository, std::string_view tag) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  Result<int64_t> repo_id = RepositoryIdLocked(db_, repository);
  if (!repo_id.ok()) {
    if (repo_id.status().code() == Code::kNotFound) return false;
    return repo_id.status();
  }
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("DELETE FROM tags WHERE repository_id = ?1 AND tag = ?2 "
                                   "RETURNING 1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, *repo_id));
  BLZ_RETURN_IF_ERROR(st.Bind(2, tag));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (row) {
    BLZ_ASSIGN_OR_RETURN(bool more, st.Step());
    (void)more;
  }
  return row;
}

Result<ManifestDeletion> MetadataDb::DeleteManifest(std::string_view repository,
                                                    std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  const std::string missing = "manifest " + std::string(digest) + " is not in repository '" +
                              std::string(repository) + "'";
  Result<int64_t> repo_id = RepositoryIdLocked(db_, repository);
  if (!repo_id.ok()) {
    if (repo_id.status().code() == Code::kNotFound) return NotFound(missing);
    return repo_id.status();
  }
  return Retrying<Result<ManifestDeletion>>(
      [&] { return DeleteManifestLocked(db_, *repo_id, repository, digest); });
}

Result<ManifestDeletion> MetadataDb::DeleteManifestLocked(sql::Database& db_,
                                                          int64_t repository_id,
                                                          std::string_view repository,
                                                          std::string_view digest) {
  const std::string missing = "manifest " + std::string(digest) + " is not in repository '" +
                              std::string(repository) + "'";
  BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
  BLZ_RETURN_IF_ERROR(tx.LockKey("repository:" + std::string(repository)));  // as PutManifest
  ManifestDeletion deletion;
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("DELETE FROM tags WHERE repository_id = ?1 AND "
                                     "manifest_digest = ?2 RETURNING tag"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repository_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
    while (true) {
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      deletion.tags.push_back(st.ColumnText(0));
    }
  }
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("DELETE FROM versions WHERE repository_id = ?1 AND "
                                     "manifest_digest = ?2 RETURNING archive_digest"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repository_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
    while (true) {
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      deletion.archive_digest = st.ColumnText(0);
    }
  }
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("DELETE FROM manifest_blobs WHERE repository_id = ?1 AND "
                                     "manifest_digest = ?2"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repository_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  bool found = false;
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("DELETE FROM manifests WHERE repository_id = ?1 AND "
                                     "digest = ?2 RETURNING 1"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repository_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
    BLZ_ASSIGN_OR_RETURN(found, st.Step());
    if (found) {
      BLZ_ASSIGN_OR_RETURN(bool more, st.Step());
      (void)more;
    }
  }
  if (!found) return NotFound(missing);  // tx rolls back
  BLZ_RETURN_IF_ERROR(tx.Commit());
  return deletion;
}

namespace {
// Blobs a manifest references, model archives, and blobs linked after `young_after` (Unix
// seconds): what keeps a blob (garbage collection), besides cached patches and diffs.
constexpr char kReferencedSql[] =
    "SELECT blob_digest FROM manifest_blobs UNION "
    "SELECT archive_digest FROM versions UNION "
    "SELECT digest FROM repository_blobs WHERE created > ?1";
}  // namespace

Result<GcRoots> MetadataDb::ReadGcRoots(int64_t young_after) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Transaction tx,
                       Transaction::Begin(&db_, sql::TransactionMode::kSnapshot));
  GcRoots roots;
  {
    BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(kReferencedSql));
    BLZ_RETURN_IF_ERROR(st.Bind(1, young_after));
    while (true) {
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      roots.referenced.push_back(st.ColumnText(0));
    }
  }
  auto derived = [&](std::string_view sql, std::vector<GcRoots::Derived>* out) -> Status {
    BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(sql));
    while (true) {
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status::Ok();
      out->push_back({st.ColumnText(0), st.ColumnText(1), st.ColumnText(2)});
    }
  };
  BLZ_RETURN_IF_ERROR(
      derived("SELECT from_digest, to_digest, patch_digest FROM patches", &roots.patches));
  BLZ_RETURN_IF_ERROR(
      derived("SELECT from_digest, to_digest, diff_digest FROM value_diffs", &roots.value_diffs));
  BLZ_RETURN_IF_ERROR(derived("SELECT '', archive_digest, stats_digest FROM version_stats",
                              &roots.version_stats));
  BLZ_RETURN_IF_ERROR(derived("SELECT from_digest, to_digest, delta_digest FROM lossy_deltas",
                              &roots.lossy_deltas));
  // (Garbage collection orders the links it forgets by the links themselves: see
  // registry/garbage_collector.cc.)
  BLZ_RETURN_IF_ERROR(derived("SELECT parent_digest, archive_digest, patch_digest FROM "
                              "archive_chains ORDER BY depth DESC, archive_digest",
                              &roots.chains));
  BLZ_RETURN_IF_ERROR(tx.Commit());
  return roots;
}

Result<bool> MetadataDb::BlobReferenced(std::string_view digest, int64_t young_after) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return BlobReferencedLocked(db_, digest, young_after);
}

Result<bool> MetadataDb::BlobReferencedLocked(sql::Database& db_, std::string_view digest,
                                              int64_t young_after) {
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT 1 FROM manifest_blobs WHERE blob_digest = ?1 UNION ALL "
                  "SELECT 1 FROM versions WHERE archive_digest = ?1 UNION ALL "
                  "SELECT 1 FROM patches WHERE patch_digest = ?1 UNION ALL "
                  "SELECT 1 FROM value_diffs WHERE diff_digest = ?1 UNION ALL "
                  "SELECT 1 FROM version_stats WHERE stats_digest = ?1 UNION ALL "
                  "SELECT 1 FROM lossy_deltas WHERE delta_digest = ?1 UNION ALL "
                  "SELECT 1 FROM archive_chains WHERE patch_digest = ?1 UNION ALL "
                  "SELECT 1 FROM archive_chains WHERE parent_digest = ?1 UNION ALL "
                  "SELECT 1 FROM repository_blobs WHERE digest = ?1 AND created > ?2 LIMIT 1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, young_after));
  BLZ_ASSIGN_OR_RETURN(bool referenced, st.Step());
  // Stepped to its end: inside a transaction, the statement must be done before the commit.
  for (bool more = referenced; more;) {
    BLZ_ASSIGN_OR_RETURN(more, st.Step());
  }
  return referenced;
}

Status MetadataDb::ForgetDerived(std::string_view kind, const GcRoots::Derived& row) {
  std::string sql;
  if (kind == "patches") {
    // The stored form of a chain's parent stays while a link names the parent.
    sql = "DELETE FROM patches WHERE from_digest = ?1 AND to_digest = ?2 AND patch_digest = ?3 "
          "AND NOT (from_digest = '' AND EXISTS (SELECT 1 FROM archive_chains WHERE "
          "parent_digest = ?2) AND NOT EXISTS (SELECT 1 FROM archive_chains WHERE "
          "archive_digest = ?2))";
  } else if (kind == "archive_chains") {
    // A link that is still another link's parent stays (its child is forgotten first).
    sql = "DELETE FROM archive_chains WHERE parent_digest = ?1 AND archive_digest = ?2 AND "
          "patch_digest = ?3 AND NOT EXISTS (SELECT 1 FROM archive_chains c WHERE "
          "c.parent_digest = ?2)";
  } else if (kind == "value_diffs") {
    sql = "DELETE FROM value_diffs WHERE from_digest = ?1 AND to_digest = ?2 AND diff_digest = ?3";
  } else if (kind == "lossy_deltas") {
    sql = "DELETE FROM lossy_deltas WHERE from_digest = ?1 AND to_digest = ?2 AND "
          "delta_digest = ?3";
  } else if (kind == "version_stats") {
    sql = "DELETE FROM version_stats WHERE ?1 = '' AND archive_digest = ?2 AND stats_digest = ?3";
  } else {
    return InvalidArgument("ForgetDerived: unknown kind '" + std::string(kind) + "'");
  }
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(sql));
  BLZ_RETURN_IF_ERROR(st.Bind(1, row.from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, row.to_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, row.blob_digest));
  return st.Run();
}

Status MetadataDb::ForgetBlob(std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
  for (const char* sql : {"DELETE FROM blobs WHERE digest = ?1",
                          "DELETE FROM repository_blobs WHERE digest = ?1"}) {
    BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(sql));
    BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  return tx.Commit();
}

}  // namespace blz::store
