-- Unhold: deletes the hold row.
DELETE FROM {hold} WHERE one = 1
