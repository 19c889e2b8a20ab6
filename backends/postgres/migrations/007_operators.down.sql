-- pgoutbox migration 007, down: drops the pauses (paused topics and
-- partitions are delivered again), the attempt histories, the deferrals
-- (a deferred entry no longer holds back its key) and the relays' host,
-- version and start, and rebuilds the two indexes as 001 made them.
DROP TABLE IF EXISTS "outbox_pause_topic";
DROP TABLE IF EXISTS "outbox_pause_part";
ALTER TABLE "outbox_member"
    DROP COLUMN IF EXISTS host,
    DROP COLUMN IF EXISTS version,
    DROP COLUMN IF EXISTS started,
    DROP COLUMN IF EXISTS renewed_at;
DROP INDEX IF EXISTS "outbox_parked_idx";
CREATE INDEX "outbox_parked_idx" ON "outbox" (id)
    WHERE state = 'parked';
DROP INDEX IF EXISTS "outbox_holdback_idx";
CREATE INDEX "outbox_holdback_idx" ON "outbox" (partition, key, seq)
    WHERE attempts > 0 AND state = 'pending';
ALTER TABLE "outbox_archive" DROP COLUMN IF EXISTS history;
ALTER TABLE "outbox"
    DROP COLUMN IF EXISTS history,
    DROP COLUMN IF EXISTS deferred;
