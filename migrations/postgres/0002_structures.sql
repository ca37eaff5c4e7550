-- blz registry metadata on PostgreSQL, schema version 2: migrations/0002_structures.sql
-- translated (structural hashes of versions, cached value diffs).

ALTER TABLE versions ADD COLUMN structural_hash TEXT COLLATE "C"
  CHECK (structural_hash IS NULL OR length(structural_hash) = 64);

CREATE INDEX versions_by_structural_hash ON versions (structural_hash);

CREATE TABLE value_diffs (
  from_digest TEXT COLLATE "C" NOT NULL,
  to_digest   TEXT COLLATE "C" NOT NULL,
  diff_digest TEXT COLLATE "C" NOT NULL,
  diff_size   BIGINT NOT NULL CHECK (diff_size >= 0),
  created     BIGINT NOT NULL,
  PRIMARY KEY (from_digest, to_digest)
);
