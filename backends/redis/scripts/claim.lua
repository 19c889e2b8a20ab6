-- claim.lua: FindPendingBatch, FetchBatch and FetchNext.
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] key-order zset   KEYS[5] parked zset   KEYS[6] hold hash
-- KEYS[7] sequence counter (the generation of the front hint)
-- KEYS[8] paused hash (Pauser: paused topic -> since; field '' while the
--         partition is paused)
-- KEYS[9] history hash (read only for marked entries never attempted: is
--         it deferred?)
-- KEYS[10] parked-at zset (every park here records its time, ms)
--
-- ARGV, as claimArgs in claim.go builds it (claimargs_test.go checks the
-- two against each other):
-- ARGV[1] token: the lease token "version:owner"
-- ARGV[2] limit: at most this many entries returned and parked
-- ARGV[3] budget: at most this many pending members scanned
-- FetchNext only (FindPendingBatch and FetchBatch end at ARGV[3]):
-- ARGV[4] gen: the front hint's generation ('' for no hint; see "The front hint")
-- ARGV[5] first: the pending member of the first entry in flight
-- ARGV[6] last: the pending member of the last entry in flight
-- ARGV[7] count: the number of entries in flight
-- ARGV[8] lscore: the last one's pending score as the claim that returned it read it
-- ARGV[9] m: the number of entries in flight given by their pending member (0 when the hint goes alone)
-- ARGV[10..9+m] members: those pending members
-- ARGV[10+m] n: the number of entries in flight given by their ID (0 when the hint goes alone)
-- ARGV[11+m..10+m+n] ids: those IDs (the caller does not know their member)
-- ARGV[11+m+n..] stopped: the keys of the attempted entries in flight
--
-- Returns -1 when the lease is lost, -4 when a front hint came without the
-- entries in flight and does not hold (nothing changed), else {entries,
-- parked, generation, last score, hinted}: entries is a
-- flat array id1, value1, id2, value2, ... of entries in (due, append)
-- order; parked is a flat array id, key, topic, reason, ... of the entries
-- this call parked because their stored value could not be used, in the
-- order it met them (key and topic as far as they could be read, '' when
-- not; reason is the entry's last error now); generation is the sequence
-- counter as this call read it when the entries it returned may serve as
-- the front hint of the next FetchNext (see below), else ''; last score
-- is then the pending score of the last entry returned (else ''); hinted
-- is 1 when the front hint held, else 0. Entries and parks together
-- are at most ARGV[2]. While the partition is held (KEYS[6] exists, see
-- hold_part.lua) it returns {{}, {}, '', '', 0}: nothing is claimed, parked or
-- re-scored; so it does while the partition is paused (KEYS[8] has the
-- field '').
--
-- Pauses (pause.go). KEYS[8] is read whole (HGETALL) once per call: while
-- it does not exist (nothing paused), that is the only cost. While it
-- names topics, every entry takes the general path, and a due entry of a
-- paused topic is not returned but set aside: re-scored to PAUSE_BAND
-- plus its score (see lib.lua) once the scan is over, and marked when it
-- has a key (so the later entries of its key, of every topic, are held
-- back behind it as behind a failing entry, and re-scored into the band
-- too, to PAUSE_BAND plus its score). Set-aside entries leave the due
-- range, so a crowd of paused entries costs one scan, not every claim's
-- budget; ResumeTopic moves them back (unpause.lua). Their entries are
-- unchanged: readers of scores take PAUSE_BAND off.
--
-- The lease is the claim: only its holder reads the partition, so the
-- entries returned stay in pending, unchanged, until the holder finishes
-- them (MarkSent, MarkFailed) or the next holder reads them again. Nothing
-- is written per returned entry.
--
-- Scans ZRANGEBYSCORE pending -inf now in chunks, looking at no more than
-- ARGV[3] members in all (re-scored members count, and so do the members
-- blocker walks over). A chunk starts at an offset: the number of members
-- in front of it that stay where they were. That count is exact only
-- because pending changes under the scan in no other way than by losing
-- the member just looked at (a missing or corrupt entry): re-scores are
-- applied after the scan. A member re-scored at once to a time that is
-- still due would move further down the range, behind members this call
-- had already read and counted, and the next chunk would start early and
-- return one of them a second time.
--
-- Per-key order. A key's order is its pending entries by (position,
-- sequence). An entry with a non-empty key is returned only when every
-- entry before it in its key's order was returned earlier in this call
-- and was never attempted nor deferred. So a failing (or deferred) entry
-- holds back the rest of its key, even within one batch, and a pending entry that is not returned
-- (held back itself, or not due) holds back everything after it.
--
-- The key-order set holds only the entries whose score is not their
-- position or that were attempted ("marked": failing entries waiting for a
-- retry, held-back entries re-scored by this script); it may hold others
-- too (earlier builds put every keyed entry there), which is harmless. An
-- unmarked entry E before a candidate m in its key's order has score
-- position(E) <= position(m) <= score(m), so this call scans E before m:
-- what this call saw of unmarked entries is known here (the earliest
-- held-back entry of each key, held[key]), and only marked ones need the
-- set. When the set is empty (nothing failing, nothing held back), a
-- keyed entry costs no lookup at all.
--
-- A held-back entry whose blocker (the first entry before it that is not
-- returned) has a later score is re-scored to that score and marked: it
-- cannot be returned before its blocker, so this never delays it, and it
-- leaves the front of the range, so a crowd behind one failing entry
-- cannot starve other keys. It is marked at once and re-scored when the
-- scan is over (see above), so this call does not look at it again. Other
-- held-back entries are skipped.
--
-- Repairs, none expected in normal operation:
--   - a pending member without a value is removed;
--   - a pending member whose sequence is not its value's (a stray member)
--     is removed when the entry's own member is pending or the entry is
--     parked; otherwise the entry is parked as it is (its value is sound:
--     Requeue gives it a new sequence and member), with a reason naming
--     both sequences;
--   - a malformed value, or one with an empty topic (AppendInTx never
--     writes one), is parked and quarantined: rewritten in format 3 (see
--     quarantine in lib.lua) with what could be read of its key and topic,
--     the reason as last error and the raw value as payload; Requeue
--     refuses it. The general path below finds it; a value that takes the
--     fast path (format 2, never attempted, under its own member) is
--     returned unchecked past its attempts, and the Go side has
--     quarantine.lua park it the same way when its decoder refuses it;
--   - a format 3 value met in pending (moved there by hand) is parked
--     again as it is;
--   - a key-order member whose entry is not pending, or too short to be a
--     member, is removed when it would block;
--   - a format 1 entry is converted to format 2 and marked.
-- Every park is reported in the second array of the result.
--
-- In flight (FetchNext, see Prefetcher in backend.go): the entries in
-- flight are claims of this lease that the relay is still publishing.
-- They are scanned (they count against the budget, not the limit) but
-- never read, returned or changed, and stay where they are. One given by
-- its member is matched by that member: another (stray) member of its ID
-- is read and repaired like any stray member (removed, its entry being
-- pending under its own). The keys of the attempted
-- ones are stopped from the start, so their later entries are held back as
-- by any attempted entry; an unattempted one holds back nothing, unless
-- the key-order set holds its member (blocker then finds it pending), which
-- only delays its key's later entries to the next fetch.
--
-- The front hint. A FetchNext while the entries in flight are exactly
-- the first members of pending can start its scan behind them instead of
-- reading them again. A call returns a generation (the sequence counter
-- as it read it) when, from the first entry it returned to the last, it
-- scanned nothing it left pending but the entries it returned (no entry in
-- flight, none held back). Every write that puts a member into pending or
-- moves one within it changes the counter: appends, Requeue and Import
-- take sequences from it (an Import into a held partition from the block
-- Hold took from it, and a claim while held returns nothing, so no
-- generation), and MarkFailed, Cancel and a claim that re-scores
-- held-back entries bump it. So when the counter still holds
-- the generation, the first entry in flight is the first member of
-- pending (rank 0) and the last one's rank is their number less one,
-- nothing entered that stretch since, and nothing else is in it: the
-- entries in flight are all of it. The call then starts at that offset,
-- as if it had scanned them (they are skipped exactly as entries in flight
-- are; the keys of attempted ones are stopped from ARGV). And since, with
-- the counter unchanged, pending has only lost members since (their order
-- kept), a first member of pending that sorts after where the last entry
-- in flight was (its score and member) means none of them is left (they
-- were sent meanwhile, as when the relay's MarkSent of them reaches the
-- server before this call): the call starts at offset 0 with nothing in
-- flight. Otherwise it scans from the start and matches them by member or
-- ID, as without the hint.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
if redis.call('EXISTS', KEYS[6]) == 1 then return {{}, {}, '', '', 0} end
-- pausedtopics[topic]: paused (nil when nothing is: pausing false).
local pausedtopics, pausing = nil, false
do
  local pz = redis.call('HGETALL', KEYS[8])
  if #pz > 0 then
    pausedtopics = {}
    for i = 1, #pz, 2 do
      if pz[i] == '' then return {{}, {}, '', '', 0} end
      pausedtopics[pz[i]] = true
    end
    pausing = true
  end
