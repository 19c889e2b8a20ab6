-- cancel.lua: Cancel (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- KEYS[4] key-order zset   KEYS[5] sequence counter   KEYS[6] history hash
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
zsets(KEYS[2], KEYS[3], KEYS[4])
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then return 0 end
v = as_v2(v)
local m = member(v, id)
local score = redis.call('ZSCORE', KEYS[2], m)
local n = redis.call('ZREM', KEYS[2], m) + redis.call('ZREM', KEYS[3], id)
redis.call('HDEL', KEYS[1], id)
redis.call('HDEL', KEYS[6], id)
local key = key_of(v)
if key ~= '' then
  local om = order_member(key, v, m)
  redis.call('ZREM', KEYS[4], om)
  local now = now_ms()
  if score and tonumber(score) > now then
    local pfx = key_prefix(key)
    local r = redis.call('ZRANGEBYLEX', KEYS[4], '(' .. om, '[' .. pfx .. HIGH, 'LIMIT', 0, 1000)
    local moved = false
    for _, f in ipairs(r) do
      local fm = string.sub(f, #pfx + 9)
      if redis.call('ZSCORE', KEYS[2], fm) == score then
        local fv = redis.call('HGET', KEYS[1], string.sub(fm, 9))
        if fv and string.byte(fv, 1) == 2 and #fv >= 33 and attempts_of(fv) == 0 then
          -- Front hint invariant (fronthint.go): every script that puts a member
          -- into pending or moves one within it changes the sequence counter.
          -- Here: bump_gen below when anything was moved.
          redis.call('ZADD', KEYS[2], math.max(now, u64(f, #pfx + 1)), fm)
          moved = true
        end
      end
    end
    if moved then bump_gen(KEYS[5]) end
  end
end
if n == 0 then return 0 end
return 1
