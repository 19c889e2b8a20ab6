-- Record, second statement (only when the insert inserted some IDs but
-- not all): ? the IDs as in record.sql, ? the call's token. Which of the
-- IDs this call inserted: its own rows, which its transaction always
-- sees, whatever the isolation level and snapshot.
-- FORCE INDEX: one primary-key lookup per ID, whatever the table's size.
SELECT r.id
FROM JSON_TABLE(?, '$[*]' COLUMNS (h VARCHAR(510) PATH '$')) AS j
STRAIGHT_JOIN {inbox} AS r FORCE INDEX (PRIMARY) ON r.id = UNHEX(j.h)
WHERE r.tok = ?
