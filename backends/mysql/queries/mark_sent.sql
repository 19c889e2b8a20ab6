-- MarkSent: ? the IDs as a JSON array of strings, ? partition, ? owner,
-- ? version. One multi-table DELETE fenced by the lease: it reads the
-- lease row through the join, and InnoDB reads the rows of a table that a
-- multi-table DELETE or UPDATE only reads with shared locks in every
-- isolation level (a single-table UPDATE or an INSERT ... SELECT would
-- read it without a lock under READ COMMITTED), so a takeover, which
-- updates that row, waits for this statement, and a statement that starts
-- after a takeover sees the new owner/version and deletes nothing
-- (TestFencedWritesLockTheLeaseRow proves both in both isolation levels).
-- The lease row is a const table (primary key = constant): when it does
-- not match, no entry row is read. STRAIGHT_JOIN and FORCE INDEX keep the
-- plan on the IDs: each is looked up in outbox_id_uq (a record lock on the
-- row it deletes). Left to itself, the optimizer scans a small partition
-- through outbox_due_idx instead, and under REPEATABLE READ that scan
-- takes next-key locks on every row of the partition, which deadlocked
-- with concurrent appends inserting into those gaps.
DELETE o
FROM {lease} AS l
STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (id VARBINARY(255) PATH '$')) AS j
STRAIGHT_JOIN {outbox} AS o FORCE INDEX ({id_uq}) ON o.id = j.id AND o.`partition` = l.`partition`
WHERE l.`partition` = ? AND l.owner = ? AND l.version = ? AND l.expires_at > UTC_TIMESTAMP(6)
