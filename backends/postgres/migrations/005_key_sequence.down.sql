-- pgoutbox migration 005, down: drops the per-key sequence counters
-- (appends with Options.KeySequence then fail until 005 is applied again,
-- and every key restarts at 1).
DROP TABLE IF EXISTS "outbox_keyseq";
