-- pgoutbox migration 004, down: drops the member and meta tables and the
-- lease rows 004 created that were never taken (version 0).
DROP TABLE IF EXISTS "outbox_member";
DROP TABLE IF EXISTS "outbox_meta";
DELETE FROM "outbox_lease" WHERE version = 0;
