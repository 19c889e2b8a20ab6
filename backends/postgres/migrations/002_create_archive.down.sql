-- pgoutbox migration 002, down: drops the archive.
DROP TABLE IF EXISTS "outbox_archive";
