-- Heartbeat, when it read expired records: deletes the record of ? owner
-- if it is still expired (a renewal since keeps it).
DELETE FROM {member} WHERE owner = ? AND expires_at <= UTC_TIMESTAMP(6)
