-- Cancel: deletes a pending or parked entry. $1 id.
DELETE FROM {outbox} WHERE id = $1 AND state IN ('pending', 'parked')
