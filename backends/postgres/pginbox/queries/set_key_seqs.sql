-- SetKeySeqs: $1 text[] the keys (distinct, sorted by the caller), $2
-- bigint[] their sequence numbers. Upserts each key's number, stamped
-- with the transaction's time (now()), which Purge compares.
INSERT INTO "inbox_keyseq" AS k (key, seq, updated_at)
SELECT key, seq, now() FROM unnest($1::text[], $2::bigint[]) AS u(key, seq)
ON CONFLICT (key) DO UPDATE SET seq = EXCLUDED.seq, updated_at = EXCLUDED.updated_at
