-- mysqloutbox migration 002, down: drops the park time (Migrate takes
-- the server's "can't drop" error (1091) of a column already dropped as
-- done).
ALTER TABLE `outbox` DROP COLUMN parked_at;
