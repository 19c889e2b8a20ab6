-- mysqloutbox migration 002: the park time of parked entries, for
-- Backend.PurgeParked (outbox.ParkedPurger).
--
-- parked_at is set by the statements that park an entry (MarkFailed's
-- park, the fetch's park of a row it cannot publish) to the server's UTC
-- time, and is NULL for every pending entry: Requeue copies a parked
-- entry into a new pending row, which starts without one. The column is
-- the table's last and nullable, so MySQL 8.0.12+ and MariaDB 10.3+ add
-- it without copying the table (instant ADD COLUMN). No index: the purge
-- reads parked rows through outbox_due_idx (partition, state, ...), which
-- leads with the state after the partition, and sorts the few it finds.
--
-- The entries parked before this migration get the migration's time as
-- their park time (the time they were really parked is not recorded):
-- they count as parked now, so a retention removes them later rather
-- than sooner. An entry parked later without a park time (by a relay of
-- a build before this migration, or imported parked) gets one the first
-- time PurgeParked finds it.
--
-- MySQL has no ADD COLUMN IF NOT EXISTS: Migrate runs this statement
-- again after a run that stopped half-way, and takes the server's
-- "duplicate column" error (1060) as done.
ALTER TABLE `outbox` ADD COLUMN parked_at DATETIME(6) NULL;

UPDATE `outbox` SET parked_at = UTC_TIMESTAMP(6) WHERE state = 'parked' AND parked_at IS NULL;
