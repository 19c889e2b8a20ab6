-- Hold: ? reason, ? reason again. Creates the hold row (since = the
-- server's clock) or, when the outbox is held, replaces the reason and
-- keeps since.
INSERT INTO {hold} (one, reason, since) VALUES (1, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE reason = ?
