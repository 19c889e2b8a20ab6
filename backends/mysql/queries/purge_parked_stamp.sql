-- PurgeParked, for rows the first statement found without a park time:
-- gives them the server's time (? a JSON array of their seqs, locked).
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS j
STRAIGHT_JOIN {outbox} AS o ON o.seq = j.seq
SET o.parked_at = UTC_TIMESTAMP(6)
WHERE o.state = 'parked' AND o.parked_at IS NULL
