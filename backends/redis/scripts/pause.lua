-- pause.lua: the outbox's record of one pause (Pauser; see pause.go).
--
-- KEYS[1] pauses hash (in the prefix's own slot): field -> since ms
-- ARGV[1] field: 't:' .. topic or 'p:' .. partition
-- ARGV[2] 'pause' or 'resume'
-- Pause returns the pause's since in ms: the server's TIME when this call
-- created the field, else the since stored (a paused pause keeps it).
-- Resume deletes the field and returns 0.
hashes(KEYS[1])
if ARGV[2] == 'resume' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
redis.call('HSETNX', KEYS[1], ARGV[1], now_ms())
return tonumber(redis.call('HGET', KEYS[1], ARGV[1])) or 0
