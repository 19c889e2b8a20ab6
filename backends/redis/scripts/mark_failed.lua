-- mark_failed.lua: MarkFailed (fenced).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] key-order zset   KEYS[5] parked zset   KEYS[6] sequence counter
-- KEYS[7] history hash   KEYS[8] parked-at zset
-- ARGV[1] token "version:owner"
-- ARGV[2..] quadruples: id, mode ('1' park, '0' retry, 'd' deferred),
--           retry delay in ms (an integer, may be negative; ignored when
--           parked), error (ignored when deferred)
-- Returns -1 when the lease is lost (nothing changed), else the number of
-- entries updated. IDs that are not pending (unknown, sent or parked) are
-- ignored, so a sent entry never comes back.
--
-- A park or a retry is an attempt: the entry's attempts grow by one, its
-- last error is replaced and an attempt (the server's time in ms, the
-- error, the lease's owner) is appended to its history (the field of its
-- ID in KEYS[7], see "History" in lib.lua), which keeps the last
-- MAX_HISTORY. A parked entry leaves pending for the parked zset (score 0,
-- so it pages by ID with ZRANGEBYLEX; its park time, the server's time
-- in ms, goes to KEYS[8]), leaves the key-order set, so it
-- stops holding back its key; a retried one goes back to pending at its retry time and, when it has a key, joins
-- the key-order set (it is marked: attempted), so it holds back the
-- entries after it. Either way the entry loses its deferred flag.
--
-- A deferral (the relay's breaker was open: Failure.Deferred) is not an
-- attempt: the stored value (attempts, last error) and the attempts of
-- the history stay as they are; the entry is re-scored as a retry is,
-- joins the key-order set when it has a key (marked, so the claim holds
-- back the later entries of its key behind it: see claim.lua, blocker)
-- and its history gets the deferred flag, which stays until the entry is
-- attempted (a park or a retry), sent, cancelled or requeued.
--
-- The retry time is the server's TIME plus the delay: for a positive
-- delay, TIME rounded up to the ms (so a retry is never due early,
-- whatever the caller's clock says); for a delay of 0 or less, TIME
-- rounded down (the claim compares scores with TIME rounded down, so a
-- retry without delay is due at once, not a millisecond later); it is
-- clamped at 0. A keyed entry
-- is never re-scored before its position (a retry time earlier than that
-- becomes the position): the claim relies on it (claim.lua). A re-score
-- bumps the sequence counter (see the front hint in claim.lua).
if not fenced(KEYS[1], ARGV[1]) then return -1 end
zsets(KEYS[2], KEYS[4], KEYS[5])
hashes(KEYS[3], KEYS[7])
local nowu = now_us()
local now, floor = math.ceil(nowu / 1000), math.floor(nowu / 1000)
local owner = owner_of(ARGV[1])
local n, moved = 0, false
for i = 2, #ARGV, 4 do
  local id, mode, delay, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local v = redis.call('HGET', KEYS[3], id)
  if v then
    v = as_v2(v)
    local m = member(v, id)
    if redis.call('ZSCORE', KEYS[2], m) then
      local key = key_of(v)
      local h = redis.call('HGET', KEYS[7], id) or nil
      if mode ~= 'd' then
        redis.call('HSET', KEYS[3], id, set_failure(v, attempts_of(v) + 1, err))
        local recs = history_records(h)
        recs[#recs + 1] = attempt_record(floor, owner, err)
        -- An attempt ends a deferral: the entry now holds back its key
        -- by its attempts (or leaves the key-order set when parked).
        history_write(KEYS[7], id, history_value(0, recs))
      elseif history_flags(h) == 0 then
        history_write(KEYS[7], id, history_value(1, history_records(h)))
      end
      if mode == '1' then
        redis.call('ZREM', KEYS[2], m)
        redis.call('ZADD', KEYS[5], 0, id)
        redis.call('ZADD', KEYS[8], floor, id)
        if key ~= '' then redis.call('ZREM', KEYS[4], order_member(key, v, m)) end
      else
        local d = tonumber(delay)
        local at = math.max(0, now + d)
        if d <= 0 then at = math.max(0, floor + d) end
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
