-- cancel.lua: Cancel (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] inflight zset
-- KEYS[4] parked zset   KEYS[5] holds hash
-- ARGV[1] entry ID
-- Returns 1 when the entry was pending, claimed or parked and is now
-- deleted, 0 when this partition has no such entry (not found).
--
-- Cancelling a failing entry that is due later frees its key: entries of
-- that key that claim.lua re-scored to its retry score are made due now
-- (at most 1000 per call, lowest sequence first; any rest stay due at that
-- score, which keeps their order).
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then return 0 end
local m = member(v, id)
local score = redis.call('ZSCORE', KEYS[2], m)
local n = redis.call('ZREM', KEYS[2], m) + redis.call('ZREM', KEYS[3], m) + redis.call('ZREM', KEYS[4], id)
redis.call('HDEL', KEYS[1], id)
local key = entry_key(v)
if key ~= '' and attempts_of(v) > 0 then
  holds_remove(KEYS[5], key, m)
  local now = now_ms()
  if score and tonumber(score) > now then
    local r = redis.call('ZRANGEBYSCORE', KEYS[2], score, score, 'LIMIT', 0, 1000)
    for _, f in ipairs(r) do
      local fv = redis.call('HGET', KEYS[1], string.sub(f, 9))
      if fv and seq_of(f) > seq_of(m) and entry_key(fv) == key then
        redis.call('ZADD', KEYS[2], now, f)
      end
    end
  end
end
if n == 0 then return 0 end
return 1
