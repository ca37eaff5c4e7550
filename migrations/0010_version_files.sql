-- blz registry metadata: the files of each model version, for the Hugging Face Hub API
-- (registry/hub/version_files.h). Listing a version's files (paths, sizes, SHA-256) needs the
-- archive's header, and a file's Git blob id (the Hub's "oid" of a small file) needs its bytes;
-- both are read once per archive and kept here, so a listing never rebuilds an archive that is
-- stored as a full patch. Rows depend only on the archive's content, so the key is its digest;
-- `position` is the file's index in the archive header (paths sorted bytewise).
--   sha256   64 hex: SHA-256 of the file (the archive header's)
--   git_oid  40 hex: the Hub's oid: SHA-1 of "blob <size>\0" + the file (lfs = 0), or of the
--            file's Git LFS pointer text (lfs = 1)
--   lfs      1 when the Hub would store the file with Git LFS (weights, files >= 10 MiB)
CREATE TABLE version_files (
  archive_digest TEXT NOT NULL,
  position       INTEGER NOT NULL CHECK (position >= 0),
  path           TEXT NOT NULL,
  size           INTEGER NOT NULL CHECK (size >= 0),
  sha256         TEXT NOT NULL,
  git_oid        TEXT NOT NULL,
  lfs            INTEGER NOT NULL CHECK (lfs IN (0, 1)),
  PRIMARY KEY (archive_digest, position)
) STRICT;
