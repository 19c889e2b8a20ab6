-- SetKeySeqs: ? the keys as a JSON array of [hash, key, seq] (hash and
-- key in hex, seq a decimal string), sorted by hash. Sets each key's
-- number and updated_at, inserting the rows of keys without one.
INSERT INTO {keyseq} (key_hash, k, seq, updated_at)
SELECT UNHEX(j.h), UNHEX(j.k), j.s, UTC_TIMESTAMP(6)
FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(64) PATH '$[0]', k VARCHAR(8192) PATH '$[1]', s BIGINT PATH '$[2]')) AS j
ORDER BY j.n
ON DUPLICATE KEY UPDATE seq = VALUES(seq), updated_at = VALUES(updated_at)
