-- Import, last statement: ? ? the seqs the call took. Counts the rows it
-- inserted (which affected-rows does not tell apart from skipped ones
-- when the DSN sets clientFoundRows).
SELECT COUNT(*) FROM {outbox} WHERE seq BETWEEN ? AND ?
