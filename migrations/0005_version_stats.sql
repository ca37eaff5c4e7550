-- blz registry metadata: cached tensor statistics of versions (GET /v2/<name>/blz/stats).

-- The document of `blz inspect --stats --json` for an archive, computed once by the registry and
-- kept as a blob (like value diffs). It depends only on the archive, so the key is its digest.
-- Garbage collection forgets a row whose archive is no longer a version anywhere.
CREATE TABLE version_stats (
  archive_digest TEXT PRIMARY KEY,
  stats_digest   TEXT NOT NULL,
  stats_size     INTEGER NOT NULL CHECK (stats_size >= 0),
  created        INTEGER NOT NULL
) STRICT;
