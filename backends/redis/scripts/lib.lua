-- lib.lua: helpers prepended to every script of redisoutbox (not run on its
-- own). Entry format: see encoding.go. Offsets below are 1-based.
--
-- Return conventions shared by all scripts:
--   -1  the lease is not held by ARGV[1] (token "version:owner"): lease lost
--   -2  (acquire only) another owner holds an unexpired lease
--    0  not found (cancel)

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- fenced reports whether lease key k holds exactly token.
local function fenced(k, token)
  return redis.call('GET', k) == token
end

local function u32(v, pos)
  return (struct.unpack('>I4', v, pos))
end

-- parse walks a stored entry. It returns the entry's key (or nil and a
-- reason when the value is malformed). It checks exactly what decodeEntry
-- in encoding.go checks.
local function parse(v)
  local n = #v
  if n < 25 then return nil, 'value is ' .. n .. ' bytes, shorter than the 25-byte header' end
  if string.byte(v, 1) ~= 1 then return nil, 'unknown format version ' .. string.byte(v, 1) end
  local pos = 26 + u32(v, 22)
  local key
  for i = 1, 2 do
    if pos + 3 > n then return nil, 'truncated length at byte ' .. (pos - 1) end
    local l = u32(v, pos)
    if pos + 3 + l > n then return nil, 'field longer than the value at byte ' .. (pos - 1) end
    if i == 1 then key = string.sub(v, pos + 4, pos + 3 + l) end
    pos = pos + 4 + l
  end
  if pos + 11 > n then return nil, 'truncated not-before/header count at byte ' .. (pos - 1) end
  local nh = u32(v, pos + 8)
  pos = pos + 12
  if nh * 8 > n - pos + 1 then return nil, 'header count larger than the value' end
  for i = 1, nh * 2 do
    if pos + 3 > n then return nil, 'truncated header at byte ' .. (pos - 1) end
    local l = u32(v, pos)
    if pos + 3 + l > n then return nil, 'header longer than the value at byte ' .. (pos - 1) end
    pos = pos + 4 + l
  end
  return key
end

-- member is the sorted-set member of entry id: its 8-byte append sequence
-- then the ID, so that equal scores sort by append order.
local function member(v, id)
  return string.sub(v, 2, 9) .. id
end

local function seq_of(m)
  return (struct.unpack('>I8', m, 1))
end

-- entry_key returns the key of a well-formed stored entry ('' if malformed).
local function entry_key(v)
  local k = parse(v)
  return k or ''
end

-- Holds: field = entry key, value = cmsgpack array of the members of the
-- failing (attempted, not sent, not parked) entries of that key.
local function holds_get(h, key)
  local raw = redis.call('HGET', h, key)
  if not raw then return {} end
  return cmsgpack.unpack(raw)
end

local function holds_add(h, key, m)
  local list = holds_get(h, key)
  for _, x in ipairs(list) do
    if x == m then return end
  end
  list[#list + 1] = m
  redis.call('HSET', h, key, cmsgpack.pack(list))
end

local function holds_remove(h, key, m)
  local raw = redis.call('HGET', h, key)
  if not raw then return end
  local list, out = cmsgpack.unpack(raw), {}
  for _, x in ipairs(list) do
    if x ~= m then out[#out + 1] = x end
  end
  if #out == 0 then
    redis.call('HDEL', h, key)
  else
    redis.call('HSET', h, key, cmsgpack.pack(out))
  end
end

-- restore moves every claimed entry back to pending with its original
-- score, in chunks of 512.
local function restore(inflight, pending)
  while true do
    local r = redis.call('ZRANGE', inflight, 0, 511, 'WITHSCORES')
    if #r == 0 then return end
    local args, rem = {}, {}
    for i = 1, #r, 2 do
      args[#args + 1] = r[i + 1]
      args[#args + 1] = r[i]
      rem[#rem + 1] = r[i]
    end
    redis.call('ZADD', pending, unpack(args))
    redis.call('ZREM', inflight, unpack(rem))
  end
end

-- set_failure rewrites the script-managed header: attempts and last error.
local function set_failure(v, attempts, err)
  local old = u32(v, 22)
  return string.sub(v, 1, 17) .. struct.pack('>I4I4', attempts, #err) .. err .. string.sub(v, 26 + old)
end

local function attempts_of(v)
  return u32(v, 18)
end

