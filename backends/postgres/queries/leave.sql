-- Leave: $1 owner. Deletes the relay's member record, if any.
DELETE FROM {member} WHERE owner = $1
