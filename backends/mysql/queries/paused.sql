-- Paused: the paused topics and partitions in one statement (one
-- snapshot): kind 't' rows and kind 'p' rows, since in microseconds. The
-- caller sorts them (topics by bytes, partitions ascending).
SELECT 't', CAST(topic AS BINARY), 0, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', since)
FROM {pause_topic}
UNION ALL
SELECT 'p', CAST('' AS BINARY), `partition`, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', since)
FROM {pause_part}
