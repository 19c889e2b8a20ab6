-- AppendInTx with Options.KeySequence, one key: adds ? (the number of the
-- call's new entries of the key) to the key's counter, creating it, in the
-- caller's transaction, whose row lock then serializes the appends of the
-- key until it ends. The new last number comes back as the statement's
-- insert ID (LAST_INSERT_ID(expr)), in the same round trip.
-- ? key_hash (SHA-256 of the key), ? key, ? count, ? count.
INSERT INTO {keyseq} (key_hash, `key`, last)
VALUES (?, ?, LAST_INSERT_ID(?))
ON DUPLICATE KEY UPDATE last = LAST_INSERT_ID(last + ?)