end
zsets(KEYS[2], KEYS[4], KEYS[5])
hashes(KEYS[3])
local limit, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local nowu = now_us()
local now = math.floor(nowu / 1000)
local out, got, scanned, skipped = {}, 0, 0, 0
-- gen: the sequence counter ('' when it does not hold a number: then no
-- generation is returned and no hint taken).
local gen = redis.call('GET', KEYS[7])
if not gen or not string.match(gen, '^%d+$') then gen = '' end
-- inflight[member], inflightid[id]: in flight (see above), by pending
-- member, or by ID when the caller did not know the member (nil when
-- there is none); exleft: how many of them the scan has not met yet (the
-- first chunk reads that many more members).
local inflight, inflightid, exleft, hinted = {}, nil, 0, 0
local nm = tonumber(ARGV[9] or '0')
local ni = tonumber(ARGV[10 + nm] or '0')
local firstkey = 11 + nm + ni
if not ARGV[4] then firstkey = 5 end
-- front: the offset the front hint gives (see above), or nil.
local front = nil
if ARGV[4] and ARGV[4] ~= '' and ARGV[4] == gen then
  local r0 = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if r0[1] == ARGV[5] and redis.call('ZRANK', KEYS[2], ARGV[6]) == tonumber(ARGV[7]) - 1 then
    front = tonumber(ARGV[7])
  elseif ARGV[8] ~= '' and (not r0[1] or tonumber(r0[2]) > tonumber(ARGV[8])
      or tonumber(r0[2]) == tonumber(ARGV[8]) and bytes_less(ARGV[6], r0[1])) then
    front = 0
  end
