-- blz registry metadata on PostgreSQL: migrations/0007_limits.sql translated (upload session
-- owners, the lossy-delta cache's use counter). The SQLite file's numbering of existing
-- lossy_deltas rows is omitted (0001_init.sql here says why).

ALTER TABLE uploads ADD COLUMN owner TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX uploads_by_owner ON uploads (owner);
CREATE INDEX uploads_by_repository ON uploads (repository);

ALTER TABLE lossy_deltas ADD COLUMN last_used BIGINT NOT NULL DEFAULT 0;
CREATE INDEX lossy_deltas_by_use ON lossy_deltas (last_used);
