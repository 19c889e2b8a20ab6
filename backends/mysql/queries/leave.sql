-- Leave: deletes the member record of ? owner (VARBINARY: compared by its
-- bytes, "r1 " is not "r1"), if any.
DELETE FROM {member} WHERE owner = CAST(? AS BINARY)
