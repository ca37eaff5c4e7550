// MetadataDb's queries for cached lossy deltas (table lossy_deltas, migrations/0006): the
// registry's GET /v2/<name>/blz/delta and /blz/delta-report (docs/registry-api.md, "Lossy
// deltas").
#include <ctime>

#include "store/metadata_db.h"

namespace blz::store {
namespace {
using sqlite::Statement;
}  // namespace

Result<LossyDeltaRecord> MetadataDb::FindLossyDelta(std::string_view from_digest,
                                                    std::string_view to_digest,
                                                    std::string_view params) {
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("INSERT INTO lossy_deltas (from_digest, to_digest, params, delta_digest, "
                  "delta_size, report, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                  "ON CONFLICT (from_digest, to_digest, params) DO UPDATE SET "
                  "delta_digest = excluded.delta_digest, delta_size = excluded.delta_size, "
                  "report = excluded.report"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, delta.from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, delta.to_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, delta.params));
  BLZ_RETURN_IF_ERROR(st.Bind(4, delta.delta_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(5, int64_t(delta.delta_size)));
  BLZ_RETURN_IF_ERROR(st.Bind(6, delta.report));
  BLZ_RETURN_IF_ERROR(st.Bind(7, int64_t(std::time(nullptr))));
  return st.Run();
}

}  // namespace blz::store
