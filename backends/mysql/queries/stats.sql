-- Stats: one read of the due index (partition, state, next_at, seq),
-- which holds every column it needs. Every row counts, also one whose
-- partition is out of range (never fetched). UTC_TIMESTAMP(6) is read once
-- per statement.
SELECT COALESCE(SUM(state = 'pending'), 0),
       COALESCE(SUM(state = 'pending' AND next_at <= UTC_TIMESTAMP(6)), 0),
       COALESCE(SUM(state = 'parked'), 0),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00',
                     MIN(CASE WHEN state = 'pending' AND next_at <= UTC_TIMESTAMP(6) THEN next_at END))
FROM {outbox}
