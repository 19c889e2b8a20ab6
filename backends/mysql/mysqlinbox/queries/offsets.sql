-- Offsets: ? group, ? topic (bytes). The stored partitions of the topic
-- for the group, by the primary key's prefix.
SELECT part, `next` FROM {offsets} WHERE grp = ? AND topic = ?
