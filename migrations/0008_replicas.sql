-- blz registry metadata: state that several `blz serve` replicas sharing this database must
-- agree on (issue 25, "Replicas share everything that matters, through the database";
-- store/metadata_db.h, "replicas").

-- Registry-wide settings, one row each, written once (INSERT ... ON CONFLICT DO NOTHING, then
-- read back, so that replicas starting together agree). `auth_secret`: the HMAC key of access
-- tokens (registry/auth.h), imported from <data>/auth_secret when one exists.
CREATE TABLE settings (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;

-- Leases on background computations (patches, full patches, value diffs, statistics, lossy
-- deltas) and on garbage collection ("gc"): one replica holds a key's lease while it works,
-- the others wait for its result; a lease not renewed by `lease_expires` (Unix seconds) may be
-- taken over (its holder died). state: 'running' (owner holds it), 'done' (result = what the
-- job produced, e.g. a blob digest) or 'failed' (error = why; the next caller retries).
-- attempts counts acquisitions (a takeover or retry adds one).
CREATE TABLE jobs (
  job_key       TEXT PRIMARY KEY,
  state         TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
  owner         TEXT NOT NULL,
  lease_expires INTEGER NOT NULL,
  attempts      INTEGER NOT NULL DEFAULT 0,
  error         TEXT,
  result        TEXT,
  updated       INTEGER NOT NULL
) STRICT;

-- When a push last touched the blob (recorded it, linked it, or is about to publish it), as the
-- garbage-collection epoch of that moment: the setting 'gc_epoch' (0 when unset), which each
-- collection increments before it marks. A collection deletes a candidate only in a
-- transaction that finds touched < its epoch, i.e. untouched since it marked
-- (registry/garbage_collector.h). A counter, not a clock: replicas' clocks may disagree.
ALTER TABLE blobs ADD COLUMN touched INTEGER NOT NULL DEFAULT 0;

-- Blobs garbage collection is deleting ('deleting': recorded before the bytes are removed, so
-- that a collector killed meanwhile leaves a trace the next one resolves) or failed to delete
-- ('failed': error says why; the next collection retries). A row goes away when the blob is
-- gone, or is found referenced again.
CREATE TABLE gc_deletions (
  digest    TEXT PRIMARY KEY,
  state     TEXT NOT NULL CHECK (state IN ('deleting', 'failed')),
  collector TEXT NOT NULL,
  since     INTEGER NOT NULL,
  attempts  INTEGER NOT NULL DEFAULT 0,
  error     TEXT
) STRICT;
