-- mysqlinbox migration 001: the tables of an inbox.
--
-- Names are the default ones in backquotes; mysqlinbox.Migrate renders
-- every backquoted name that starts with "inbox" with Options.Table in its
-- place (mysqlinbox.MigrationSQL returns the rendered file, for goose or
-- golang-migrate users who chose another name). The tables land in the
-- connection's database.
--
-- Portability: MySQL 8.0.13 and later, MariaDB 10.6 and later (tested:
-- MariaDB 10.11). InnoDB, utf8mb4, DATETIME(6), expression defaults.
-- Every time is UTC by the server's clock (UTC_TIMESTAMP(6)), whatever the
-- session's time_zone, and DATETIME rather than TIMESTAMP: no 2038 limit,
-- and no conversion through the session's time zone when Purge compares
-- it with the horizon it is given (as microseconds since the Unix epoch).
--
-- MySQL commits each DDL statement on its own: a migration that stops
-- half-way is run again from its first statement, which is why every
-- statement here is IF NOT EXISTS.

-- One row per applied message ID (Store.Record), removed by Purge after
-- the retention horizon.
CREATE TABLE IF NOT EXISTS `inbox` (
    -- id is the message's ID, at most 255 bytes, compared byte for byte:
    -- VARBINARY, because utf8mb4_bin is a PAD SPACE collation, to which
    -- "a" and "a " would be one ID (the second message skipped as a
    -- duplicate), and a _ci collation would make "a" and "A" one.
    id         VARBINARY(255) NOT NULL,
    -- applied_at: when the recording transaction wrote it (UTC).
    applied_at DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    -- tok: a random number per Store.Record call, so that a call whose
    -- INSERT IGNORE inserted some of its IDs but not all can tell its own
    -- rows from rows other transactions committed (MySQL has no RETURNING
    -- on INSERT). 0 for rows written by hand.
    tok        BIGINT         NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    -- Purge removes the oldest records first, in bounded batches.
    KEY `applied_at_idx` (applied_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The highest applied sequence number of each key (Store.KeySeqs,
-- SetKeySeqs), removed by Purge when not set for the retention horizon.
CREATE TABLE IF NOT EXISTS `inbox_keyseq` (
    -- key_hash is SHA-256 of k: a key is up to 4096 bytes, more than an
    -- InnoDB index key holds.
    key_hash   BINARY(32)      NOT NULL,
    -- k: the key's bytes, for people reading the table.
    k          VARBINARY(4096) NOT NULL,
    -- seq: NULL while the row is only a lock (KeySeqs inserts it for a key
    -- never seen, so that a concurrent transaction of the same key waits
    -- for this one under READ COMMITTED too); such a key reads as absent.
    seq        BIGINT          NULL,
    updated_at DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (key_hash),
    KEY `updated_at_idx` (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The next offset to read of each source partition, per consumer group
-- (Store.SaveOffsets, Offsets); never purged.
CREATE TABLE IF NOT EXISTS `inbox_offsets` (
    grp    VARBINARY(255) NOT NULL,
    topic  VARBINARY(255) NOT NULL,
    part   INT            NOT NULL,
    `next` BIGINT         NOT NULL,
    PRIMARY KEY (grp, topic, part)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
