-- SaveOffsets: ? the offsets as a JSON array of [group, topic, partition,
-- next] (group and topic in hex, the numbers as decimal strings), sorted
-- by (group, topic, partition), each partition once. Overwrites the
-- stored next offsets.
INSERT INTO {offsets} (grp, topic, part, `next`)
SELECT UNHEX(j.g), UNHEX(j.t), j.p, j.x
FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, g VARCHAR(510) PATH '$[0]', t VARCHAR(510) PATH '$[1]', p INT PATH '$[2]', x BIGINT PATH '$[3]')) AS j
ORDER BY j.n
ON DUPLICATE KEY UPDATE `next` = VALUES(`next`)
