-- SaveOffsets: $1 text[] groups, $2 text[] topics, $3 integer[]
-- partitions, $4 bigint[] next offsets; one element per partition
-- (distinct, sorted by the caller, so concurrent savers lock rows in one
-- order). Upserts each partition's next offset.
INSERT INTO "inbox_offsets" (grp, topic, part, next)
SELECT grp, topic, part, next FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[]) AS u(grp, topic, part, next)
ON CONFLICT (grp, topic, part) DO UPDATE SET next = EXCLUDED.next
