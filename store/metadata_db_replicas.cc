// MetadataDb's shared state for replicas (tables settings, jobs, gc_deletions and
// blobs.touched, migrations/0008_replicas.sql; raw_archive_reads, 0013). Every statement is
// in the subset of SQL that SQLite 3.40 and PostgreSQL 15 both accept (upserts with ON
// CONFLICT, RETURNING; times are bound by the caller), so the PostgreSQL driver runs the same
// text.
#include <algorithm>
#include <optional>
#include <utility>

#include "store/metadata_db.h"

namespace blz::store {
namespace {

using sql::Statement;
using sql::Transaction;

constexpr char kJobColumns[] =
    "job_key, state, owner, lease_expires, attempts, COALESCE(error, ''), COALESCE(result, '')";

JobRecord ReadJob(const Statement& st) {
  JobRecord r;
  r.key = st.ColumnText(0);
  r.state = st.ColumnText(1);
  r.owner = st.ColumnText(2);
  r.lease_expires = st.ColumnInt(3);
  r.attempts = st.ColumnInt(4);
  r.error = st.ColumnText(5);
  r.result = st.ColumnText(6);
  return r;
}

// Steps a statement that returns at most one row to its end (the row, if any, is read first).
Status Finish(Statement* st) {
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool more, st->Step());
    if (!more) return Status::Ok();
  }
}

}  // namespace

// ---- settings ----

Result<std::string> MetadataDb::GetOrSetSetting(std::string_view name, std::string_view value) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("INSERT INTO settings (name, value) VALUES (?1, ?2) "
                                     "ON CONFLICT (name) DO NOTHING"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, name));
    BLZ_RETURN_IF_ERROR(st.Bind(2, value));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("SELECT value FROM settings WHERE name = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, name));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Internal("setting '" + std::string(name) + "' vanished after being set");
  return st.ColumnText(0);
}

Result<std::string> MetadataDb::GetSetting(std::string_view name) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("SELECT value FROM settings WHERE name = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, name));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return NotFound("setting '" + std::string(name) + "' is not set");
  return st.ColumnText(0);
}

// ---- job leases ----

Result<JobAcquisition> MetadataDb::TryAcquireJob(std::string_view key, std::string_view owner,
                                                 int64_t now, int64_t lease_seconds,
                                                 bool redo_done) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  JobAcquisition out;
  {
    // One statement: a racing caller either inserts first (then this one's conflict sees a
    // live running row and updates nothing) or finds the row this one wrote.
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare(std::string("INSERT INTO jobs (job_key, state, owner, lease_expires, "
                                "attempts, error, result, updated) "
                                "VALUES (?1, 'running', ?2, ?3, 1, NULL, NULL, ?4) "
                                "ON CONFLICT (job_key) DO UPDATE SET state = 'running', "
                                "owner = excluded.owner, lease_expires = excluded.lease_expires, "
                                "attempts = jobs.attempts + 1, error = NULL, result = NULL, "
                                "updated = excluded.updated "
                                "WHERE jobs.state = 'failed' "
                                "OR (jobs.state = 'running' AND (jobs.lease_expires <= ?4 "
                                "OR jobs.owner = ?2)) "
                                "OR (jobs.state = 'done' AND ?5 = 1) "
                                "RETURNING ") +
                    kJobColumns));
    BLZ_RETURN_IF_ERROR(st.Bind(1, key));
    BLZ_RETURN_IF_ERROR(st.Bind(2, owner));
    BLZ_RETURN_IF_ERROR(st.Bind(3, now + lease_seconds));
    BLZ_RETURN_IF_ERROR(st.Bind(4, now));
    BLZ_RETURN_IF_ERROR(st.Bind(5, int64_t(redo_done ? 1 : 0)));
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (row) {
      out.outcome = JobAcquire::kAcquired;
      out.job = ReadJob(st);
      BLZ_RETURN_IF_ERROR(Finish(&st));
      return out;
    }
  }
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_key = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, key));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Internal("job '" + std::string(key) + "' vanished while being acquired");
  out.job = ReadJob(st);
  out.outcome = out.job.state == "done" ? JobAcquire::kDone : JobAcquire::kHeld;
  return out;
}

