-- Requeue, last statement: {seqs} the old seqs; deletes the old rows.
DELETE FROM {outbox} WHERE seq IN ({seqs})
