-- lookup.lua: Lookup in one partition (read-only).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- KEYS[4] history hash
-- ARGV[1] entry ID
-- Returns 0 when this partition has no entry with the ID (not found), else
-- {value, state, score, history}: state 1 when the entry is pending (score: its
-- next attempt time in ms, as a string; PAUSE_BAND taken off for an entry
-- set aside while paused), 2 when it is parked (score '0'),
-- 0 when the value is in the hash but in neither set (score '0'), which
-- no script leaves behind: Lookup reports it as an error. history is the
-- entry's field of the history hash ('' when it has none).
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local h = redis.call('HGET', KEYS[4], ARGV[1]) or ''
local s = redis.call('ZSCORE', KEYS[2], member(v, ARGV[1]))
if s then return {v, 1, string.format('%.0f', unband(tonumber(s))), h} end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return {v, 2, '0', h} end
return {v, 0, '0', h}
