-- KeySeqs, second statement (only for keys without a row): ? the keys as
-- a JSON array of [hash, key] hex strings, sorted by hash. Inserts a row
-- with seq NULL for each, which this transaction holds locked until it
-- ends (a rollback removes it; SetKeySeqs fills it in): a concurrent
-- transaction of the same key waits on it under READ COMMITTED too,
-- where the locking read of a missing row locks nothing. A row another
-- transaction inserted meanwhile is skipped (the caller then reads it
-- with key_seqs.sql, waiting for that transaction).
INSERT IGNORE INTO {keyseq} (key_hash, k, seq, updated_at)
SELECT UNHEX(j.h), UNHEX(j.k), NULL, UTC_TIMESTAMP(6)
FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(64) PATH '$[0]', k VARCHAR(8192) PATH '$[1]')) AS j
ORDER BY j.n
