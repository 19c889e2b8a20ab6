-- cancel.lua: Cancel (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- KEYS[4] key-order zset   KEYS[5] sequence counter   KEYS[6] history hash
-- KEYS[7] parked-at zset
-- ARGV[1] entry ID
-- Returns 1 when the entry was pending (claimed or not) or parked and is now
-- deleted, 0 when this partition has no such entry (not found).
--
-- The entry's history (its field of KEYS[6]) is deleted with it. The
-- entry leaves its key's order. If it was pending at a future score
-- (a failing entry waiting for its retry), the claim script may have
-- re-scored later entries of its key to that score; those that were never
-- attempted are made due at once (at their position if that is later), at
-- most 1000 per call. Any rest, and attempted ones, stay due at that score:
-- late, never early or out of order. Such a re-score bumps the sequence
-- counter (see the front hint in claim.lua).
hashes(KEYS[1], KEYS[6])
zsets(KEYS[2], KEYS[3], KEYS[4], KEYS[7])
return cancel_entry(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[1])
