-- lib.lua: helpers prepended to every script of redisoutbox (not run on its
-- own). Entry format: see encoding.go. Offsets below are 1-based.
--
-- Format 2 (written now): 1 version | 2-9 sequence | 10-17 created-at µs
-- | 18-25 position ms | 26-29 attempts | 30-33 error length n | 34.. error
-- | key length, key | topic length, topic | not-before ns | headers | payload.
-- Format 1 (earlier builds) has no position: attempts at 18, error length
-- at 22, error at 26. Scripts that read a header call as_v2 first.
-- Format 3 is a quarantined value: laid out as format 2, written only by
-- the claim when it parks a value it cannot use (see quarantine).
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

-- zsets and hashes fail (WRONGTYPE) when a key is not a sorted set, or
-- not a hash: ZCARD and HLEN are O(1) reads that fail on a key of another
-- type (a missing key reads as empty). A script that writes calls them
-- first, so a wrong-typed key fails it before its first write (Redis does
-- not undo the writes of a script that fails), and the Go side names the
-- key.
local function zsets(...)
  for _, k in ipairs({...}) do redis.call('ZCARD', k) end
end

local function hashes(...)
  for _, k in ipairs({...}) do redis.call('HLEN', k) end
end

-- counter fails, as INCRBY would, when key k holds a string that is not an
-- integer (WRONGTYPE when it is not a string).
local function counter(k)
  local v = redis.call('GET', k)
  if v and not string.match(v, '^-?%d+$') then
    return redis.error_reply('ERR value is not an integer or out of range')
  end
end

local function u32(v, pos)
  return (struct.unpack('>I4', v, pos))
end

local function u64(v, pos)
  return (struct.unpack('>I8', v, pos))
end

-- parse walks a stored entry of format 1, 2 or 3 (3 is a quarantined
-- value: format 2 with the raw value that did not decode as its payload;
-- see quarantine). It checks exactly what decodeEntry in encoding.go
-- checks and returns a table: why (nil when the value is well formed, else
-- the reason, worded as decodeEntry words it: the field and the byte),
-- key and topic (nil when they could not be read; read as far as the
-- value allows, also when why is set), att and created (1-based offsets of
-- the attempts and created-at fields, nil when the value is too short) and
-- nbat (the offset of the not-before field, set only when why is nil).
-- (parse runs once per entry the claim reads, so it creates no closure
-- and builds no string unless the value is malformed.)
local function truncated(p, what, off, n)
  p.why = 'truncated ' .. what .. ' at byte ' .. off .. ' of ' .. n
  return p
end

local function too_long(p, what, off, n)
  p.why = what .. ' longer than the value at byte ' .. off .. ' of ' .. n
  return p
end

local function parse(v)
  local n, p = #v, {}
  if n == 0 then p.why = 'empty value' return p end
  local ver = string.byte(v, 1)
  if ver ~= 1 and ver ~= 2 and ver ~= 3 then
    p.why = 'unknown format version ' .. ver .. ' (this build reads versions 1, 2 and 3; upgrade the relay)'
    return p
  end
  -- off is the 0-based offset of the next field, as in decodeEntry.
  if n - 1 < 8 then return truncated(p, 'sequence', 1, n) end
  if n - 9 < 8 then return truncated(p, 'created-at', 9, n) end
  p.created = 10
  local off = 17
  if ver ~= 1 then
    if n - off < 8 then return truncated(p, 'position', off, n) end
    off = off + 8
  end
  if n - off < 4 then return truncated(p, 'attempts', off, n) end
  p.att = off + 1
  off = off + 4
  if n - off < 4 then return truncated(p, 'last error length', off, n) end
  local l = u32(v, off + 1)
  off = off + 4
  if n - off < l then return too_long(p, 'last error', off, n) end
  off = off + l
  if n - off < 4 then return truncated(p, 'key length', off, n) end
  l = u32(v, off + 1)
  off = off + 4
  if n - off < l then return too_long(p, 'key', off, n) end
  p.key = string.sub(v, off + 1, off + l)
  off = off + l
  if n - off < 4 then return truncated(p, 'topic length', off, n) end
  l = u32(v, off + 1)
  off = off + 4
  if n - off < l then return too_long(p, 'topic', off, n) end
  p.topic = string.sub(v, off + 1, off + l)
  off = off + l
  if n - off < 8 then return truncated(p, 'not-before', off, n) end
  local nbat = off + 1
  off = off + 8
  if n - off < 4 then return truncated(p, 'header count', off, n) end
  local nh = u32(v, off + 1)
  off = off + 4
  if nh > 0 and nh * 8 > n - off then
    p.why = 'header count larger than the value at byte ' .. off .. ' of ' .. n
    return p
  end
  for _ = 1, nh do
    if n - off < 4 then return truncated(p, 'header name length', off, n) end
    l = u32(v, off + 1)
    off = off + 4
    if n - off < l then return too_long(p, 'header name', off, n) end
    off = off + l
    if n - off < 4 then return truncated(p, 'header value length', off, n) end
    l = u32(v, off + 1)
    off = off + 4
    if n - off < l then return too_long(p, 'header value', off, n) end
    off = off + l
  end
  p.nbat = nbat
  return p
