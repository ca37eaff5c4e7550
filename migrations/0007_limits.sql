-- blz registry metadata: quotas (docs/registry-api.md, "Quotas and limits").

-- Who opened each upload session ("token:<name>", registry/rate_limiter.h ClientKey), so that
-- open sessions can be capped per token as well as per repository. Sessions opened before this
-- column existed have owner ''.
ALTER TABLE uploads ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX uploads_by_owner ON uploads (owner);
CREATE INDEX uploads_by_repository ON uploads (repository);

-- When each cached lossy delta was last served (Unix seconds): past the cache's byte budget,
-- the least recently used are evicted (and their blobs removed).
ALTER TABLE lossy_deltas ADD COLUMN last_used INTEGER NOT NULL DEFAULT 0;
UPDATE lossy_deltas SET last_used = created;
CREATE INDEX lossy_deltas_by_use ON lossy_deltas (last_used, created);
