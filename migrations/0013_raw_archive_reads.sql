-- blz registry metadata: raw archive blobs being read, shared by every replica (issue 25).
-- ArchiveStorage (registry/archive_storage.h) replaces a raw archive blob by its verified full
-- patch; a replica handing out the raw blob (a GET, a patch computation, a presigned URL) first
-- records here that it must stay until `served_until`, and the replica that drops it first
-- records `dropping_until` (its lease on the delete). Each write happens in a transaction that
-- sees the other column: a read and a drop never overlap, whichever replica runs them.
-- Times in Unix milliseconds of the writer's clock. A row with both times past is dead
-- (pruned by the next drop, or by any replica now and then).
CREATE TABLE raw_archive_reads (
  digest         TEXT PRIMARY KEY,
  served_until   INTEGER NOT NULL DEFAULT 0,
  dropping_until INTEGER NOT NULL DEFAULT 0
) STRICT;
