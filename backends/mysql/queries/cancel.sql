-- Cancel: ? id, ? id again. Deletes the pending or parked entry (every
-- stored row is one or the other). The second condition compares the
-- bytes, so that an ID that differs only by trailing spaces (which the
-- utf8mb4_bin collation pads) is not found.
DELETE FROM {outbox} WHERE id = ? AND CAST(id AS BINARY) = CAST(? AS BINARY)