end
if front then
  -- Start behind the entries in flight (none left: at the start).
  skipped, scanned, hinted = front, front, 1
elseif ARGV[4] and ARGV[4] ~= '' and nm + ni == 0 then
  return -4 -- the hint alone, and it does not hold: ask for the entries in flight
else
  for i = 10, 9 + nm do inflight[ARGV[i]] = true end
  if ni > 0 then
    inflightid = {}
    for i = 11 + nm, 10 + nm + ni do inflightid[ARGV[i]] = true end
  end
  exleft = nm + ni
end
-- first, last, dirty: the members of the first and last entry returned,
-- and whether an entry left pending was scanned after the first (then no
-- generation).
local first, last, dirty = nil, nil, false
-- parked: id, key, topic, reason of each entry parked here.
local parked = {}
-- marked: whether the key-order set may hold members (checked once;
-- members this call adds set it too).
local marked = redis.call('EXISTS', KEYS[4]) == 1
-- returned[key-order member]: returned in this call, never attempted.
-- stop[key]: an attempted entry of the key was returned, so the rest of
-- the key is held back. held[key]: the key-order member of the earliest
-- entry of the key this call scanned and did not return; heldat[key]: the
-- score it waits at (nil when it waits for an entry returned in this call).
-- open[key]: the last member of the key's marked entries the walk in
-- blocker found returned (the walk resumes after it).
local returned, stop, held, heldat, open = {}, {}, {}, {}, {}
-- anyheld: whether stop or held has an entry, or topics are paused (then
-- every entry takes the general path). nout: the length of out.
local anyheld, nout = pausing, 0
for i = firstkey, #ARGV do
  stop[ARGV[i]] = true
  anyheld = true
end
-- rescore: score, member pairs for ZADD pending once the scan is over.
local rescore = {}

