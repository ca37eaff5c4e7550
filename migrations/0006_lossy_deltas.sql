-- blz registry metadata: cached lossy deltas (GET /v2/<name>/blz/delta, docs/registry-api.md
-- "Lossy deltas").

-- A .wdelta (formats/wdelta.h) from one archive to another, computed once by the registry with
-- patcher/lossy/lossy_delta.h CreateDelta and kept as a blob (like patches). A delta depends on
-- the two archives and on how it was made: `params` is the canonical text of the strategy and
-- the options that strategy reads (e.g. "strategy=sparse&sparsity=0.9"), so the key is
-- (from, to, params). `report` is the measured report (DeltaReportJson) as JSON object text:
-- the error against the true target, the lossless patch's bytes, the full bytes.
-- Garbage collection forgets a row whose archives are no longer versions anywhere.
CREATE TABLE lossy_deltas (
  from_digest  TEXT NOT NULL,
  to_digest    TEXT NOT NULL,
  params       TEXT NOT NULL,
  delta_digest TEXT NOT NULL,
  delta_size   INTEGER NOT NULL CHECK (delta_size >= 0),
  report       TEXT NOT NULL,
  created      INTEGER NOT NULL,
  PRIMARY KEY (from_digest, to_digest, params)
) STRICT;
CREATE INDEX lossy_deltas_by_blob ON lossy_deltas (delta_digest);
