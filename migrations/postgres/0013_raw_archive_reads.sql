-- blz registry metadata on PostgreSQL: migrations/0013_raw_archive_reads.sql translated (raw
-- archive blobs being read, so that no replica drops one another replica is serving).
CREATE TABLE raw_archive_reads (
  digest         TEXT COLLATE "C" PRIMARY KEY,
  served_until   BIGINT NOT NULL DEFAULT 0,
  dropping_until BIGINT NOT NULL DEFAULT 0
);
