-- Purge, IDs, second statement: ? the IDs purge_ids.sql locked, as a JSON
-- array of hex strings. Each is deleted by the primary key.
-- FORCE INDEX: one primary-key lookup per ID (a scan would lock rows
-- other transactions write).
DELETE r
FROM JSON_TABLE(?, '$[*]' COLUMNS (h VARCHAR(510) PATH '$')) AS j
STRAIGHT_JOIN {inbox} AS r FORCE INDEX (PRIMARY) ON r.id = UNHEX(j.h)
