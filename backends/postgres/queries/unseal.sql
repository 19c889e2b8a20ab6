-- Unseal: drops the seal triggers (none: a no-op), in one statement. DROP
-- TRIGGER takes ACCESS EXCLUSIVE, which conflicts with the ACCESS SHARE an
-- append statement of Options.KeySequence takes on the outbox table before
-- it locks the key sequence table: so the outbox table's trigger goes
-- first (an append that holds ACCESS SHARE there is let through ahead of
-- the waiting DROP by PostgreSQL's lock queue), not the other way round,
-- which could deadlock with such a statement.
DO $unseal$
BEGIN
    DROP TRIGGER IF EXISTS {seal_trigger} ON {outbox};
    DROP TRIGGER IF EXISTS {seal_trigger} ON {keyseq};
END
$unseal$
