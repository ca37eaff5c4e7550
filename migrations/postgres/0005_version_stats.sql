-- blz registry metadata on PostgreSQL: migrations/0005_version_stats.sql translated (cached
-- tensor statistics of versions).

CREATE TABLE version_stats (
  archive_digest TEXT COLLATE "C" PRIMARY KEY,
  stats_digest   TEXT COLLATE "C" NOT NULL,
  stats_size     BIGINT NOT NULL CHECK (stats_size >= 0),
  created        BIGINT NOT NULL
);
