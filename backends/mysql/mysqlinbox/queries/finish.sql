-- Finish: ? the numbers (as in set_key_seqs.sql), ? the offsets (as in
-- save_offsets.sql); either may be '[]'. The procedure of migration 002
-- runs both upserts.
CALL {finish}(?, ?)
