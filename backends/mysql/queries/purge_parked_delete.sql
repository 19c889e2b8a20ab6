-- PurgeParked, second statement: deletes the parked rows with the seqs
-- (? a JSON array of numbers) the first statement locked, as Cancel
-- deletes an entry (the row, nothing else: the attempt history is in it).
DELETE o
FROM JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS j
STRAIGHT_JOIN {outbox} AS o ON o.seq = j.seq
WHERE o.state = 'parked'
