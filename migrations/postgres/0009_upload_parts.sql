-- blz registry metadata on PostgreSQL: migrations/0009_upload_parts.sql translated (upload
-- sessions' offset, stored chunks and last activity, shared by replicas).
ALTER TABLE uploads ADD COLUMN size BIGINT NOT NULL DEFAULT 0;
ALTER TABLE uploads ADD COLUMN parts TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE uploads ADD COLUMN updated BIGINT NOT NULL DEFAULT 0;
UPDATE uploads SET updated = started;
