-- RecordWithKeySeqs: ? the call's token, ? the IDs (as in record.sql), ?
-- the keys (as in key_seqs_lock.sql). The procedure of migration 002
-- returns two result sets: the IDs this call inserted, and the keys' rows
-- (hash, seq), locked.
CALL {record_keys}(?, ?, ?)
