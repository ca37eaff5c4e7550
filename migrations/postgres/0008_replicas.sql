-- blz registry metadata on PostgreSQL: migrations/0008_replicas.sql translated (settings, job
-- leases, blob touches, garbage collection's deletions).

CREATE TABLE settings (
  name  TEXT COLLATE "C" PRIMARY KEY,
  value TEXT COLLATE "C" NOT NULL
);

CREATE TABLE jobs (
  job_key       TEXT COLLATE "C" PRIMARY KEY,
  state         TEXT COLLATE "C" NOT NULL CHECK (state IN ('running', 'done', 'failed')),
  owner         TEXT COLLATE "C" NOT NULL,
  lease_expires BIGINT NOT NULL,
  attempts      BIGINT NOT NULL DEFAULT 0,
  error         TEXT COLLATE "C",
  result        TEXT COLLATE "C",
  updated       BIGINT NOT NULL
);

ALTER TABLE blobs ADD COLUMN touched BIGINT NOT NULL DEFAULT 0;

CREATE TABLE gc_deletions (
  digest    TEXT COLLATE "C" PRIMARY KEY,
  state     TEXT COLLATE "C" NOT NULL CHECK (state IN ('deleting', 'failed')),
  collector TEXT COLLATE "C" NOT NULL,
  since     BIGINT NOT NULL,
  attempts  BIGINT NOT NULL DEFAULT 0,
  error     TEXT COLLATE "C"
);
