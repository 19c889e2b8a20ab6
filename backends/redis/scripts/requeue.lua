-- requeue.lua: Requeue (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- KEYS[4] sequence counter   KEYS[5] history hash   KEYS[6] parked-at zset
-- ARGV[1..] entry IDs
-- Returns {n, refused}: n is the number of parked entries moved back to
-- pending, due now, with attempts reset to 0 (the last error and the
-- attempt history are kept; the deferred flag is cleared);
-- refused is a flat array id, reason, ... of the parked entries of this
-- partition left parked because they can never be published as stored, in
-- the order of ARGV: a quarantined value (format 3, parked by the claim
-- because it did not decode), a value that does not decode, or one with
-- an empty topic. IDs that are not parked in this partition are ignored
-- (a parked-set member without a value is removed).
--
-- A requeued entry is ordered as if appended now: it gets a new append
-- sequence and its position becomes now, so it orders after the entries
-- already due, also in its key's order (the requeued ones keep their
-- original order among themselves). A format 1 entry is written back in
-- format 2.
hashes(KEYS[1], KEYS[5])
zsets(KEYS[2], KEYS[3])
local bad = counter(KEYS[4])
if bad then return bad end
local now = now_ms()
local found, refused = {}, {}
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[3], id) == 1 then
    local v = redis.call('HGET', KEYS[1], id)
    if not v then redis.call('ZREM', KEYS[6], id) end
    if v then
      local why
      if string.byte(v, 1) == 3 then
        why = 'its stored value did not decode and was quarantined when it was parked (' .. last_error_of(v) ..
          '); its payload holds that raw value'
      else
        local p = parse(v)
        if p.why then
          why = 'its stored value does not decode: ' .. p.why
        elseif p.topic == '' then
          why = 'it has no topic'
        end
      end
      if why then
        redis.call('ZADD', KEYS[3], 0, id) -- stays parked
        refused[#refused + 1] = id
        refused[#refused + 1] = why
      else
        redis.call('ZREM', KEYS[6], id) -- no longer parked: no park time
        found[#found + 1] = {id, (as_v2(v))}
      end
    end
  end
end
if #found == 0 then return {0, refused} end
table.sort(found, function(x, y) return seq_of(string.sub(x[2], 2, 9)) < seq_of(string.sub(y[2], 2, 9)) end)
-- Front hint invariant (fronthint.go): every script that puts a member
-- into pending or moves one within it changes the sequence counter.
-- Here: the INCRBY below, before the ZADDs to pending.
local seq = redis.call('INCRBY', KEYS[4], #found) - #found
for _, f in ipairs(found) do
  local id, v = f[1], f[2]
  seq = seq + 1
  v = '\2' .. struct.pack('>I8', seq) .. string.sub(v, 10, 17) .. struct.pack('>I8I4', now, 0) .. string.sub(v, 30)
  redis.call('HSET', KEYS[1], id, v)
  local h = redis.call('HGET', KEYS[5], id)
  if h and history_flags(h) ~= 0 then history_write(KEYS[5], id, history_value(0, history_records(h))) end
  local m = member(v, id)
  redis.call('ZADD', KEYS[2], now, m)
end
return {#found, refused}
