-- blz registry metadata: any OCI content (image manifests, indexes, artifacts, Docker schema 2),
-- the referrers API, deletes, and blobs linked into repositories.

-- What the referrers API lists of a manifest (docs/registry-api.md, "Referrers"): the digest of
-- its `subject` (NULL when it has none), its artifact type (`artifactType`, else an image
-- manifest's config.mediaType; NULL when neither) and its `annotations` as JSON object text
-- (NULL when it has none). Rows of a schema-2 DB are blz model manifests: none has a subject.
ALTER TABLE manifests ADD COLUMN subject_digest TEXT;
ALTER TABLE manifests ADD COLUMN artifact_type TEXT;
ALTER TABLE manifests ADD COLUMN annotations TEXT;
CREATE INDEX manifests_by_subject ON manifests (repository_id, subject_digest)
  WHERE subject_digest IS NOT NULL;

-- Blobs linked into a repository, as distribution keeps them: a blob is readable at
-- /v2/<name>/blobs/<digest> only while it is linked into <name>. A finished upload, a
-- cross-repository mount and a manifest push link blobs (and refresh `created`); DELETE of the
-- blob unlinks it. The bytes stay in the blob store (shared by every repository) until garbage
-- collection finds them unreferenced: a link protects a blob only for the grace period (a push
-- in progress, whose manifest is not there yet). Keyed by name, not repositories.id: blobs are
-- uploaded before the first manifest creates the repository.
CREATE TABLE repository_blobs (
  repository TEXT NOT NULL,
  digest     TEXT NOT NULL,
  created    INTEGER NOT NULL,
  PRIMARY KEY (repository, digest)
) STRICT;

-- The blobs each manifest references (config and layers): what garbage collection keeps.
CREATE TABLE manifest_blobs (
  repository_id   INTEGER NOT NULL,
  manifest_digest TEXT NOT NULL,
  blob_digest     TEXT NOT NULL,
  PRIMARY KEY (repository_id, manifest_digest, blob_digest),
  FOREIGN KEY (repository_id, manifest_digest) REFERENCES manifests (repository_id, digest)
) STRICT;
CREATE INDEX manifest_blobs_by_blob ON manifest_blobs (blob_digest);

-- Every blob a stored manifest references is linked into the manifest's repository and
-- recorded in manifest_blobs (the CTE is materialized so that json_each never sees a row that
-- is not valid JSON).
CREATE TEMP TABLE referenced AS
  WITH valid AS MATERIALIZED (
    SELECT m.repository_id AS repository_id, m.digest AS manifest_digest,
           CAST(m.content AS TEXT) AS body, m.created AS created
    FROM manifests m WHERE json_valid(CAST(m.content AS TEXT))
  )
  SELECT repository_id, manifest_digest, json_extract(body, '$.config.digest') AS blob_digest,
         created
  FROM valid WHERE json_type(body, '$.config.digest') = 'text'
  UNION ALL
  SELECT v.repository_id, v.manifest_digest, json_extract(l.value, '$.digest'), v.created
  FROM valid v, json_each(v.body, '$.layers') l
  WHERE json_type(l.value, '$.digest') = 'text';
INSERT OR IGNORE INTO manifest_blobs (repository_id, manifest_digest, blob_digest)
  SELECT repository_id, manifest_digest, blob_digest FROM referenced;
INSERT OR IGNORE INTO repository_blobs (repository, digest, created)
  SELECT r.name, x.blob_digest, x.created FROM referenced x
  JOIN repositories r ON r.id = x.repository_id;
DROP TABLE referenced;
