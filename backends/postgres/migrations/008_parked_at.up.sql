-- pgoutbox migration 008: the park time of parked entries, for
-- outbox.ParkedPurger (the relay's --parked-retention).
--
-- parked_at is when the entry was parked, by the database's clock: set by
-- MarkFailed's park and by FetchBatch's park of a row it cannot publish
-- (and by Import for an entry imported parked), cleared by Requeue. NULL
-- for every entry that is not parked, and for a row parked by a hand-made
-- UPDATE that did not set it (Backend.PurgeParked never removes those).
-- Adding the column rewrites nothing (no default).
ALTER TABLE "outbox" ADD COLUMN parked_at timestamptz;

-- Entries parked before this migration: the time of their last failed
-- attempt (history), else now, so a retention counts from no earlier
-- than the migration for them.
UPDATE "outbox"
SET parked_at = coalesce((history -> -1 ->> 'at')::timestamptz, now())
WHERE state = 'parked';

-- Backend.PurgeParked walks the parked entries oldest park first.
CREATE INDEX "outbox_parked_at_idx" ON "outbox" (parked_at)
    WHERE state = 'parked';
