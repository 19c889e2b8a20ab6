-- pgoutbox migration 001, down: drops the outbox and its leases.
DROP TABLE IF EXISTS "outbox_lease";
DROP TABLE IF EXISTS "outbox";
