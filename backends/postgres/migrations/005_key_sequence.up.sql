-- pgoutbox migration 005: the per-key sequence counters of
-- Options.KeySequence.
--
-- One row per non-empty key ever appended with Options.KeySequence on:
-- last is the last sequence number given to the key. AppendInTx upserts
-- the rows of its keys in the caller's transaction (INSERT ... ON CONFLICT
-- DO UPDATE ... RETURNING), so a rolled-back append gives its numbers
-- back, and the row lock serializes concurrent appends of one key. Rows
-- are never deleted by pgoutbox: deleting one restarts its key at 1.
-- Without Options.KeySequence the table stays empty and is never read.
CREATE TABLE "outbox_keyseq" (
    key  bytea  NOT NULL,
    last bigint NOT NULL,
    CONSTRAINT "outbox_keyseq_pkey" PRIMARY KEY (key)
) WITH (
    -- Every append of a key updates its row (last is not indexed, so the
    -- update is HOT): leave room on the page for the new versions and
    -- vacuum early.
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
