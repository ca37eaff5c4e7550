-- blz registry metadata on PostgreSQL: migrations/0012_archive_chains.sql translated (archives
-- stored as a verified patch from a parent archive).
CREATE TABLE archive_chains (
  archive_digest TEXT COLLATE "C" PRIMARY KEY,
  parent_digest  TEXT COLLATE "C" NOT NULL,
  patch_digest   TEXT COLLATE "C" NOT NULL,
  patch_size     BIGINT NOT NULL CHECK (patch_size >= 0),
  depth          BIGINT NOT NULL CHECK (depth >= 1),
  rebuild_bytes  BIGINT NOT NULL CHECK (rebuild_bytes >= 0),
  created        BIGINT NOT NULL
);
CREATE INDEX archive_chains_parent ON archive_chains (parent_digest);
CREATE INDEX archive_chains_patch ON archive_chains (patch_digest);
