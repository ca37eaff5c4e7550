// MetadataDb's queries for cached lossy deltas (table lossy_deltas, migrations/0006): the
// registry's GET /v2/<name>/blz/delta and /blz/delta-report (docs/registry-api.md, "Lossy
// deltas").
#include <algorithm>
#include <ctime>
#include <vector>

#include "store/metadata_db.h"

namespace blz::store {
namespace {
using sql::Statement;
}  // namespace

Result<LossyDeltaRecord> MetadataDb::FindLossyDelta(std::string_view from_digest,
                                                    std::string_view to_digest,
                                                    std::string_view params) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT delta_digest, delta_size, report FROM lossy_deltas "
                                   "WHERE from_digest = ?1 AND to_digest = ?2 AND params = ?3"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, to_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, params));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return NotFound("no lossy delta from " + std::string(from_digest) + " to " +
                    std::string(to_digest) + " with " + std::string(params));
  }
  LossyDeltaRecord r;
  r.from_digest = std::string(from_digest);
  r.to_digest = std::string(to_digest);
  r.params = std::string(params);
  r.delta_digest = st.ColumnText(0);
  r.delta_size = uint64_t(st.ColumnInt(1));
  r.report = st.ColumnText(2);
  return r;
}

Status MetadataDb::RecordLossyDelta(const LossyDeltaRecord& delta) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("INSERT INTO lossy_deltas (from_digest, to_digest, params, delta_digest, "
                  "delta_size, report, created, last_used) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
                  "(SELECT COALESCE(MAX(last_used), 0) + 1 FROM lossy_deltas)) "
                  "ON CONFLICT (from_digest, to_digest, params) DO UPDATE SET "
                  "delta_digest = excluded.delta_digest, delta_size = excluded.delta_size, "
                  "report = excluded.report, last_used = excluded.last_used"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, delta.from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, delta.to_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, delta.params));
  BLZ_RETURN_IF_ERROR(st.Bind(4, delta.delta_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(5, int64_t(delta.delta_size)));
  BLZ_RETURN_IF_ERROR(st.Bind(6, delta.report));
  BLZ_RETURN_IF_ERROR(st.Bind(7, int64_t(std::time(nullptr))));
  return st.Run();
}

Status MetadataDb::TouchLossyDelta(std::string_view from_digest, std::string_view to_digest,
                                   std::string_view params) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("UPDATE lossy_deltas SET last_used = (SELECT "
                                   "COALESCE(MAX(last_used), 0) + 1 FROM lossy_deltas) WHERE "
                                   "from_digest = ?1 AND to_digest = ?2 AND params = ?3"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, to_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, params));
  return st.Run();
}

Result<std::vector<LossyDeltaRecord>> MetadataDb::EvictLossyDeltas(uint64_t max_bytes,
                                                                   std::string_view keep_from,
                                                                   std::string_view keep_to,
                                                                   std::string_view keep_params) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Retrying<Result<std::vector<LossyDeltaRecord>>>(
      [&] { return EvictLossyDeltasLocked(db_, max_bytes, keep_from, keep_to, keep_params); });
}

Result<std::vector<LossyDeltaRecord>> MetadataDb::EvictLossyDeltasLocked(
    sql::Database& db_, uint64_t max_bytes, std::string_view keep_from, std::string_view keep_to,
    std::string_view keep_params) {
  BLZ_ASSIGN_OR_RETURN(sql::Transaction tx, sql::Transaction::Begin(&db_));
  // One eviction at a time across replicas: the total and the victims are read together.
  BLZ_RETURN_IF_ERROR(tx.LockKey("lossy_deltas"));
  std::vector<LossyDeltaRecord> evicted;
  {
    BLZ_ASSIGN_OR_RETURN(Statement total,
                         db_.Prepare("SELECT COALESCE(SUM(delta_size), 0) FROM lossy_deltas"));
    BLZ_ASSIGN_OR_RETURN(bool row, total.Step());
    uint64_t bytes = row ? uint64_t(total.ColumnInt(0)) : 0;
    if (bytes <= max_bytes) return evicted;
    BLZ_ASSIGN_OR_RETURN(
        Statement oldest,
        db_.Prepare("SELECT from_digest, to_digest, params, delta_digest, delta_size "
                    "FROM lossy_deltas ORDER BY last_used, rowid"));
    while (bytes > max_bytes) {
      BLZ_ASSIGN_OR_RETURN(bool more, oldest.Step());
      if (!more) break;
      LossyDeltaRecord r;
      r.from_digest = oldest.ColumnText(0);
      r.to_digest = oldest.ColumnText(1);
      r.params = oldest.ColumnText(2);
      if (r.from_digest == keep_from && r.to_digest == keep_to && r.params == keep_params) {
        continue;
      }
      r.delta_digest = oldest.ColumnText(3);
      r.delta_size = uint64_t(oldest.ColumnInt(4));
      bytes -= std::min(bytes, r.delta_size);
      evicted.push_back(std::move(r));
    }
  }
  for (const LossyDeltaRecord& r : evicted) {
    BLZ_ASSIGN_OR_RETURN(Statement del,
                         db_.Prepare("DELETE FROM lossy_deltas WHERE from_digest = ?1 AND "
                                     "to_digest = ?2 AND params = ?3"));
    BLZ_RETURN_IF_ERROR(del.Bind(1, r.from_digest));
    BLZ_RETURN_IF_ERROR(del.Bind(2, r.to_digest));
    BLZ_RETURN_IF_ERROR(del.Bind(3, r.params));
    BLZ_RETURN_IF_ERROR(del.Run());
  }
  BLZ_RETURN_IF_ERROR(tx.Commit());
  return evicted;
}

}  // namespace blz::store
