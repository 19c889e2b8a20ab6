-- Seal: every append reads the meta row with a shared lock in its
-- transaction and fails when sealed is 1; this update takes the row's
-- exclusive lock, so it waits until every transaction that appended has
-- committed or rolled back, and appends that come after it wait for it
-- and then read sealed = 1.
UPDATE {meta} SET sealed = 1 WHERE one = 1