-- precedes reports whether key-order member a comes before b, both of
-- one key, whose position starts at offset at. (Lua's string comparison
-- follows the server's collation locale, not bytes, so it is not used.)
local function precedes(a, b, at)
  local pa, pb = u64(a, at), u64(b, at)
  if pa ~= pb then return pa < pb end
  return u64(a, at + 8) < u64(b, at + 8)
end

-- blocker returns false when no marked entry before km (in its key's
-- order) is still to be returned (and, third, whether km itself is
-- marked), else true and that entry's pending score (nil when it is an
-- attempted entry returned in this call). Stale members met on the way
-- are removed.
local function blocker(key, pfx, km)
  local at = #pfx + 1
  while true do
    local lo = '[' .. pfx
    if open[key] then lo = '(' .. open[key] end
    local r = redis.call('ZRANGEBYLEX', KEYS[4], lo, '[' .. pfx .. HIGH, 'LIMIT', 0, 1)
    local b = r[1]
    if b and #b < at + 16 then
      -- Too short to hold a position and a sequence: not a member any
      -- script writes. Remove it rather than fail on it.
      redis.call('ZREM', KEYS[4], b)
    elseif not b or b == km or not precedes(b, km, at) then
      return false, nil, b == km
    elseif returned[b] then
      open[key] = b
    else
      local s = redis.call('ZSCORE', KEYS[2], string.sub(b, at + 8))
      if s then return true, tonumber(s) end
      if scanned >= budget then return true end
      scanned = scanned + 1
      redis.call('ZREM', KEYS[4], b) -- stale: its entry is gone or parked
    end
  end
end

