-- pgoutbox migration 001: the outbox table and the partition-lease table.
--
-- Names are unqualified and quoted: the tables land in the first schema of
-- search_path (goose, golang-migrate and psql users: set search_path to the
-- schema you configure in pgoutbox.Options.Schema, "public" by default).
-- pgoutbox.Migrate renders every quoted name starting with "outbox" with
-- the configured Options.Table and runs with search_path set to
-- Options.Schema.

CREATE TABLE "outbox" (
    -- seq is the append order: entries of one call in slice order.
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    -- id is the caller's idempotency key (or a UUIDv7).
    id         text        NOT NULL,
    partition  integer     NOT NULL,
    topic      text        NOT NULL,
    -- key is bytes: Kafka record keys need not be UTF-8.
    key        bytea       NOT NULL DEFAULT ''::bytea,
    payload    bytea,
    -- headers: binary-safe (values may hold any bytes); per header, sorted
    -- by name: uvarint(len(name)) name uvarint(len(value)) value.
    -- NULL = no headers map. Decode with pgoutbox.DecodeHeaders.
    headers    bytea,
    not_before timestamptz,
    created_at timestamptz NOT NULL,
    -- next_at is when the entry is due: greatest(append time, not_before),
    -- then the retry time MarkFailed stores.
    next_at    timestamptz NOT NULL,
    attempts   integer     NOT NULL DEFAULT 0,
    -- There is no in-flight state: the partition lease is the claim
    -- (see docs/postgres.md).
    state      text        NOT NULL DEFAULT 'pending',
    last_error text        NOT NULL DEFAULT '',
    CONSTRAINT "outbox_pkey" PRIMARY KEY (id),
    CONSTRAINT "outbox_state_check" CHECK (state IN ('pending', 'parked'))
) WITH (
    -- Rows are inserted once and deleted once: vacuum early and often so
    -- dead tuples and index entries of sent rows do not pile up.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The due claim: FindPendingBatch walks this index in (next_at, seq) order.
CREATE INDEX "outbox_due_idx" ON "outbox" (partition, next_at, seq)
    WHERE state = 'pending';

-- The per-key hold-back anti-join: only entries that failed and are still
-- pending are in it, so it stays tiny.
CREATE INDEX "outbox_holdback_idx" ON "outbox" (partition, key, seq)
    WHERE attempts > 0 AND state = 'pending';

-- Operators list parked entries by id (Inspector.Parked).
CREATE INDEX "outbox_parked_idx" ON "outbox" (id)
    WHERE state = 'parked';

-- One row per partition, never deleted, so versions never go backwards.
-- owner = '' means free. Migration 004 creates the rows of every
-- partition; before it, the first AcquireLease of a partition did.
CREATE TABLE "outbox_lease" (
    partition  integer     NOT NULL,
    owner      text        NOT NULL,
    version    bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT "outbox_lease_pkey" PRIMARY KEY (partition)
);
