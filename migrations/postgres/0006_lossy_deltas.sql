-- blz registry metadata on PostgreSQL: migrations/0006_lossy_deltas.sql translated (cached
-- lossy deltas).

CREATE TABLE lossy_deltas (
  from_digest  TEXT COLLATE "C" NOT NULL,
  to_digest    TEXT COLLATE "C" NOT NULL,
  params       TEXT COLLATE "C" NOT NULL,
  delta_digest TEXT COLLATE "C" NOT NULL,
  delta_size   BIGINT NOT NULL CHECK (delta_size >= 0),
  report       TEXT COLLATE "C" NOT NULL,
  created      BIGINT NOT NULL,
  rowid        BIGINT GENERATED ALWAYS AS IDENTITY,
  PRIMARY KEY (from_digest, to_digest, params)
);
CREATE INDEX lossy_deltas_by_blob ON lossy_deltas (delta_digest);
