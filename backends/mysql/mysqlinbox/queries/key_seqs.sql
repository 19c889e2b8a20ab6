-- KeySeqs: ? the SHA-256 hashes of the keys as a JSON array of hex
-- strings, sorted. A locking read: it reads the newest committed numbers
-- (not the transaction's snapshot) and locks the rows until the
-- transaction ends, so a concurrent KeySeqs of the same key waits. A row
-- whose seq is NULL is only a lock (see key_seqs_lock.sql).
-- FORCE INDEX keeps the lookup on the primary key: on a small table the
-- optimizer would rather scan it, and a locking scan locks every row (a
-- KeySeqs of one key would block every other key, and Purge skip them).
SELECT r.key_hash, r.seq
FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(64) PATH '$')) AS j
STRAIGHT_JOIN {keyseq} AS r FORCE INDEX (PRIMARY) ON r.key_hash = UNHEX(j.h)
ORDER BY j.n
FOR UPDATE