end

-- last_error_of returns the last error of a format 2 or 3 value ('' when
-- the value is too short to hold one).
local function last_error_of(v)
  if #v < 33 then return '' end
  return string.sub(v, 34, 33 + u32(v, 30))
end

-- quarantine rewrites a value that does not decode (parse result p) as a
-- format 3 value: the header of format 2 with sequence seq8 (the entry's
-- pending member's), its created-at and attempts where they could be read
-- (attempts grow by one), position now, last error reason, the key and
-- topic that could be read ('' otherwise), no not-before, no headers, and
-- the raw value v as payload. decodeEntry reads it like format 2; the
-- claim never hands it out and Requeue refuses it.
local function quarantine(v, p, seq8, reason, nowu, now)
  local attempts, created = 1, nowu
  if p.att then attempts = u32(v, p.att) + 1 end
  if p.created then created = u64(v, p.created) end
  local key, topic = p.key or '', p.topic or ''
  return '\3' .. seq8 .. struct.pack('>I8I8I4I4', created, now, attempts, #reason) .. reason ..
    struct.pack('>I4', #key) .. key .. struct.pack('>I4', #topic) .. topic .. struct.pack('>I8I4', 0, 0) .. v
end

-- park_corrupt parks entry id, pending under member m in zset kp, whose
-- value v in hash ke parse (result p) finds malformed or without a topic:
-- the value is quarantined (see quarantine), the member leaves pending and
-- the ID joins parked zset kq. It returns the reason, the entry's last
-- error now. claim.lua calls it for a value it meets in its general path,
-- quarantine.lua for one the Go decoder refused. The park time (now, ms)
-- goes to zset kt (the partition's parkedat).
local function park_corrupt(kp, ke, kq, id, m, v, p, nowu, now, kt)
  local why = p.why or 'topic is empty (AppendInTx never writes one, so the sink has nowhere to publish it)'
  local reason = 'redisoutbox: corrupt stored entry, parked by FindPendingBatch: ' .. why ..
    '; the payload holds the raw stored value'
  redis.call('HSET', ke, id, quarantine(v, p, string.sub(m, 1, 8), reason, nowu, now))
  redis.call('ZREM', kp, m)
  redis.call('ZADD', kq, 0, id)
  redis.call('ZADD', kt, now, id)
  return reason
end

-- bytes_less reports whether string a sorts before b byte by byte, as
-- Redis orders the members of a sorted set with equal scores (Lua's own
-- string comparison follows the server's collation locale).
local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- bump_gen increments the sequence counter k when it holds a number: a
-- member entered pending or moved within it, so a front hint read before
-- no longer holds (see claim.lua).
local function bump_gen(k)
  local g = redis.call('GET', k)
  if g and string.match(g, '^%d+$') then redis.call('INCR', k) end
end

-- as_v2 returns v in format 2 and whether it converted it. A format 1
-- entry gets the position it would have had: its not-before in ms
-- (rounded up), else its append time. A malformed value is returned as it
-- is (the claim script parks it).
local function as_v2(v)
  if string.byte(v, 1) ~= 1 then return v, false end
  local p = parse(v)
  if p.why then return v, false end
  local nb, pos = struct.unpack('>i8', v, p.nbat), 0
  if nb ~= 0 then
    pos = math.ceil(nb / 1000000)
  else
    pos = math.floor(u64(v, 10) / 1000)
  end
  if pos < 0 then pos = 0 end
  return '\2' .. string.sub(v, 2, 17) .. struct.pack('>I8', pos) .. string.sub(v, 18), true
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

-- History: the partition's history hash holds, for each pending or parked
-- entry that was attempted or deferred, one value (decodeHistory in
-- history.go reads it):
--   1 version (1) | 2 flags (1: deferred, see mark_failed.lua)
--   | then per attempt, oldest first: at ms (8) | owner length (4) | owner
--   | error length (4) | error
-- at most MAX_HISTORY attempts. The claim never reads it; MarkSent and
-- Cancel delete the entry's field, MarkFailed writes it.
local MAX_HISTORY = 10

-- history_records returns the attempt records of history value h, each as
-- its raw bytes, oldest first (none for nil or a value of another version;
-- a truncated tail is dropped).
local function history_records(h)
  local recs = {}
  if not h or #h < 2 or string.byte(h, 1) ~= 1 then return recs end
  local off, n = 3, #h
  while off + 11 <= n do
    local ea = off + 12 + u32(h, off + 8)
    if ea + 3 > n then break end
    local stop = ea + 4 + u32(h, ea)
    if stop - 1 > n then break end
    recs[#recs + 1] = string.sub(h, off, stop - 1)
    off = stop
  end
  return recs
end

-- history_flags returns the flags byte of history value h (0 for nil).
local function history_flags(h)
  if not h or #h < 2 or string.byte(h, 1) ~= 1 then return 0 end
  return string.byte(h, 2)
end

-- history_value builds a history value of flags and records (nil when
-- both are empty: the field is then deleted).
local function history_value(flags, recs)
  if flags == 0 and #recs == 0 then return nil end
  local first = math.max(1, #recs - MAX_HISTORY + 1)
  return '\1' .. string.char(flags) .. table.concat(recs, '', first)
end

-- history_write sets (or, for nil, deletes) field id of history hash kh.
local function history_write(kh, id, h)
  if h then redis.call('HSET', kh, id, h) else redis.call('HDEL', kh, id) end
end

-- attempt_record encodes one attempt: at ms, owner, error.
local function attempt_record(at, owner, err)
  return struct.pack('>I8I4', at, #owner) .. owner .. struct.pack('>I4', #err) .. err
end

-- owner_of returns the owner of lease token "version:owner".
local function owner_of(token)
  return string.match(token, '^%-?%d+:(.*)$') or token
end

-- PAUSE_BAND: a pending score at or above it is that of an entry the
-- claim set aside while its topic is paused (or held back behind one):
-- PAUSE_BAND + its score before. Every score a clock gives is far below
-- (2^50 ms is year 37648), and PAUSE_BAND + any such score is an exact
-- integer in a double. unpause.lua moves them back; readers of scores
-- (lookup, stats, scan, export) take PAUSE_BAND off.
local PAUSE_BAND = 1125899906842624

-- unband returns score s (a number) without PAUSE_BAND.
local function unband(s)
  if s >= PAUSE_BAND then return s - PAUSE_BAND end
  return s
end

-- cancel_entry deletes entry id as Cancel does (cancel.lua has the
-- contract; purge_parked.lua removes parked entries with it): ke entries
-- hash, kp pending zset, kq parked zset, ko key-order zset, kseq sequence
-- counter, kh history hash, kt parked-at zset. Returns 1 when the entry
-- was pending or parked and is now deleted, else 0.
local function cancel_entry(ke, kp, kq, ko, kseq, kh, kt, id)
  local v = redis.call('HGET', ke, id)
  if not v then return 0 end
  v = as_v2(v)
  local m = member(v, id)
  local score = redis.call('ZSCORE', kp, m)
  local n = redis.call('ZREM', kp, m) + redis.call('ZREM', kq, id)
  redis.call('ZREM', kt, id)
  redis.call('HDEL', ke, id)
  redis.call('HDEL', kh, id)
  local key = key_of(v)
  if key ~= '' then
    local om = order_member(key, v, m)
    redis.call('ZREM', ko, om)
    local now = now_ms()
    if score and tonumber(score) > now then
      local pfx = key_prefix(key)
      local r = redis.call('ZRANGEBYLEX', ko, '(' .. om, '[' .. pfx .. HIGH, 'LIMIT', 0, 1000)
      local moved = false
      for _, f in ipairs(r) do
        local fm = string.sub(f, #pfx + 9)
        if redis.call('ZSCORE', kp, fm) == score then
          local fv = redis.call('HGET', ke, string.sub(fm, 9))
          if fv and string.byte(fv, 1) == 2 and #fv >= 33 and attempts_of(fv) == 0 then
            -- Front hint invariant (fronthint.go): every script that puts a member
            -- into pending or moves one within it changes the sequence counter.
            -- Here: bump_gen below when anything was moved.
            redis.call('ZADD', kp, math.max(now, u64(f, #pfx + 1)), fm)
            moved = true
          end
        end
      end
      if moved then bump_gen(kseq) end
    end
  end
  if n == 0 then return 0 end
  return 1
end
