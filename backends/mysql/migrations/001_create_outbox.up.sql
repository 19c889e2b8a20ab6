-- mysqloutbox migration 001: every table of the outbox.
--
-- Names are the default ones in backquotes; mysqloutbox.Migrate renders
-- every backquoted name that starts with "outbox" with Options.Table in
-- its place, and {partitions} and {lease_rows} with the partition count the
-- outbox is created with (Options.Partitions) and a free lease row for each
-- partition. mysqloutbox.MigrationSQL returns the rendered file, for
-- goose or golang-migrate users: left as it is, this file fails with a
-- syntax error at "{" rather than create an outbox with a count nobody
-- chose. The tables land in the connection's database.
--
-- Portability: the same statements run on MySQL 8.0 and later and on
-- MariaDB 10.6 and later (tested: MariaDB 10.11). They rely on InnoDB,
-- utf8mb4, DATETIME(6), STORED generated columns, CHECK constraints (MySQL
-- enforces them from 8.0.16), JSON columns (MariaDB stores them as
-- LONGTEXT with a JSON_VALID check) and SHA2(). Every time is UTC by the
-- server's clock (UTC_TIMESTAMP(6)), whatever the session's time_zone: the
-- backend exchanges times as microseconds since the Unix epoch, so no
-- DSN setting (parseTime, loc) changes what is stored.
--
-- MySQL runs each DDL statement in a transaction of its own: a migration
-- that stops half-way is run again from its first statement, which is why
-- every statement here is IF NOT EXISTS or INSERT IGNORE.

