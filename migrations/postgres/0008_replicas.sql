-- blz registry metadata on PostgreSQL: migrations/0008_replicas.sql translated (settings, job
-- leases, blob touches, garbage collection's deletions).

CREATE TABLE settings (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE jobs (
  job_key       TEXT PRIMARY KEY,
  state         TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
  owner         TEXT NOT NULL,
  lease_expires BIGINT NOT NULL,
  attempts      BIGINT NOT NULL DEFAULT 0,
  error         TEXT,
  result        TEXT,
  updated       BIGINT NOT NULL
);

ALTER TABLE blobs ADD COLUMN touched BIGINT NOT NULL DEFAULT 0;

CREATE TABLE gc_deletions (
  digest    TEXT PRIMARY KEY,
  state     TEXT NOT NULL CHECK (state IN ('deleting', 'failed')),
  collector TEXT NOT NULL,
  since     BIGINT NOT NULL,
  attempts  BIGINT NOT NULL DEFAULT 0,
  error     TEXT
);
