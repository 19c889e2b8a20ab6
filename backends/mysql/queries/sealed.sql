-- Sealed: whether the outbox is sealed (a plain read: no lock).
SELECT sealed FROM {meta} WHERE one = 1
