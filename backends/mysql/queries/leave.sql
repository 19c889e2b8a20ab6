-- Leave: deletes the member record of ? owner (compared as bytes: the
-- column's collation pads spaces), if any.
DELETE FROM {member} WHERE owner = ? AND CAST(owner AS BINARY) = CAST(? AS BINARY)
