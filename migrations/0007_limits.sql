-- blz registry metadata: quotas (docs/registry-api.md, "Quotas and limits").

-- Who opened each upload session ("token:<name>", registry/rate_limiter.h ClientKey), so that
-- open sessions can be capped per token as well as per repository. Sessions opened before this
-- column existed have owner ''.
ALTER TABLE uploads ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX uploads_by_owner ON uploads (owner);
CREATE INDEX uploads_by_repository ON uploads (repository);

-- When each cached lossy delta was last computed or served, as a use counter (each use sets
-- it to the largest value + 1; no clock, so no ties): past the cache's byte budget, the least
-- recently used are evicted (and their blobs removed). Existing rows: in creation order.
ALTER TABLE lossy_deltas ADD COLUMN last_used INTEGER NOT NULL DEFAULT 0;
UPDATE lossy_deltas SET last_used = (SELECT COUNT(*) FROM lossy_deltas AS older
                                     WHERE older.created < lossy_deltas.created
                                        OR (older.created = lossy_deltas.created
                                            AND older.rowid <= lossy_deltas.rowid));
CREATE INDEX lossy_deltas_by_use ON lossy_deltas (last_used);
