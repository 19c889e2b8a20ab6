-- Paused: the paused topics (byte order) and partitions (ascending), in
-- one statement (one snapshot): kind 't' rows, then kind 'p' rows.
SELECT 't' AS kind, topic COLLATE "C" AS topic, 0 AS partition, since FROM {pause_topic}
UNION ALL
SELECT 'p', '', partition, since FROM {pause_part}
ORDER BY kind DESC, topic, partition
