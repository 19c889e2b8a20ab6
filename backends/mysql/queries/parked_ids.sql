-- Which of the IDs (? a JSON array of strings) of partition ? are parked
-- with the reason a fetch gave (? the same array's reasons, matched by
-- position): after park_corrupt.sql changed fewer rows than it was given
-- (an entry cancelled or sent meanwhile), FetchBatch reports only these.
SELECT o.id
FROM JSON_TABLE(?, '$[*]' COLUMNS (
        id     VARBINARY(255) PATH '$[0]',
        reason TEXT CHARACTER SET utf8mb4 PATH '$[1]')) AS f
STRAIGHT_JOIN {outbox} AS o FORCE INDEX ({id_uq}) ON o.id = f.id
WHERE o.`partition` = ? AND o.state = 'parked' AND o.last_error = f.reason
