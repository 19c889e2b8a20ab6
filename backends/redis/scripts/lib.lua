-- lib.lua: helpers prepended to every script of redisoutbox (not run on its
-- own). Entry format: see encoding.go. Offsets below are 1-based.
--
-- Format 2 (written now): 1 version | 2-9 sequence | 10-17 created-at µs
-- | 18-25 position ms | 26-29 attempts | 30-33 error length n | 34.. error
-- | key length, key | topic length, topic | not-before ns | headers | payload.
-- Format 1 (earlier builds) has no position: attempts at 18, error length
-- at 22, error at 26. Scripts that read a header call as_v2 first.
--
-- Return conventions shared by all scripts:
--   -1  the lease is not held by ARGV[1] (token "version:owner"): lease lost
--   -2  (acquire only) another owner holds an unexpired lease
--    0  not found (cancel)
--
-- Key order: a sorted set per partition, every score 0, one member per
-- "marked" pending entry with a non-empty key (attempted, or re-scored
-- away from its position; see claim.lua):
--   4-byte key length | key | 8-byte position | 8-byte sequence | ID
-- ZRANGEBYLEX over the prefix (length | key) lists a key's marked entries
-- by (position, sequence); the last 8 + #ID bytes are the entry's pending
-- member (sequence | ID). The set never holds parked or sent entries.

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

local function u64(v, pos)
  return (struct.unpack('>I8', v, pos))
end

-- parse walks a stored entry of format 1 or 2. It returns the entry's key
-- and the offset of its not-before field (or nil and a reason when the
-- value is malformed). It checks exactly what decodeEntry in encoding.go
-- checks.
local function parse(v)
  local n = #v
  if n == 0 then return nil, 'empty value' end
  local ver, hl = string.byte(v, 1), 33
  if ver == 1 then
    hl = 25
  elseif ver ~= 2 then
    return nil, 'unknown format version ' .. ver
  end
  if n < hl then return nil, 'value is ' .. n .. ' bytes, shorter than the ' .. hl .. '-byte header' end
  local pos = hl + 1 + u32(v, hl - 3)
  local key
  for i = 1, 2 do
    if pos + 3 > n then return nil, 'truncated length at byte ' .. (pos - 1) end
    local l = u32(v, pos)
    if pos + 3 + l > n then return nil, 'field longer than the value at byte ' .. (pos - 1) end
    if i == 1 then key = string.sub(v, pos + 4, pos + 3 + l) end
    pos = pos + 4 + l
  end
  if pos + 11 > n then return nil, 'truncated not-before/header count at byte ' .. (pos - 1) end
  local nbat = pos
  local nh = u32(v, pos + 8)
  pos = pos + 12
  if nh * 8 > n - pos + 1 then return nil, 'header count larger than the value' end
  for i = 1, nh * 2 do
    if pos + 3 > n then return nil, 'truncated header at byte ' .. (pos - 1) end
    local l = u32(v, pos)
    if pos + 3 + l > n then return nil, 'header longer than the value at byte ' .. (pos - 1) end
    pos = pos + 4 + l
  end
  return key, nil, nbat
end

-- as_v2 returns v in format 2 and whether it converted it. A format 1
-- entry gets the position it would have had: its not-before in ms
-- (rounded up), else its append time. A malformed value is returned as it
-- is (the claim script parks it).
local function as_v2(v)
  if string.byte(v, 1) ~= 1 then return v, false end
  local key, _, nbat = parse(v)
  if not key then return v, false end
  local nb, p = struct.unpack('>i8', v, nbat), 0
  if nb ~= 0 then
    p = math.ceil(nb / 1000000)
  else
    p = math.floor(u64(v, 10) / 1000)
  end
  if p < 0 then p = 0 end
  return '\2' .. string.sub(v, 2, 17) .. struct.pack('>I8', p) .. string.sub(v, 18), true
end

-- member is the pending/inflight member of entry id (format 1 or 2): its
-- 8-byte append sequence then the ID, so equal scores sort by append order.
local function member(v, id)
  return string.sub(v, 2, 9) .. id
end

local function seq_of(m)
  return (struct.unpack('>I8', m, 1))
end

-- key_of returns the key of a format 2 entry without walking the rest of
-- it ('' when the value is too short to hold one; only the claim script
-- meets malformed values, and it parses them fully).
local function key_of(v)
  if #v < 37 then return '' end
  local at = 34 + u32(v, 30)
  if #v < at + 3 then return '' end
  local l = u32(v, at)
  return string.sub(v, at + 4, at + 3 + l)
end

-- key_prefix is the key-order prefix of key: 4-byte length, then the key.
local function key_prefix(key)
  return struct.pack('>I4', #key) .. key
end

-- HIGH closes a key's ZRANGEBYLEX range: '[' .. key_prefix(key) .. HIGH is
-- above every member of the key (a position is never 2^64-1 ms).
local HIGH = string.rep('\255', 8)

-- order_member is the key-order member of a format 2 entry with pending
-- member m: key prefix, position, then m.
local function order_member(key, v, m)
  return key_prefix(key) .. string.sub(v, 18, 25) .. m
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

-- set_failure rewrites the script-managed header of a format 2 entry:
-- attempts and last error.
local function set_failure(v, attempts, err)
  local old = u32(v, 30)
  return string.sub(v, 1, 25) .. struct.pack('>I4I4', attempts, #err) .. err .. string.sub(v, 34 + old)
end

-- attempts_of reads the attempts of a format 2 entry.
local function attempts_of(v)
  return u32(v, 26)
end
