-- pgoutbox migration 006, down: drops the hold, the import sequence and
-- the seal (its triggers first, if the outbox is sealed). Imported entries
-- stay, with their negative seq: they keep their place before appended
-- entries.
DROP TRIGGER IF EXISTS "outbox_sealed" ON "outbox";
DROP TRIGGER IF EXISTS "outbox_sealed" ON "outbox_keyseq";
DROP FUNCTION IF EXISTS "outbox_seal"();
DROP SEQUENCE IF EXISTS "outbox_import_seq";
DROP TABLE IF EXISTS "outbox_hold";
