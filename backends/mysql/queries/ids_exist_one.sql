-- AppendInTx with Options.KeySequence: whether the entry's ID is in the
-- outbox already (a consistent read: it takes no lock). ? id.
SELECT id FROM {outbox} WHERE id = ?
