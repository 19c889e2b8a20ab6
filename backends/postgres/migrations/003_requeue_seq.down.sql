-- pgoutbox migration 003, down: seq back to GENERATED ALWAYS.
ALTER TABLE "outbox" ALTER COLUMN seq SET GENERATED ALWAYS;
