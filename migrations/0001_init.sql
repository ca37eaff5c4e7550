-- blz registry metadata, schema version 1.
--
-- Migrations are numbered NNNN_<name>.sql and append-only: never edit a released file, add a
-- new one. Each file runs inside one transaction and the store records the version it reached
-- with PRAGMA user_version (store/migrations.h). Timestamps are Unix seconds (UTC). Digests are
-- "sha256:<64 lower-case hex>".

-- A repository (OCI <name>); created by the first manifest push.
CREATE TABLE repositories (
  id      INTEGER PRIMARY KEY,
  name    TEXT NOT NULL UNIQUE,
  created INTEGER NOT NULL
) STRICT;

-- Blobs held by the content-addressed store (<data>/blobs/sha256/..). Blobs are shared by all
-- repositories. The file system is the authority on presence; this table records sizes and
-- when each blob was first stored.
CREATE TABLE blobs (
  digest  TEXT PRIMARY KEY,
  size    INTEGER NOT NULL CHECK (size >= 0),
  created INTEGER NOT NULL
) STRICT;

-- Manifests, stored byte-exact (content) per repository.
CREATE TABLE manifests (
  repository_id INTEGER NOT NULL REFERENCES repositories (id),
  digest        TEXT NOT NULL,
  media_type    TEXT NOT NULL,
  content       BLOB NOT NULL,
  created       INTEGER NOT NULL,
  PRIMARY KEY (repository_id, digest)
) STRICT;

-- Tags: (repository, tag) -> manifest digest. Moving a tag overwrites the row.
CREATE TABLE tags (
  repository_id   INTEGER NOT NULL REFERENCES repositories (id),
  tag             TEXT NOT NULL,
  manifest_digest TEXT NOT NULL,
  updated         INTEGER NOT NULL,
  PRIMARY KEY (repository_id, tag),
  FOREIGN KEY (repository_id, manifest_digest) REFERENCES manifests (repository_id, digest)
) STRICT;

-- Model versions: the .blz archive (the manifest's single layer) of every manifest pushed to a
-- repository. The patch endpoint accepts only archive digests listed here for its repository.
CREATE TABLE versions (
  repository_id   INTEGER NOT NULL REFERENCES repositories (id),
  archive_digest  TEXT NOT NULL,
  manifest_digest TEXT NOT NULL,
  archive_size    INTEGER NOT NULL CHECK (archive_size >= 0),
  created         INTEGER NOT NULL,
  PRIMARY KEY (repository_id, archive_digest),
  FOREIGN KEY (repository_id, manifest_digest) REFERENCES manifests (repository_id, digest)
) STRICT;

-- Computed patches (patcher/patch.h) between two archives, kept as blobs. A patch depends
-- only on the two archives, so the key is (from, to); repository_id records where it was first
-- requested.
CREATE TABLE patches (
  from_digest   TEXT NOT NULL,
  to_digest     TEXT NOT NULL,
  patch_digest  TEXT NOT NULL,
  patch_size    INTEGER NOT NULL CHECK (patch_size >= 0),
  repository_id INTEGER REFERENCES repositories (id),
  created       INTEGER NOT NULL,
  PRIMARY KEY (from_digest, to_digest)
) STRICT;

-- API tokens. Only the SHA-256 (hex) of each token is stored.
CREATE TABLE tokens (
  token_sha256 TEXT PRIMARY KEY,
  name         TEXT NOT NULL,
  created      INTEGER NOT NULL
) STRICT;

-- Open blob upload sessions (data in <data>/uploads/session-<uuid>).
CREATE TABLE uploads (
  uuid       TEXT PRIMARY KEY,
  repository TEXT NOT NULL,
  started    INTEGER NOT NULL
) STRICT;
