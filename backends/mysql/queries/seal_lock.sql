-- AppendInTx's seal check on its own: the first step with
-- Options.KeySequence, and otherwise after an INSERT that added no row (its
-- join to the meta row WHERE sealed = 0 took the same shared lock; a call
-- whose every ID exists inserts nothing either, and this read tells the
-- two apart). The lock is one the caller's transaction keeps until it ends. A locking read reads the
-- newest committed row in every isolation level, so an append after Seal
-- committed sees sealed = 1; and Seal (UPDATE ... SET sealed = 1) waits
-- for every transaction that appended, while appends that come after it
-- queue behind it. Nothing but Seal and Unseal writes this row.
SELECT sealed FROM {meta} WHERE one = 1 LOCK IN SHARE MODE
