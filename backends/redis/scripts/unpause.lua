-- unpause.lua: ResumeTopic, one chunk of one partition's set-aside
-- entries (see "Pauses" in claim.lua).
--
-- KEYS[1] pending zset   KEYS[2] entries hash   KEYS[3] paused hash
-- KEYS[4] sequence counter
-- ARGV[1] offset: how many set-aside members to pass over (those a call
--         before left, their topic being paused)
-- ARGV[2] count: how many to look at (the work of one call)
-- Returns {moved, left, n}: of the n set-aside members read (ranks from
-- the offset on, at most count; n below count: the end was reached),
-- moved went back to their score before (their score less PAUSE_BAND),
-- and left stay, as their topic is still paused (by KEYS[3]). A member
-- without a value, or whose value does not parse, is moved back too (the
-- claim repairs or parks it). Moving a member bumps the sequence counter
-- (the front hint, see claim.lua).
zsets(KEYS[1])
hashes(KEYS[2], KEYS[3])
local off, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local r = redis.call('ZRANGEBYSCORE', KEYS[1], PAUSE_BAND, '+inf', 'WITHSCORES', 'LIMIT', off, count)
if #r == 0 then return {0, 0, 0} end
local paused = {}
local pz = redis.call('HGETALL', KEYS[3])
for i = 1, #pz, 2 do paused[pz[i]] = true end
local back, left = {}, 0
for i = 1, #r, 2 do
  local m = r[i]
  local v = redis.call('HGET', KEYS[2], string.sub(m, 9))
  local topic = v and parse(v).topic
  if topic and paused[topic] then
    left = left + 1
  else
    back[#back + 1] = unband(tonumber(r[i + 1]))
    back[#back + 1] = m
  end
end
if #back > 0 then
  -- Front hint invariant (fronthint.go): every script that puts a member
  -- into pending or moves one within it changes the sequence counter.
  -- Here: bump_gen before the ZADD.
  bump_gen(KEYS[4])
  redis.call('ZADD', KEYS[1], unpack(back))
end
return {#back / 2, left, #r / 2}
