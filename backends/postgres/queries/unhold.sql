-- Unhold: removes the hold row (none: a no-op).
DELETE FROM {hold}
