-- blz registry metadata, schema version 3: scoped, expiring, revocable API tokens.
--
-- scope: what the token may do, in the grammar of registry/scope.h and docs/registry-api.md
--   ("PATTERN:ACTIONS[;PATTERN:ACTIONS...]", e.g. "org/*:pull,push"). Rows of a version-2 DB
--   hold the admin token printed at first start, so they get full access.
-- expires: Unix seconds after which the token is refused; NULL = never.
-- revoked: Unix seconds at which the token was revoked; NULL = active. Revoked rows are kept
--   (their names may be reused), so an issued access token naming a revoked row fails at once.
ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT '*:pull,push,delete,admin';
ALTER TABLE tokens ADD COLUMN expires INTEGER;
ALTER TABLE tokens ADD COLUMN revoked INTEGER;

-- Names are unique among active tokens (blz never made two rows with one name, but a DB
-- edited by hand might have: keep the oldest of each name active).
UPDATE tokens SET revoked = created
  WHERE rowid NOT IN (SELECT min(rowid) FROM tokens GROUP BY name);
CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked IS NULL;
