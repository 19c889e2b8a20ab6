-- Purge, keys, second statement: ? the key hashes purge_keys.sql locked,
-- as a JSON array of hex strings.
-- FORCE INDEX: one primary-key lookup per key.
DELETE r
FROM JSON_TABLE(?, '$[*]' COLUMNS (h VARCHAR(64) PATH '$')) AS j
STRAIGHT_JOIN {keyseq} AS r FORCE INDEX (PRIMARY) ON r.key_hash = UNHEX(j.h)
