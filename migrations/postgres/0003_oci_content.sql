-- blz registry metadata on PostgreSQL: migrations/0003_oci_content.sql translated (any OCI
-- content, referrers, deletes, blobs linked into repositories). The SQLite file's backfill of
-- manifest_blobs and repository_blobs from stored manifests is omitted (0001_init.sql here
-- says why).

ALTER TABLE manifests ADD COLUMN subject_digest TEXT COLLATE "C";
ALTER TABLE manifests ADD COLUMN artifact_type TEXT COLLATE "C";
ALTER TABLE manifests ADD COLUMN annotations TEXT COLLATE "C";
CREATE INDEX manifests_by_subject ON manifests (repository_id, subject_digest)
  WHERE subject_digest IS NOT NULL;

CREATE TABLE repository_blobs (
  repository TEXT COLLATE "C" NOT NULL,
  digest     TEXT COLLATE "C" NOT NULL,
  created    BIGINT NOT NULL,
  PRIMARY KEY (repository, digest)
);

CREATE TABLE manifest_blobs (
  repository_id   BIGINT NOT NULL,
  manifest_digest TEXT COLLATE "C" NOT NULL,
  blob_digest     TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (repository_id, manifest_digest, blob_digest),
  FOREIGN KEY (repository_id, manifest_digest) REFERENCES manifests (repository_id, digest)
);
CREATE INDEX manifest_blobs_by_blob ON manifest_blobs (blob_digest);
