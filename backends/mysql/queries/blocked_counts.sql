-- PartitionStats, second statement: the number of blocked keys (the heads
-- of blocked_heads.sql) of each partition that has any.
WITH {blocked_heads}
SELECT `partition`, COUNT(*) FROM bk_heads GROUP BY `partition`
