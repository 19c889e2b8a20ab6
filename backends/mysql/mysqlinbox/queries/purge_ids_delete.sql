-- Purge, IDs, second statement: ? the IDs purge_ids.sql locked, as a JSON
-- array of hex strings. Each is deleted by the primary key.
DELETE r
FROM JSON_TABLE(?, '$[*]' COLUMNS (h VARCHAR(510) PATH '$')) AS j
STRAIGHT_JOIN {inbox} AS r ON r.id = UNHEX(j.h)
