-- blz registry metadata on PostgreSQL: migrations/0004_scoped_tokens.sql translated (scoped,
-- expiring, revocable API tokens). The SQLite file's revocation of duplicate names is
-- omitted (0001_init.sql here says why).

ALTER TABLE tokens ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT '*:pull,push,delete,admin';
ALTER TABLE tokens ADD COLUMN expires BIGINT;
ALTER TABLE tokens ADD COLUMN revoked BIGINT;

CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked IS NULL;
