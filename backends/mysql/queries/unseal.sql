-- Unseal: appends work again.
UPDATE {meta} SET sealed = 0 WHERE one = 1
