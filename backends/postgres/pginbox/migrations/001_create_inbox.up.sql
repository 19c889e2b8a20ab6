-- pginbox migration 001: the inbox's tables.
--
-- Names are unqualified and quoted: the tables land in the first schema of
-- search_path (goose, golang-migrate and psql users: set search_path to the
-- schema you configure in pginbox.Options.Schema, "public" by default).
-- pginbox.Migrate and pginbox.MigrationSQL render every quoted name
-- starting with "inbox" with the configured Options.Table, tables
-- schema-qualified.

-- One row per applied message ID. Record inserts (ON CONFLICT DO NOTHING)
-- in the consumer's transaction; the janitor (Purge) deletes rows older
-- than the retention horizon, oldest first, through the applied_at index.
-- COLLATE "C": IDs are compared byte for byte, never by locale rules, and
-- the primary key's B-tree compares them with memcmp.
CREATE TABLE "inbox" (
    id         text COLLATE "C" NOT NULL,
    applied_at timestamptz      NOT NULL DEFAULT now(),
    CONSTRAINT "inbox_pkey" PRIMARY KEY (id)
) WITH (
    -- Every row is inserted once and deleted once (by Purge), never
    -- updated: a queue-like table. The default thresholds (20% of the
    -- table dead, 20% newly inserted) let a table of millions of rows
    -- collect hundreds of thousands of dead index entries before a
    -- vacuum, which each Record's primary-key probe and each Purge's
    -- index scan then step over. Vacuum after 1% (and at least 1,000
    -- rows) instead, without the cost-based sleep, and analyze often
    -- enough that the planner's applied_at histogram follows the window.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
CREATE INDEX "inbox_applied_at_idx" ON "inbox" (applied_at);

-- The highest applied sequence number of each key (messages with
-- outbox-key-seq). KeySeqs locks a key's row with an upsert (creating it
-- with seq 0, "none", when the key has no row), SetKeySeqs updates it;
-- Purge deletes rows not set since the horizon.
CREATE TABLE "inbox_keyseq" (
    key        text COLLATE "C" NOT NULL,
    seq        bigint           NOT NULL,
    updated_at timestamptz      NOT NULL DEFAULT now(),
    CONSTRAINT "inbox_keyseq_pkey" PRIMARY KEY (key)
) WITH (
    -- Rows are updated by every applied message of their key: leave room
    -- on the page for new versions (KeySeqs' lock changes no indexed
    -- column, so its version is a HOT update) and vacuum early.
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
CREATE INDEX "inbox_keyseq_updated_at_idx" ON "inbox_keyseq" (updated_at);

-- The next offset to read of each source partition, per consumer group,
-- written with the effects (SaveOffsets) and read on start and on
-- partition assignment (Offsets). Never purged: one row per partition.
CREATE TABLE "inbox_offsets" (
    grp   text COLLATE "C" NOT NULL,
    topic text COLLATE "C" NOT NULL,
    part  integer          NOT NULL,
    next  bigint           NOT NULL,
    CONSTRAINT "inbox_offsets_pkey" PRIMARY KEY (grp, topic, part)
) WITH (
    -- A few rows, each updated by every transaction of its partition
    -- (next is not indexed: HOT updates when the page has room).
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
