-- Cancel: ? id. Deletes the pending or parked entry (every stored row is
-- one or the other), by the unique index on id (VARBINARY: compared byte
-- for byte).
DELETE FROM {outbox} WHERE id = ?
