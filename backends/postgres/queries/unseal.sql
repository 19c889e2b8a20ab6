-- Unseal: drops the seal triggers (none: a no-op), in one statement: the
-- key sequence table's first, as Seal locks them.
DO $unseal$
BEGIN
    DROP TRIGGER IF EXISTS {seal_trigger} ON {keyseq};
    DROP TRIGGER IF EXISTS {seal_trigger} ON {outbox};
END
$unseal$
