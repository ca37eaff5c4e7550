-- blz registry metadata: upload sessions shared by replicas (issue 25, "a chunked upload started
-- on replica A continues on B and finishes on C"). The session's offset and the chunks received
-- live here and in the blob store, not in one replica's <data>/uploads:
--   size    bytes received so far (the offset the next chunk must start at); advanced only by
--           `UPDATE uploads SET size = <new> ... WHERE uuid = ? AND size = <old>`, which is the
--           per-session lock across replicas (a chunk at a stale offset changes no row: 416);
--   parts   the names of the chunks stored in the blob store (BlobStore::PutUploadPart), in
--           order, each followed by ';';
--   updated when the last chunk arrived (Unix seconds; idle sessions are purged by it).
ALTER TABLE uploads ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE uploads ADD COLUMN parts TEXT NOT NULL DEFAULT '';
ALTER TABLE uploads ADD COLUMN updated INTEGER NOT NULL DEFAULT 0;
UPDATE uploads SET updated = started;
