-- pgoutbox migration 007: what operators need (outbox.Lister,
-- outbox.Pauser, outbox.MemberLister; see docs/postgres.md, "Operators"):
-- the attempt history and the breaker's deferral of each entry, the paused
-- topics and partitions, the host, version and start of each relay, and
-- IDs paged in byte order. Adding the columns rewrites nothing (their
-- defaults are constants); the two partial indexes are rebuilt from the
-- failing and the parked rows only.

-- history: the entry's last failed attempts (outbox.MaxAttemptHistory at
-- most), oldest first, as a JSON array of {"at", "error", "owner"}: at is
-- the database's time in UTC (RFC 3339, microseconds), owner the lease
-- owner that made the attempt. NULL: never attempted. MarkFailed appends
-- to it; Requeue keeps it.
-- deferred: an open circuit breaker put the entry off (outbox.Failure
-- Deferred): it was not attempted, and it holds back the later entries of
-- its key as a failed entry does, until it is attempted, sent or parked.
ALTER TABLE "outbox"
    ADD COLUMN history  jsonb,
    ADD COLUMN deferred boolean NOT NULL DEFAULT false;

-- Archived (sent) entries keep their history.
ALTER TABLE "outbox_archive" ADD COLUMN history jsonb;

-- The per-key hold-back anti-join now also counts deferred entries.
DROP INDEX IF EXISTS "outbox_holdback_idx";
CREATE INDEX "outbox_holdback_idx" ON "outbox" (partition, key, seq)
    WHERE (attempts > 0 OR deferred) AND state = 'pending';

-- IDs are paged in byte order (COLLATE "C"), whatever the database's
-- collation: the parked index is rebuilt in that order.
DROP INDEX IF EXISTS "outbox_parked_idx";
CREATE INDEX "outbox_parked_idx" ON "outbox" (id COLLATE "C")
    WHERE state = 'parked';

-- The paused topics and partitions (outbox.Pauser): while a row is here,
-- fetches leave out the topic's entries (and hold back the later entries
-- of their keys), or return nothing for the partition. since is when it
-- was first paused, by the database's clock.
CREATE TABLE "outbox_pause_topic" (
    topic text        NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "outbox_pause_topic_pkey" PRIMARY KEY (topic)
);
CREATE TABLE "outbox_pause_part" (
    partition integer     NOT NULL,
    since     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "outbox_pause_part_pkey" PRIMARY KEY (partition)
);

-- What tells the relays of a fleet apart (outbox.Member): the machine,
-- the program's version (each at most 255 bytes), when the relay started
-- (by its own clock) and when it last heartbeat (by the database's).
ALTER TABLE "outbox_member"
    ADD COLUMN host       text        NOT NULL DEFAULT '',
    ADD COLUMN version    text        NOT NULL DEFAULT '',
    ADD COLUMN started    timestamptz,
    ADD COLUMN renewed_at timestamptz;
