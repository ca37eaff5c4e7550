-- blz registry metadata: patch uploads (issue 27, "Pushes upload a patch"). An upload session
-- opened with POST /v2/<name>/blobs/uploads/?blz-patch-from=<archive digest> receives the bytes
-- of a patch (patcher/patch.h) against that base archive instead of the blob itself; the
-- closing PUT ?digest=<target> applies it to the registry's copy of the base and publishes the
-- result only when it is exactly <target> (docs/registry-api.md, "Patch uploads").
--   patch_from  the base archive's digest ("sha256:<64 hex>"); '' for an ordinary upload.
-- Stored with the session, so any replica continues and finishes it.
ALTER TABLE uploads ADD COLUMN patch_from TEXT NOT NULL DEFAULT '';
