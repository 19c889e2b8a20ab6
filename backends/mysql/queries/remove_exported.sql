-- RemoveExported, second statement: ? partition, {ids} the IDs. Deletes
-- them whatever their state, and never archives them: the entries were
-- moved, not sent.
DELETE FROM {outbox} WHERE `partition` = ? AND id IN ({ids})
