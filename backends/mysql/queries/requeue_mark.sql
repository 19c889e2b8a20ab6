-- Requeue, second statement: {seqs} the seqs of the rows to requeue (the
-- first statement locked them). Gives each row a placeholder ID that no
-- append can use (it starts with a NUL byte, which outbox.PrepareEntries
-- refuses), so that the copy of the third statement can take the ID.
UPDATE {outbox} SET id = CONCAT(X'00', 'requeue ', seq) WHERE seq IN ({seqs})