namespace {
// Runs an UPDATE ... RETURNING 1 of the owner's running row; kUnavailable when none matched.
Status UpdateOwnedJob(sql::Database* db, std::string_view sql, std::string_view key,
                      std::string_view owner, std::string_view text, int64_t a, int64_t b,
                      std::string_view what) {
  BLZ_ASSIGN_OR_RETURN(Statement st, db->Prepare(sql));
  BLZ_RETURN_IF_ERROR(st.Bind(1, key));
  BLZ_RETURN_IF_ERROR(st.Bind(2, owner));
  BLZ_RETURN_IF_ERROR(st.Bind(3, text));
  BLZ_RETURN_IF_ERROR(st.Bind(4, a));
  BLZ_RETURN_IF_ERROR(st.Bind(5, b));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return Unavailable("job '" + std::string(key) + "': " + std::string(owner) +
                       " no longer holds its lease (it expired and was taken over); " +
                       std::string(what) + " not recorded");
  }
  return Finish(&st);
}
}  // namespace

Status MetadataDb::RenewJobLease(std::string_view key, std::string_view owner, int64_t now,
                                 int64_t lease_seconds) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return UpdateOwnedJob(&db_,
                        "UPDATE jobs SET lease_expires = ?4, updated = ?5 WHERE job_key = ?1 "
                        "AND owner = ?2 AND state = 'running' AND ?3 = '' RETURNING 1",
                        key, owner, "", now + lease_seconds, now, "the renewal");
}

Status MetadataDb::FinishJob(std::string_view key, std::string_view owner,
                             std::string_view result, int64_t now) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return UpdateOwnedJob(&db_,
                        "UPDATE jobs SET state = 'done', result = ?3, lease_expires = ?4, "
                        "updated = ?5 WHERE job_key = ?1 AND owner = ?2 AND state = 'running' "
                        "RETURNING 1",
                        key, owner, result, now, now, "its result");
}

Status MetadataDb::FailJob(std::string_view key, std::string_view owner, std::string_view error,
                           int64_t now) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return UpdateOwnedJob(&db_,
                        "UPDATE jobs SET state = 'failed', error = ?3, lease_expires = ?4, "
                        "updated = ?5 WHERE job_key = ?1 AND owner = ?2 AND state = 'running' "
                        "RETURNING 1",
                        key, owner, error, now, now, "its failure");
}

Result<JobRecord> MetadataDb::GetJob(std::string_view key) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_key = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, key));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return NotFound("no job '" + std::string(key) + "'");
  return ReadJob(st);
}

// ---- garbage collection ----

Result<int64_t> MetadataDb::StartGcMark() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("INSERT INTO settings (name, value) VALUES ('gc_epoch', '1') "
                  "ON CONFLICT (name) DO UPDATE SET "
                  "value = CAST(CAST(settings.value AS BIGINT) + 1 AS TEXT) "
                  "RETURNING CAST(value AS BIGINT)"));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Internal("the garbage-collection epoch was not returned");
  const int64_t epoch = st.ColumnInt(0);
  BLZ_RETURN_IF_ERROR(Finish(&st));
  return epoch;
}

Result<std::string> MetadataDb::GcEpochForTouchLocked(sql::Database& db_) {
  if (db_.engine() != "postgresql") return std::string(kGcEpochSql);
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      BLZ_ASSIGN_OR_RETURN(Statement st,
                           db_.Prepare("SELECT CAST(value AS BIGINT) FROM settings "
                                       "WHERE name = 'gc_epoch' FOR SHARE"));
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) return std::to_string(st.ColumnInt(0));
    }
    // No collection yet: a row to lock (a StartGcMark inserting concurrently is waited for).
    BLZ_ASSIGN_OR_RETURN(Statement insert,
                         db_.Prepare("INSERT INTO settings (name, value) VALUES ('gc_epoch', '0') "
                                     "ON CONFLICT (name) DO NOTHING"));
    BLZ_RETURN_IF_ERROR(insert.Run());
  }
  return Internal(db_.label() + ": the garbage-collection epoch row is missing");
}

