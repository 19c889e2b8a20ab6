-- pgoutbox migration 008, down: drops the park time (and its index).
DROP INDEX IF EXISTS "outbox_parked_at_idx";
ALTER TABLE "outbox" DROP COLUMN IF EXISTS parked_at;
