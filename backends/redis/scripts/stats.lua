-- stats.lua: Stats and PartitionStats for one partition (read-only).
--
-- KEYS[1] pending zset   KEYS[2] parked zset   KEYS[3] lease
-- KEYS[4] entries hash   KEYS[5] key-order zset   KEYS[6] history hash
-- Returns {pending, due, parked, oldest due score in ms or -1, now in ms,
-- lease value "version:owner" or '' when the partition is free (the key
-- expired or was deleted), the lease's PTTL in ms (-2 when there is no
-- lease, -1 when the key has no expiry), garbage, oldest due ID ('' when
-- none is due)}: pending counts every
-- unfinished entry (claimed ones stay in pending), due those whose score
-- has come. Every count and the lease are read at one moment, by the
-- server's TIME.
--
-- Garbage pending members (no value in the entries hash, or a value of
-- another sequence: written by hand; the claim removes them when it meets
-- them) must not pass for the oldest due entry, which would show a lag
-- since 1970. So the oldest due score is that of the first due member,
-- looking at no more than 100 from the front, that names a value of its
-- sequence; garbage is how many of those it passed over, and the caller
-- subtracts it from pending and due. When all 100 are garbage, the oldest
-- due score is that of the 101st due member, unchecked (-1 when there is
-- none), so the call stays bounded.
--
-- An entry set aside while its topic is paused (score PAUSE_BAND plus its
-- due time, see claim.lua) is due by that time: the band is counted with
-- one ZCOUNT, and its first member is a candidate for the oldest.
--
-- An entry the claim held back behind a failing entry of its key and
-- re-scored to that entry's retry time (a marked entry never attempted)
-- is due by its position, its own next attempt time, not by its score: the
-- first 1000 members of the key-order set (which holds only marked
-- entries: failing ones and those held back) are looked at, and those of
-- never-attempted entries whose position has come and whose score has not
-- are counted as due too (and their position as a candidate for the
-- oldest due time), unless they were deferred (their history hash field
-- has the deferred flag: a deferred entry is due at its score).
local now = now_ms()
local oldest, oldestid, garbage = -1, '', 0
local a = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 101)
for i = 1, #a, 2 do
  local m = a[i]
  if i == 201 then
    oldest, oldestid = tonumber(a[i + 1]), string.sub(m, 9)
    break
  end
  local v = redis.call('HGET', KEYS[4], string.sub(m, 9))
  if v and string.sub(v, 2, 9) == string.sub(m, 1, 8) then
    oldest, oldestid = tonumber(a[i + 1]), string.sub(m, 9)
    break
  end
  garbage = garbage + 1
end
local held = 0
for _, km in ipairs(redis.call('ZRANGE', KEYS[5], 0, 999)) do
  local kl = #km >= 4 and u32(km, 1)
  if kl and #km >= kl + 20 then
    local pos = u64(km, 5 + kl)
    local pm = string.sub(km, 13 + kl)
    local sc = pos <= now and redis.call('ZSCORE', KEYS[1], pm)
    if sc and tonumber(sc) > now and tonumber(sc) < PAUSE_BAND then
      local v = redis.call('HGET', KEYS[4], string.sub(pm, 9))
      if v and string.byte(v, 1) == 2 and #v >= 29 and string.sub(v, 2, 9) == string.sub(pm, 1, 8)
          and attempts_of(v) == 0 and history_flags(redis.call('HGET', KEYS[6], string.sub(pm, 9)) or nil) % 2 == 0 then
        held = held + 1
        -- An imported entry has position 0 (ahead of every appended
        -- entry, see import.lua): its created-at stands in for its due
        -- time, which the re-score replaced.
        if pos == 0 and #v >= 17 then pos = math.floor(u64(v, 10) / 1000) end
        if oldest == -1 or pos < oldest then oldest, oldestid = pos, string.sub(pm, 9) end
      end
    end
  end
end
-- Entries set aside while paused (see "Pauses" in claim.lua) are due by
-- their score less PAUSE_BAND.
local band = redis.call('ZCOUNT', KEYS[1], PAUSE_BAND, PAUSE_BAND + now)
if band > 0 then
  local f = redis.call('ZRANGEBYSCORE', KEYS[1], PAUSE_BAND, PAUSE_BAND + now, 'WITHSCORES', 'LIMIT', 0, 1)
  local s = unband(tonumber(f[2]))
  if oldest == -1 or s < oldest then oldest, oldestid = s, string.sub(f[1], 9) end
end
local lease = redis.call('GET', KEYS[3]) or ''
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now) + held + band, redis.call('ZCARD', KEYS[2]), oldest,
  now, lease, redis.call('PTTL', KEYS[3]), garbage, oldestid}
