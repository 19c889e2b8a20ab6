-- pgoutbox migration 004: the partition count stored with the outbox, a
-- lease row for every partition, and the member table of relay fleets.
--
-- {partitions} below is a placeholder for the partition count (1 or more)
-- the outbox is created with. pgoutbox.Migrate renders it from
-- Options.Partitions, and pgoutbox.MigrationSQL returns every up migration
-- with it (and Options.Table) rendered. goose and golang-migrate users:
-- replace {partitions} with your count before running this file (or run
-- the output of MigrationSQL instead). Left as it is, the file fails with a
-- syntax error at "{" rather than create an outbox with a count nobody
-- chose. For an outbox created before this migration, use the count its
-- appenders and relays have been using.

-- One row: the partition count, fixed for the life of the outbox.
-- pgoutbox.New reads it and refuses a different configured count.
CREATE TABLE "outbox_meta" (
    one        boolean     NOT NULL DEFAULT true,
    partitions integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "outbox_meta_pkey" PRIMARY KEY (one),
    CONSTRAINT "outbox_meta_check" CHECK (one AND partitions >= 1)
);

INSERT INTO "outbox_meta" (partitions) VALUES ({partitions});

-- A free lease row (owner '', version 0, expired) for every partition, so
-- AcquireLease is a plain UPDATE, which takes no lock when it fails (see
-- queries/acquire_lease.sql). Rows earlier AcquireLease calls created stay
-- as they are: versions never go back.
INSERT INTO "outbox_lease" (partition, owner, version, expires_at)
SELECT p, '', 0, timestamptz 'epoch'
FROM generate_series(0, {partitions} - 1) AS p
ON CONFLICT (partition) DO NOTHING;

-- The relays of the outbox's fleet (outbox.Membership): one row per relay,
-- upserted by Backend.Heartbeat, deleted by Backend.Leave or, once expired,
-- by another relay's Heartbeat.
CREATE TABLE "outbox_member" (
    owner          text        NOT NULL,
    -- the partitions the relay holds, ascending
    partitions     integer[]   NOT NULL DEFAULT '{}',
    -- the relay's cap; 0 means none
    max_partitions integer     NOT NULL DEFAULT 0,
    expires_at     timestamptz NOT NULL,
    CONSTRAINT "outbox_member_pkey" PRIMARY KEY (owner)
);
