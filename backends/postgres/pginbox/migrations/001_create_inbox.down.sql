-- pginbox migration 001, down: drops the inbox's tables and everything in
-- them (the applied IDs, key sequence numbers and stored offsets).
DROP TABLE IF EXISTS "inbox_offsets";
DROP TABLE IF EXISTS "inbox_keyseq";
DROP TABLE IF EXISTS "inbox";
