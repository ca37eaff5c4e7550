-- blz registry metadata: archives stored as chains (issue 27, "Storage keeps what changed";
-- docs/storage.md, "Chains"). A row means: the archive `archive_digest` is stored as the verified
-- patch `patch_digest` (patcher/patch.h) from the archive `parent_digest`, which is itself stored
-- as a full patch, raw, or as a chain link (at most `depth` - 1 more links). The same patch is
-- also recorded in `patches` as (parent_digest, archive_digest), so serving it needs no rebuild.
--   depth          links to apply to rebuild the archive (1 = its parent is stored whole); an
--                  upper bound after re-bases (a re-base never deepens an archive)
--   rebuild_bytes  bytes read to rebuild it: the root's stored form plus every link's patch
--                  (an upper bound, like depth)
-- A row is written only after the patch verified (applied to the parent, it rebuilt exactly
-- archive_digest). Garbage collection keeps a chained archive's parent (and the parent's own
-- stored form) as long as the archive is kept.
CREATE TABLE archive_chains (
  archive_digest TEXT PRIMARY KEY,
  parent_digest  TEXT NOT NULL,
  patch_digest   TEXT NOT NULL,
  patch_size     INTEGER NOT NULL CHECK (patch_size >= 0),
  depth          INTEGER NOT NULL CHECK (depth >= 1),
  rebuild_bytes  INTEGER NOT NULL CHECK (rebuild_bytes >= 0),
  created        INTEGER NOT NULL
) STRICT;
CREATE INDEX archive_chains_parent ON archive_chains (parent_digest);
CREATE INDEX archive_chains_patch ON archive_chains (patch_digest);
