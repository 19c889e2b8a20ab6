-- hold_part.lua: Hold, one partition.
--
-- KEYS[1] the partition's hold hash   KEYS[2] sequence counter
-- ARGV[1] the hold's Since in ms (hold.lua's result)   ARGV[2] the size
--         of the block of sequence numbers reserved for imports
-- Returns 1 when it held the partition, 0 when it was held already (its
-- Since and its reserved block are kept).
--
-- The hold hash has the fields since (ms; the claim returns nothing while
-- the hash exists, and Import lowers due times to since - 1), next and
-- last: the block of append sequence numbers reserved for imports. The
-- append counter jumps over the block, so every entry appended from now
-- on gets a sequence above it, and entries imported while the partition
-- is held sort before them in the partition's append order (export order,
-- and ties of the pending set).
hashes(KEYS[1])
local bad = counter(KEYS[2])
if bad then return bad end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local size = tonumber(ARGV[2])
-- Front hint invariant (fronthint.go): every script that puts a member
-- into pending or moves one within it changes the sequence counter.
-- Here: the INCRBY below, so imports from the block need none.
local last = redis.call('INCRBY', KEYS[2], size)
redis.call('HSET', KEYS[1], 'since', ARGV[1], 'next', last - size + 1, 'last', last)
return 1
