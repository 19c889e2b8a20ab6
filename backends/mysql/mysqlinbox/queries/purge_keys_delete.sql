-- Purge, keys, second statement: ? the key hashes purge_keys.sql locked,
-- as a JSON array of hex strings.
DELETE r
FROM JSON_TABLE(?, '$[*]' COLUMNS (h VARCHAR(64) PATH '$')) AS j
STRAIGHT_JOIN {keyseq} AS r ON r.key_hash = UNHEX(j.h)