CREATE TABLE IF NOT EXISTS `outbox` (
    -- seq is the append order: entries of one call in slice order, calls
    -- in insert order (AUTO_INCREMENT numbers rows at insert). Imported
    -- entries get negative values (see outbox_meta.import_seq), so they come
    -- before every appended entry of their key. The clustered index: new
    -- rows go to its end.
    seq         BIGINT         NOT NULL AUTO_INCREMENT,
    -- id is the caller's idempotency key (or a UUIDv7), at most 255 bytes
    -- of UTF-8. VARBINARY compares and sorts it by its bytes, as Go
    -- compares strings: utf8mb4_bin is a PAD SPACE collation, to which
    -- "x" and "x " are one key (an append of "x " would be skipped as a
    -- duplicate of "x"), and which sorts "a" after "a\t".
    id          VARBINARY(255) NOT NULL,
    `partition` INT            NOT NULL,
    topic       VARCHAR(255)   NOT NULL,
    -- key is bytes: Kafka record keys need not be UTF-8.
    `key`       VARBINARY(4096) NOT NULL DEFAULT '',
    -- key_hash stands for key in the indexes (a key is up to 4096 bytes,
    -- more than an index key may hold); lookups compare key too.
    key_hash    BINARY(32)     AS (UNHEX(SHA2(`key`, 256))) STORED,
    payload     LONGBLOB,
    -- headers: binary-safe, the encoding of pgoutbox.EncodeHeaders (per
    -- header, sorted by name: uvarint(len(name)) name uvarint(len(value))
    -- value). NULL = no headers map.
    headers     MEDIUMBLOB,
    not_before  DATETIME(6),
    created_at  DATETIME(6)    NOT NULL,
    -- next_at is when the entry is due: the later of its append time and
    -- not_before, then the retry time MarkFailed stores.
    next_at     DATETIME(6)    NOT NULL,
    attempts    INT            NOT NULL DEFAULT 0,
    -- There is no claimed state: the partition lease is the claim.
    state       ENUM('pending', 'parked') NOT NULL DEFAULT 'pending',
    last_error  TEXT           NOT NULL,
    -- history: the last outbox.MaxAttemptHistory failed attempts, oldest
    -- first, a JSON array of {"at", "error", "owner"} (at: UTC, RFC 3339
    -- with microseconds). NULL: never attempted.
    history     JSON,
    -- deferred: an open circuit breaker put the entry off (not an attempt).
    deferred    TINYINT(1)     NOT NULL DEFAULT 0,
    -- holds: the entry holds back the later entries of its key (it was
    -- attempted or deferred and is still pending). Kept by the server, so
    -- the hold-back index below only ever needs an equality on it.
    holds       TINYINT(1)     AS (state = 'pending' AND (attempts > 0 OR deferred <> 0)) STORED,
    PRIMARY KEY (seq),
    UNIQUE KEY `outbox_id_uq` (id),
    -- The due claim walks this index in (next_at, seq) order.
    KEY `outbox_due_idx` (`partition`, state, next_at, seq),
    -- The per-key hold-back anti-join: (partition, holds = 1, key_hash)
    -- finds the few failing entries of a key.
    KEY `outbox_holdback_idx` (`partition`, holds, key_hash, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per partition, never deleted, so versions never go backwards.
-- owner = '' means free.
CREATE TABLE IF NOT EXISTS `outbox_lease` (
    `partition` INT          NOT NULL,
    owner       VARCHAR(255) NOT NULL,
    version     BIGINT       NOT NULL,
    expires_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (`partition`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The archive of sent entries (Options.Archive), emptied by PurgeArchive.
CREATE TABLE IF NOT EXISTS `outbox_archive` (
    seq         BIGINT         NOT NULL,
    id          VARBINARY(255) NOT NULL,
    `partition` INT            NOT NULL,
    topic       VARCHAR(255)   NOT NULL,
    `key`       VARBINARY(4096) NOT NULL,
    payload     LONGBLOB,
    headers     MEDIUMBLOB,
    not_before  DATETIME(6),
    created_at  DATETIME(6)    NOT NULL,
    attempts    INT            NOT NULL,
    last_error  TEXT           NOT NULL,
    history     JSON,
    sent_at     DATETIME(6)    NOT NULL,
    PRIMARY KEY (id),
    -- PurgeArchive deletes the oldest rows first, in bounded batches.
    KEY `outbox_archive_sent_idx` (sent_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row: the partition count (fixed for the life of the outbox) and the
-- seal of a move. Every append reads this row with a shared lock (see
-- Seal), so nothing else is written to it: the hold and the import
-- counter, which change while appends run, have tables of their own.
CREATE TABLE IF NOT EXISTS `outbox_meta` (
    one         TINYINT(1)   NOT NULL DEFAULT 1,
    partitions  INT          NOT NULL,
    created_at  DATETIME(6)  NOT NULL,
    -- sealed = 1: appends fail with outbox.ErrSealed (see Seal).
    sealed      TINYINT(1)   NOT NULL DEFAULT 0,
    PRIMARY KEY (one),
    CONSTRAINT `outbox_meta_check` CHECK (one = 1 AND partitions >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The hold of a move (outbox.Holder): at most one row; while it exists,
-- fetches return nothing. since is when the outbox was first held.
CREATE TABLE IF NOT EXISTS `outbox_hold` (
    one    TINYINT(1)  NOT NULL DEFAULT 1,
    reason TEXT        NOT NULL,
    since  DATETIME(6) NOT NULL,
    PRIMARY KEY (one),
    CONSTRAINT `outbox_hold_check` CHECK (one = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The seq the next imported entry gets (outbox.Importer), counting up
-- from the lowest BIGINT: imported entries come before every appended
-- entry of their key (appended ones count up from 1).
CREATE TABLE IF NOT EXISTS `outbox_import` (
    one      TINYINT(1) NOT NULL DEFAULT 1,
    next_seq BIGINT     NOT NULL,
    PRIMARY KEY (one),
    CONSTRAINT `outbox_import_check` CHECK (one = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT IGNORE INTO `outbox_import` (one, next_seq) VALUES (1, -9223372036854775807);

INSERT IGNORE INTO `outbox_meta` (one, partitions, created_at)
VALUES (1, {partitions}, UTC_TIMESTAMP(6));

-- A free lease row (owner '', version 0, expired) for every partition.
INSERT IGNORE INTO `outbox_lease` (`partition`, owner, version, expires_at)
VALUES {lease_rows};

-- The relays of the outbox's fleet (outbox.Membership).
CREATE TABLE IF NOT EXISTS `outbox_member` (
    owner          VARCHAR(255) NOT NULL,
    -- the partitions the relay holds, ascending, comma-separated
    partitions     TEXT         NOT NULL,
    max_partitions INT          NOT NULL DEFAULT 0,
    expires_at     DATETIME(6)  NOT NULL,
    host           VARCHAR(255) NOT NULL DEFAULT '',
    version        VARCHAR(255) NOT NULL DEFAULT '',
    started        DATETIME(6),
    renewed_at     DATETIME(6),
    PRIMARY KEY (owner)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The per-key sequence counters of Options.KeySequence: one row per
-- non-empty key ever appended with it on; last is the last number given.
-- AppendInTx upserts them in the caller's transaction, so a rollback gives
-- the numbers back and the row lock serializes appends of one key.
CREATE TABLE IF NOT EXISTS `outbox_keyseq` (
    key_hash BINARY(32)      NOT NULL,
    `key`    VARBINARY(4096) NOT NULL,
    last     BIGINT          NOT NULL,
    PRIMARY KEY (key_hash)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The paused topics and partitions (outbox.Pauser).
CREATE TABLE IF NOT EXISTS `outbox_pause_topic` (
    topic VARCHAR(255) NOT NULL,
    since DATETIME(6)  NOT NULL,
    PRIMARY KEY (topic)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `outbox_pause_part` (
    `partition` INT         NOT NULL,
    since       DATETIME(6) NOT NULL,
    PRIMARY KEY (`partition`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
