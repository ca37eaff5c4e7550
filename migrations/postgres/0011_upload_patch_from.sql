-- blz registry metadata on PostgreSQL: migrations/0011_upload_patch_from.sql translated (the base
-- archive of a patch upload session; '' for an ordinary upload).
ALTER TABLE uploads ADD COLUMN patch_from TEXT COLLATE "C" NOT NULL DEFAULT '';