Status MetadataDb::TouchBlob(std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  const bool sqlite = db_.engine() != "postgresql";
  std::optional<Transaction> tx;
  if (!sqlite) {
    BLZ_ASSIGN_OR_RETURN(Transaction t, Transaction::Begin(&db_));
    tx.emplace(std::move(t));
  }
  BLZ_ASSIGN_OR_RETURN(std::string epoch, GcEpochForTouchLocked(db_));
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare(std::string("UPDATE blobs SET touched = ") + epoch +
                                   " WHERE digest = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
  BLZ_RETURN_IF_ERROR(st.Run());
  return tx.has_value() ? tx->Commit() : Status::Ok();
}

Result<BlobDeletion> MetadataDb::DeleteBlobUnlessTouched(
    std::string_view digest, int64_t young_after, int64_t mark, std::string_view collector,
    int64_t now, const std::function<Result<uint64_t>()>& remove, uint64_t* freed) {
  *freed = 0;
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  auto run = [&](std::string_view sql, auto&&... binds) -> Status {
    BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(sql));
    int i = 0;
    Status s;
    ((s = s.ok() ? st.Bind(++i, binds) : s), ...);
    BLZ_RETURN_IF_ERROR(s);
    return Finish(&st);
  };
  // The intent, committed first: a collector killed after removing the bytes leaves it.
  BLZ_RETURN_IF_ERROR(run("INSERT INTO gc_deletions (digest, state, collector, since, attempts) "
                          "VALUES (?1, 'deleting', ?2, ?3, 1) ON CONFLICT (digest) DO UPDATE SET "
                          "state = 'deleting', collector = excluded.collector, "
                          "since = excluded.since, attempts = gc_deletions.attempts + 1",
                          digest, collector, now));
  auto resolve = [&]() {
    return run("DELETE FROM gc_deletions WHERE digest = ?1", digest);
  };
  BlobDeletion outcome = BlobDeletion::kKept;
  Status failure;  // remove()'s error
  {
    BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
    // The flip: the row leaves unless a push touched it since marking (taking the row's lock
    // on PostgreSQL, so a push touching it now waits for this transaction). A blob without a
    // row (published, not yet recorded) has nothing to flip; its file's age decides.
    bool has_row = false;
    {
      BLZ_ASSIGN_OR_RETURN(Statement st,
                           db_.Prepare("SELECT touched FROM blobs WHERE digest = ?1"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
      BLZ_ASSIGN_OR_RETURN(has_row, st.Step());
    }
    bool flipped = true;
    if (has_row) {
      BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("DELETE FROM blobs WHERE digest = ?1 AND "
                                                     "touched < ?2 RETURNING 1"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
      BLZ_RETURN_IF_ERROR(st.Bind(2, mark));
      BLZ_ASSIGN_OR_RETURN(flipped, st.Step());
      if (flipped) BLZ_RETURN_IF_ERROR(Finish(&st));
    }
    bool referenced = false;
    if (flipped) {
      BLZ_ASSIGN_OR_RETURN(referenced, BlobReferencedLocked(db_, digest, young_after));
    }
    if (flipped && !referenced) {
      Result<uint64_t> removed = remove();
      if (removed.ok()) {
        BLZ_RETURN_IF_ERROR(run("DELETE FROM repository_blobs WHERE digest = ?1", digest));
        BLZ_RETURN_IF_ERROR(run("DELETE FROM gc_deletions WHERE digest = ?1", digest));
        BLZ_RETURN_IF_ERROR(tx.Commit());
        *freed = *removed;
        return BlobDeletion::kDeleted;
      }
      if (removed.status().code() == Code::kUnavailable) {
        outcome = BlobDeletion::kTooYoung;
      } else {
        failure = removed.status();
      }
    }
  }  // not committed: rolled back, the blob's row stays
  if (!failure.ok()) {
    const std::string error = failure.ToString();
    BLZ_RETURN_IF_ERROR(run("UPDATE gc_deletions SET state = 'failed', error = ?2 "
                            "WHERE digest = ?1",
                            digest, std::string_view(error)));
    return failure;
  }
  BLZ_RETURN_IF_ERROR(resolve());
  return outcome;
}

Result<std::vector<GcDeletionRecord>> MetadataDb::ListGcDeletions() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT digest, state, collector, since, attempts, "
                                   "COALESCE(error, '') FROM gc_deletions ORDER BY digest"));
  std::vector<GcDeletionRecord> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    GcDeletionRecord r;
    r.digest = st.ColumnText(0);
    r.state = st.ColumnText(1);
    r.collector = st.ColumnText(2);
    r.since = st.ColumnInt(3);
    r.attempts = st.ColumnInt(4);
    r.error = st.ColumnText(5);
    out.push_back(std::move(r));
  }
}

