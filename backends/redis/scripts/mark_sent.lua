-- mark_sent.lua: MarkSent (fenced).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] key-order zset   KEYS[5] parked zset   KEYS[6] sequence counter
-- KEYS[7] history hash
-- ARGV[1] token "version:owner"   ARGV[2] k, or 'front' (below)
-- ARGV[3 .. 2+k] the pending members the claim returned k entries under,
-- ARGV[3+k .. 2+2k] those entries' IDs, in the same order (pairs: the
-- i-th member and the i-th ID)
-- ARGV[3+2k ..] entry IDs without a member
-- Returns -1 when the lease is lost (nothing changed), else the number of
-- entries removed. Unknown, already sent and parked IDs are ignored.
--
-- A sent entry leaves the key-order set (if it was there), so it no
-- longer holds back the entries after it, and its history (its field of
-- KEYS[7]) is deleted. While the history hash does not exist (nothing
-- attempted or deferred is stored), that costs one EXISTS per call.
--
-- Pairs, while the key-order set is empty (nothing failing or held back):
-- one ZREM of the members; when it removed every one of them, each entry
-- was pending under its member, and one HDEL removes the values. When it
-- removed fewer (an entry cancelled meanwhile, parked, sent by an earlier
-- call, or appended again under a new sequence), a value is removed only
-- when it has the member's sequence and is not parked: its member was the
-- one just removed. Everything else (IDs alone, and pairs while the
-- key-order set has members) reads the values: HMGET, then ZMSCORE of
-- their members (an entry is removed only when its member is pending), one
-- ZREM, one HDEL and one ZREM of the key-order members. Chunks of 256
-- entries.
--
-- Front (ARGV[2] 'front'): ARGV[3] a generation, ARGV[4] and ARGV[5] the
-- first and last pending member of a batch a claim returned with that
-- generation, ARGV[6..] the IDs of that whole batch. When the front hint
-- holds (see claim.lua: the counter still holds the generation, the first
-- member has rank 0 and the last rank n - 1, n the number of IDs), the
-- batch is exactly the first n members of pending: one ZREMRANGEBYRANK
-- removes them and one HDEL their values (while the key-order set has
-- members, their values are read first, to remove the key-order members
-- of the keyed ones). Returns n; -4 when the hint does not hold (nothing
-- changed: the caller sends the members).
if not fenced(KEYS[1], ARGV[1]) then return -1 end
zsets(KEYS[2], KEYS[4], KEYS[5])
hashes(KEYS[3], KEYS[7])
local marked = redis.call('EXISTS', KEYS[4]) == 1
local hist = redis.call('EXISTS', KEYS[7]) == 1
if ARGV[2] == 'front' then
  local n = #ARGV - 5
  local gen = redis.call('GET', KEYS[6])
  if n < 1 or gen ~= ARGV[3] or redis.call('ZRANK', KEYS[2], ARGV[4]) ~= 0
      or redis.call('ZRANK', KEYS[2], ARGV[5]) ~= n - 1 then
    return -4
  end
  if marked then
    for lo = 6, #ARGV, 256 do
      local hi = math.min(lo + 255, #ARGV)
      local vals = redis.call('HMGET', KEYS[3], unpack(ARGV, lo, hi))
      local rk = {}
      for i = 1, #vals do
        local v = vals[i]
        if v then
          v = as_v2(v)
          local key = key_of(v)
          if key ~= '' then rk[#rk + 1] = order_member(key, v, member(v, ARGV[lo + i - 1])) end
        end
      end
      if #rk > 0 then redis.call('ZREM', KEYS[4], unpack(rk)) end
    end
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - 1)
  for lo = 6, #ARGV, 4096 do
    redis.call('HDEL', KEYS[3], unpack(ARGV, lo, math.min(lo + 4095, #ARGV)))
    if hist then redis.call('HDEL', KEYS[7], unpack(ARGV, lo, math.min(lo + 4095, #ARGV))) end
  end
  return n
end
local k = tonumber(ARGV[2])
local n = 0
-- plain: the IDs removed by reading their values.
local plain = {}

for lo = 3, 2 + k, 512 do
  local hi = math.min(lo + 511, 2 + k)
  if marked then
    for i = lo + k, hi + k do plain[#plain + 1] = ARGV[i] end
  else
    -- The members and IDs are passed to the server straight from ARGV:
    -- this path builds nothing per entry.
    local c = redis.call('ZREM', KEYS[2], unpack(ARGV, lo, hi))
    if c == hi - lo + 1 then
      redis.call('HDEL', KEYS[3], unpack(ARGV, lo + k, hi + k))
      if hist then redis.call('HDEL', KEYS[7], unpack(ARGV, lo + k, hi + k)) end
    elseif c > 0 then
      local vals = redis.call('HMGET', KEYS[3], unpack(ARGV, lo + k, hi + k))
      local del = {}
      for i = 1, #vals do
        local v, m, id = vals[i], ARGV[lo + i - 1], ARGV[lo + k + i - 1]
        if v and string.sub(v, 2, 9) == string.sub(m, 1, 8) and not redis.call('ZSCORE', KEYS[5], id) then
          del[#del + 1] = id
        end
      end
      if #del > 0 then
        redis.call('HDEL', KEYS[3], unpack(del))
        if hist then redis.call('HDEL', KEYS[7], unpack(del)) end
      end
    end
    n = n + c
  end
end
for i = 3 + 2 * k, #ARGV do plain[#plain + 1] = ARGV[i] end

local seen = {}
for lo = 1, #plain, 256 do
  local hi = math.min(lo + 255, #plain)
  local vals = redis.call('HMGET', KEYS[3], unpack(plain, lo, hi))
  local ids, ms, vs = {}, {}, {}
  for i = 1, #vals do
    local id, v = plain[lo + i - 1], vals[i]
    if v and not seen[id] then
      seen[id] = true
      v = as_v2(v)
      ids[#ids + 1], ms[#ms + 1], vs[#vs + 1] = id, member(v, id), v
    end
  end
  if #ms > 0 then
    local scores = redis.call('ZMSCORE', KEYS[2], unpack(ms))
    local rid, rm, rk = {}, {}, {}
    for i = 1, #ms do
      if scores[i] then
        rid[#rid + 1], rm[#rm + 1] = ids[i], ms[i]
        if marked then
          local key = key_of(vs[i])
          if key ~= '' then rk[#rk + 1] = order_member(key, vs[i], ms[i]) end
        end
      end
    end
    if #rm > 0 then
      redis.call('ZREM', KEYS[2], unpack(rm))
      redis.call('HDEL', KEYS[3], unpack(rid))
      if hist then redis.call('HDEL', KEYS[7], unpack(rid)) end
      if #rk > 0 then redis.call('ZREM', KEYS[4], unpack(rk)) end
      n = n + #rm
    end
  end
end
return n
