-- blz registry metadata, schema version 2: structural identity of versions, cached value diffs.

-- The structural hash of each version's archive (formats/identify.h, docs/structural-hash.md):
-- 64 lower-case hex digits, without a "sha256:" prefix. Every version pushed with schema 2 or
-- later has one (a manifest whose archive cannot be identified is refused). Rows of a version-1
-- DB start NULL; the registry fills them in when it opens the DB (Registry::Open) from the
-- archive's header, and leaves NULL the ones whose archive is missing or cannot be identified.
-- Versions with a NULL hash are listed under no structure.
ALTER TABLE versions ADD COLUMN structural_hash TEXT
  CHECK (structural_hash IS NULL OR length(structural_hash) = 64);

-- GET /v2/_blz/structures/<hash> looks versions up by structure.
CREATE INDEX versions_by_structural_hash ON versions (structural_hash);

-- Value diffs (the JSON of `blz diff --values --json`) between two archives, computed once by
-- GET /v2/<name>/blz/diff and kept as blobs. Like a patch, a diff depends only on the two
-- archives, so the key is (from, to).
CREATE TABLE value_diffs (
  from_digest TEXT NOT NULL,
  to_digest   TEXT NOT NULL,
  diff_digest TEXT NOT NULL,
  diff_size   INTEGER NOT NULL CHECK (diff_size >= 0),
  created     INTEGER NOT NULL,
  PRIMARY KEY (from_digest, to_digest)
) STRICT;