Status MetadataDb::ResolveGcDeletion(std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("DELETE FROM gc_deletions WHERE digest = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
  return st.Run();
}

// ---- raw archive reads ----

Result<bool> MetadataDb::MarkRawArchiveServed(std::string_view digest, int64_t now,
                                              int64_t until) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  // ON CONFLICT DO UPDATE locks the row and judges the WHERE on its latest committed version
  // (PostgreSQL) or under the one writer (SQLite): a drop recorded first is seen.
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("INSERT INTO raw_archive_reads (digest, served_until, dropping_until) "
                  "VALUES (?1, ?2, 0) ON CONFLICT (digest) DO UPDATE SET served_until = "
                  "CASE WHEN excluded.served_until > raw_archive_reads.served_until "
                  "THEN excluded.served_until ELSE raw_archive_reads.served_until END "
                  "WHERE raw_archive_reads.dropping_until <= ?3 RETURNING 1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, until));
  BLZ_RETURN_IF_ERROR(st.Bind(3, now));
  BLZ_ASSIGN_OR_RETURN(bool marked, st.Step());
  BLZ_RETURN_IF_ERROR(Finish(&st));
  return marked;
}

Result<std::optional<int64_t>> MetadataDb::BeginRawArchiveDrop(std::string_view digest,
                                                               int64_t now,
                                                               int64_t lease_until) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  {
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare("INSERT INTO raw_archive_reads (digest, served_until, dropping_until) "
                    "VALUES (?1, 0, ?2) ON CONFLICT (digest) DO UPDATE SET dropping_until = "
                    "excluded.dropping_until WHERE raw_archive_reads.served_until <= ?3 AND "
                    "raw_archive_reads.dropping_until <= ?3 RETURNING 1"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
    BLZ_RETURN_IF_ERROR(st.Bind(2, lease_until));
    BLZ_RETURN_IF_ERROR(st.Bind(3, now));
    BLZ_ASSIGN_OR_RETURN(bool begun, st.Step());
    BLZ_RETURN_IF_ERROR(Finish(&st));
    if (begun) return std::optional<int64_t>();
  }
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT served_until, dropping_until FROM raw_archive_reads "
                                   "WHERE digest = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  const int64_t retry = row ? std::max(st.ColumnInt(0), st.ColumnInt(1)) : now;
  BLZ_RETURN_IF_ERROR(Finish(&st));
  return std::optional<int64_t>(std::max(retry, now));
}

Status MetadataDb::EndRawArchiveDrop(std::string_view digest, int64_t lease_until, int64_t now) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("UPDATE raw_archive_reads SET dropping_until = 0 "
                                     "WHERE digest = ?1 AND dropping_until = ?2"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
    BLZ_RETURN_IF_ERROR(st.Bind(2, lease_until));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("DELETE FROM raw_archive_reads WHERE served_until < ?1 AND "
                                   "dropping_until < ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, now));
  return st.Run();
}

}  // namespace blz::store
