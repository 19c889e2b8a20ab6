-- pgoutbox migration 006: what moving a live outbox needs (outbox.Holder,
-- outbox.Importer, outbox.Sealer; see docs/postgres.md, "Moving an
-- outbox"). Nothing here is read or written by appends, and only the hold
-- table by the fetch (an uncorrelated NOT EXISTS, evaluated once per
-- fetch).

-- The hold: at most one row. While it exists, FindPendingBatch and
-- FetchBatch return nothing. since is when the outbox was first held, by
-- the database's clock; holding again keeps it and replaces the reason.
CREATE TABLE "outbox_hold" (
    one    boolean     NOT NULL DEFAULT true,
    reason text        NOT NULL,
    since  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "outbox_hold_pkey" PRIMARY KEY (one),
    CONSTRAINT "outbox_hold_check" CHECK (one)
);

-- The seq values of imported entries: from the lowest bigint up, in the
-- order imported, all below the seq of every appended entry (the column's
-- identity sequence starts at 1). The fetch orders by (next_at, seq) and
-- the per-key hold-back compares seq, so an imported entry comes before
-- the appended entries of its key.
CREATE SEQUENCE "outbox_import_seq" AS bigint
    MINVALUE -9223372036854775808 MAXVALUE -1 START WITH -9223372036854775808;

-- The seal: Backend.Seal creates two triggers named "outbox_sealed" that
-- run this function, and Unseal drops them; while they do not exist,
-- appends run no code of the seal. One is BEFORE INSERT FOR EACH ROW on
-- the outbox table, WHEN (NEW.seq > 0): every appended row (ON CONFLICT DO
-- NOTHING runs it before the conflict check, so an idempotent re-append
-- fails too), but not an imported one (negative seq). The other is BEFORE
-- INSERT FOR EACH STATEMENT on the key sequence table: the append
-- statement of Options.KeySequence inserts its counters there, even when
-- every ID of the call is already stored (then it inserts no outbox row).
-- TG_ARGV[0] is the outbox's qualified name. SQLSTATE OBSLD is mapped to
-- outbox.ErrSealed by the backend.
CREATE FUNCTION "outbox_seal"() RETURNS trigger LANGUAGE plpgsql AS $seal$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'OBSLD',
        MESSAGE = format('the outbox %s is sealed: it was moved to another outbox', TG_ARGV[0]),
        HINT = 'append to its destination, or unseal it to roll the move back';
END
$seal$;
