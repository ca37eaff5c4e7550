-- blz registry metadata on PostgreSQL: migrations/0014_archive_tensors.sql translated (the large
-- tensors of each archive by content, to find parents holding identical tensors).
CREATE TABLE archive_tensors (
  archive_digest TEXT COLLATE "C" NOT NULL,
  position       BIGINT NOT NULL CHECK (position >= 0),
  sha256         TEXT COLLATE "C" NOT NULL,
  length         BIGINT NOT NULL CHECK (length >= 0),
  PRIMARY KEY (archive_digest, position)
);
CREATE INDEX archive_tensors_content ON archive_tensors (sha256, length);
-- Parents are looked up by archive digest (here and in ListVersionsOfArchive).
CREATE INDEX versions_by_archive ON versions (archive_digest);
