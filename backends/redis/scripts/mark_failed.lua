-- mark_failed.lua: MarkFailed (fenced).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] key-order zset   KEYS[5] parked zset   KEYS[6] sequence counter
-- ARGV[1] token "version:owner"
-- ARGV[2..] quadruples: id, park ('1' or '0'), retry delay in ms (an
--           integer, may be negative; ignored when parked), error
-- Returns -1 when the lease is lost (nothing changed), else the number of
-- entries updated. IDs that are not pending (unknown, sent or parked) are
-- ignored, so a sent entry never comes back.
--
-- Each entry's attempts grow by one and its last error is replaced. A
-- parked entry leaves pending for the parked zset (score 0, so it
-- pages by ID with ZRANGEBYLEX) and leaves the key-order set, so it stops
-- holding back its key; a retried one goes back to pending at its retry
-- time and, when it has a key, joins the key-order set (it is marked:
-- attempted), so it holds back the entries after it.
--
-- The retry time is the server's TIME, rounded up to the ms, plus the
-- delay (so a retry is never due early, whatever the caller's clock says);
-- a negative delay puts it in the past; it is clamped at 0. A keyed entry
-- is never re-scored before its position (a retry time earlier than that
-- becomes the position): the claim relies on it (claim.lua). A re-score
-- bumps the sequence counter (see the front hint in claim.lua).
if not fenced(KEYS[1], ARGV[1]) then return -1 end
zsets(KEYS[2], KEYS[4], KEYS[5])
hashes(KEYS[3])
local now = math.ceil(now_us() / 1000)
local n, moved = 0, false
for i = 2, #ARGV, 4 do
  local id, park, delay, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local v = redis.call('HGET', KEYS[3], id)
  if v then
    v = as_v2(v)
    local m = member(v, id)
    if redis.call('ZSCORE', KEYS[2], m) then
      local key = key_of(v)
      redis.call('HSET', KEYS[3], id, set_failure(v, attempts_of(v) + 1, err))
      if park == '1' then
        redis.call('ZREM', KEYS[2], m)
        redis.call('ZADD', KEYS[5], 0, id)
        if key ~= '' then redis.call('ZREM', KEYS[4], order_member(key, v, m)) end
      else
        local at = math.max(0, now + tonumber(delay))
        if key ~= '' then
          -- A keyed entry is marked, and never due before its position, so
          -- the claim scans the unmarked entries before it in its key's
          -- order first (see claim.lua).
          at = math.max(at, u64(v, 18))
          redis.call('ZADD', KEYS[4], 0, order_member(key, v, m))
        end
        -- Front hint invariant (fronthint.go): every script that puts a member
        -- into pending or moves one within it changes the sequence counter.
        -- Here: bump_gen at the end when anything was re-scored.
        redis.call('ZADD', KEYS[2], at, m)
        moved = true
      end
      n = n + 1
    end
  end
end
if moved then bump_gen(KEYS[6]) end
return n
