-- AppendInTx, first step: the seal, read with a shared lock that the
-- caller's transaction keeps until it ends. A locking read reads the
-- newest committed row in every isolation level, so an append after Seal
-- committed sees sealed = 1; and Seal (UPDATE ... SET sealed = 1) waits
-- for every transaction that appended, while appends that come after it
-- queue behind it. Nothing but Seal and Unseal writes this row.
SELECT sealed FROM {meta} WHERE one = 1 LOCK IN SHARE MODE
