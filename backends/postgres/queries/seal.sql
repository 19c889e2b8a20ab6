-- Seal: one statement. The locks (SHARE ROW EXCLUSIVE, which CREATE
-- TRIGGER takes too) wait for every open transaction that appended to the
-- outbox (an append holds ROW EXCLUSIVE on the outbox table, and with
-- Options.KeySequence on the key sequence table, until its transaction
-- ends) and queue every later append behind them; reads (the relays'
-- fetches) go on. The key sequence table is locked first: an append
-- statement of Options.KeySequence locks it before it takes ROW EXCLUSIVE
-- on the outbox table, so the other order could deadlock with one. Once
-- the locks are held the triggers are created unless they exist (migration
-- 006 explains them), so an append that waited fails with SQLSTATE OBSLD
-- when it runs. {outbox_literal} is the outbox table's qualified name as a
-- string literal, {trigger_literal} the triggers' name as one.
DO $seal$
BEGIN
    LOCK TABLE {keyseq} IN SHARE ROW EXCLUSIVE MODE;
    LOCK TABLE {outbox} IN SHARE ROW EXCLUSIVE MODE;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                   WHERE tgrelid = {outbox_literal}::regclass AND tgname = {trigger_literal}) THEN
        CREATE TRIGGER {seal_trigger} BEFORE INSERT ON {outbox}
            FOR EACH ROW WHEN (NEW.seq > 0) EXECUTE FUNCTION {seal_fn}({outbox_literal});
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                   WHERE tgrelid = {keyseq_literal}::regclass AND tgname = {trigger_literal}) THEN
        CREATE TRIGGER {seal_trigger} BEFORE INSERT ON {keyseq}
            FOR EACH STATEMENT EXECUTE FUNCTION {seal_fn}({outbox_literal});
    END IF;
END
$seal$
