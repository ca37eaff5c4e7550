-- blz registry metadata: the large tensors of each archive by content (issue 27, "identical
-- tensors are stored once"). Chain storage (registry/archive_chains.cc) looks here for
-- versions, in any repository and of any structure, that hold tensors identical to an archive's
-- and tries them as its parent: a patch codes a tensor whose twin is in its base as
-- `identical` chunks (docs/patch-format.md), so the bytes are stored once. Rows depend only on
-- the archive's bytes, so the key is its digest; `position` is the tensor's index in the
-- archive header. Only tensors of at least 64 KiB are listed (smaller ones save too little to
-- steer the choice of a parent).
--   sha256  64 hex: SHA-256 of the tensor's bytes (the archive header's)
--   length  its bytes
CREATE TABLE archive_tensors (
  archive_digest TEXT NOT NULL,
  position       INTEGER NOT NULL CHECK (position >= 0),
  sha256         TEXT NOT NULL,
  length         INTEGER NOT NULL CHECK (length >= 0),
  PRIMARY KEY (archive_digest, position)
) STRICT;
CREATE INDEX archive_tensors_content ON archive_tensors (sha256, length);
-- Parents are looked up by archive digest (here and in ListVersionsOfArchive).
CREATE INDEX versions_by_archive ON versions (archive_digest);
