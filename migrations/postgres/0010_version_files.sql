-- blz registry metadata on PostgreSQL: migrations/0010_version_files.sql translated (the files
-- of each model version for the Hugging Face Hub API, read once per archive).
CREATE TABLE version_files (
  archive_digest TEXT COLLATE "C" NOT NULL,
  position       BIGINT NOT NULL CHECK (position >= 0),
  path           TEXT COLLATE "C" NOT NULL,
  size           BIGINT NOT NULL CHECK (size >= 0),
  sha256         TEXT COLLATE "C" NOT NULL,
  git_oid        TEXT COLLATE "C" NOT NULL,
  lfs            BIGINT NOT NULL CHECK (lfs IN (0, 1)),
  PRIMARY KEY (archive_digest, position)
);
