-- Record: ? the call's token, ? the IDs as a JSON array of hex strings,
-- sorted (so that concurrent calls lock the rows in one order). Inserts
-- the IDs not recorded yet; an ID another transaction recorded is
-- skipped (IGNORE: a duplicate key is a warning, and the caller checked
-- every other error IGNORE would hide: lengths). When the other
-- transaction has not committed, InnoDB makes this one wait for its row
-- lock, then skips the ID if it committed or inserts it if it rolled
-- back. The affected-rows count says how many IDs were new.
INSERT IGNORE INTO {inbox} (id, applied_at, tok)
SELECT UNHEX(j.h), UTC_TIMESTAMP(6), ?
FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(510) PATH '$')) AS j
ORDER BY j.n
