-- Offsets: $1 the consumer group, $2 the topic. Every stored partition's
-- next offset (an index range scan of the primary key).
SELECT part, next FROM "inbox_offsets" WHERE grp = $1 AND topic = $2
