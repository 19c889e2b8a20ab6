-- PurgeArchiveBatch, second statement: deletes the archived rows with the
-- IDs (? a JSON array of strings) the first statement locked, by the
-- primary key.
DELETE a
FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARBINARY(255) PATH '$')) AS j
STRAIGHT_JOIN {archive} AS a ON a.id = j.id