while got < limit and scanned < budget do
  local want = math.min(limit - got + 16 + math.max(exleft, 0), budget - scanned)
  local r = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', skipped, want)
  if #r == 0 then break end
  -- The chunk's values in one call (but those of entries in flight). This
  -- loop writes no value but the one it is looking at, so the others stay
  -- as read.
  -- read: the IDs whose values are read, in scan order; fl[i]: r[i] is
  -- in flight (not read). The k-th entry not in flight has ID read[k]
  -- and value vals[k].
  local read, fl = {}, {}
  for i = 1, #r do
    local m = r[i]
    if inflight[m] then
      fl[i] = true
    else
      local id = string.sub(m, 9)
      if inflightid and inflightid[id] then
        fl[i] = true
      else
        read[#read + 1] = id
      end
    end
  end
  local vals = {}
  if #read > 0 and #read <= 4096 then
    vals = redis.call('HMGET', KEYS[3], unpack(read))
  else
    for lo = 1, #read, 4096 do
      local part = redis.call('HMGET', KEYS[3], unpack(read, lo, math.min(lo + 4095, #read)))
      for j = 1, #part do vals[lo + j - 1] = part[j] end
    end
  end
  local k = 0
  for i = 1, #r do
    if got >= limit or scanned >= budget then break end
    scanned = scanned + 1
    local m = r[i]
    if fl[i] then
      -- In flight: it stays in pending, in front of the next chunk.
      skipped = skipped + 1
      if first then dirty = true end
      exleft = exleft - 1 -- below 0 only for a stray member of one given by ID
    else
      k = k + 1
      local id, v = read[k], vals[k]
      -- The fast path: a never attempted format 2 value under its own
      -- member while nothing is marked, stopped or held in this call, so
      -- its key (if any) needs no key-order member (see "Per-key order"
      -- above). Its structure past the attempts is not checked here: the
      -- Go decoder checks every value returned, and quarantine.lua parks
      -- one it refuses as the general path below parks a corrupt value.
      -- Anything else takes the general path.
      if v and not (marked or anyheld) and #v >= 37 and string.byte(v, 1) == 2 and u32(v, 26) == 0 and string.sub(v, 2, 9) == string.sub(m, 1, 8) then
        skipped = skipped + 1
        got = got + 1
        if not first then first = m end
        last = m
        nout = nout + 2
        out[nout - 1] = id
        out[nout] = v
      else
        local p = v and string.byte(v, 1) ~= 3 and parse(v)
        local stray = p and not p.why and string.sub(v, 2, 9) ~= string.sub(m, 1, 8)
        if stray and (redis.call('ZSCORE', KEYS[2], member(v, id)) or redis.call('ZSCORE', KEYS[5], id)) then
          v = nil -- the entry is pending under its own member, or parked
        end
        if not v then
          redis.call('ZREM', KEYS[2], m)
        elseif not p then
          -- A quarantined value back in pending: park it again as it is.
          redis.call('ZREM', KEYS[2], m)
          redis.call('ZADD', KEYS[5], 0, id)
          redis.call('ZADD', KEYS[10], now, id)
          local q = parse(v)
          got = got + 1 -- a park counts against the limit
          parked[#parked + 1] = {id, q.key or '', q.topic or '', last_error_of(v)}
        elseif stray then
          local reason = 'redisoutbox: parked by FindPendingBatch: its only pending member has sequence ' .. seq_of(m) .. ' but its stored value has sequence ' .. seq_of(string.sub(v, 2, 9)) ..
            '; the value is sound: Requeue gives it a new sequence'
          v = as_v2(v)
          redis.call('HSET', KEYS[3], id, set_failure(v, attempts_of(v) + 1, reason))
          redis.call('ZREM', KEYS[2], m)
          redis.call('ZADD', KEYS[5], 0, id)
          redis.call('ZADD', KEYS[10], now, id)
          got = got + 1 -- a park counts against the limit
          parked[#parked + 1] = {id, p.key, p.topic, reason}
        elseif p.why or p.topic == '' then
          local reason = park_corrupt(KEYS[2], KEYS[3], KEYS[5], id, m, v, p, nowu, now, KEYS[10])
          got = got + 1 -- a park counts against the limit
          parked[#parked + 1] = {id, p.key or '', p.topic or '', reason}
        else
          local key = p.key
          do
            local converted
            v, converted = as_v2(v)
            local km, pfx
            if key ~= '' and (marked or converted or stop[key] or held[key] or pausing) then
              -- Only then can the key-order member matter: with nothing
              -- marked, stopped or held, every entry of the key this call
              -- meets is returned, and the set (empty when the call began, so
              -- holding only members this call adds) never holds its member.
              pfx = key_prefix(key)
              km = pfx .. string.sub(v, 18, 25) .. m
              if converted then
                redis.call('ZADD', KEYS[4], 0, km)
                marked = true
              end
            end
            if converted then redis.call('HSET', KEYS[3], id, v) end
            local ok, bs, pz, self = true, nil, false, false
            if pausing and pausedtopics[p.topic] then
              ok, pz = false, true -- paused: set aside, it holds back its key
            elseif key ~= '' and not km then
              if attempts_of(v) > 0 then stop[key], anyheld = true, true end
            elseif km then
              if stop[key] then
                ok = false
              elseif held[key] and precedes(held[key], km, #pfx + 1) then
                ok, bs = false, heldat[key]
              elseif marked then
                local blocked
                blocked, bs, self = blocker(key, pfx, km)
                ok = not blocked
              end
            end
            if ok then
              skipped = skipped + 1 -- it stays in pending, in front of the next chunk
              if km then
                -- A deferred entry (marked, never attempted, its history
                -- flagged: see mark_failed.lua) stops its key as an
                -- attempted one does.
                if attempts_of(v) > 0 or self and history_flags(redis.call('HGET', KEYS[9], id) or nil) % 2 == 1 then
                  stop[key], anyheld = true, true
                else
                  returned[km] = true
                end
              end
              got = got + 1
              if not first then first = m end
              last = m
              nout = nout + 2
              out[nout - 1] = id
              out[nout] = v
            else
              -- It stays where it is until the scan is over, in front of the
              -- next chunk.
              skipped = skipped + 1
              if first then dirty = true end
              local at = nil
              local score = (bs or pz) and tonumber(redis.call('ZSCORE', KEYS[2], m))
              if pz then
                -- Set aside (see "Pauses"); marked, so what follows it in
                -- its key's order waits (in the band too) for it.
                at = score
                if score < PAUSE_BAND then
                  at = PAUSE_BAND + score
                  rescore[#rescore + 1] = at
                  rescore[#rescore + 1] = m
                end
                if km then
                  redis.call('ZADD', KEYS[4], 0, km)
                  marked = true
                end
              elseif bs and bs > score then
                rescore[#rescore + 1] = bs
                rescore[#rescore + 1] = m
                redis.call('ZADD', KEYS[4], 0, km)
                marked, at = true, bs
              elseif bs then
                at = score
              end
              if km and (not held[key] or precedes(km, held[key], #pfx + 1)) then
                held[key], heldat[key] = km, at
                anyheld = true
              end
            end
          end
        end
      end
    end
  end
end
-- Front hint invariant (fronthint.go): every script that puts a member
-- into pending or moves one within it changes the sequence counter.
-- Here: the INCR below, before the re-scores.
if #rescore > 0 and gen ~= '' then
  -- Moved within pending: a front hint read before no longer holds.
  redis.call('INCR', KEYS[7])
  gen = ''
end
for i = 1, #rescore, 512 do
  redis.call('ZADD', KEYS[2], unpack(rescore, i, math.min(i + 511, #rescore)))
end
local lscore = ''
if dirty or not first then
  gen = ''
elseif gen ~= '' then
  lscore = redis.call('ZSCORE', KEYS[2], last) or ''
end
local flat = {}
for _, e in ipairs(parked) do
  for j = 1, 4 do flat[#flat + 1] = e[j] end
end
return {out, flat, gen, lscore, hinted}
