-- retire.lua: retire the state of windows that are final and past the
-- replay horizon, in one atomic step: delete their partials and ledger
-- shards, drop them from the index, lower the entry count and raise the
-- partition's retired mark (events of windows ending at or before it are
-- dropped by apply.lua without touching any state).
--
-- What receiptctl explain reads of a partial moves into the window's
-- explain record, which stays until the publisher prunes the window
-- (--window-retention): '#o' the events counted on time (n - corr) and
-- '#v' the partial's version, beside the corrections and '#d' already
-- there. Retiring again finds no partial and leaves the record as it is.
--
-- KEYS[1] checkpoint, KEYS[2] index, then per window j = 1..n its partial
-- and its explain record followed by its S ledger shards (2 + S keys a
-- window).
-- ARGV[1] new retired mark (ms), ARGV[2] window count n, ARGV[3] shards a
-- window S, ARGV[4] the writer's epoch (ledger.Fence; 0: not fenced),
-- ARGV[5..4+n] window ids.
-- Returns {ledger entries removed, retired mark}, or the error FENCED when
-- a later owner's epoch holds the partition (nothing is deleted).
local mark = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local S = tonumber(ARGV[3])
local refused = fence(KEYS[1], 'fence', ARGV[4])
if refused then return refused end
local cur = redis.call('HMGET', KEYS[1], 'retired', 'entries')
local retired = tonumber(cur[1]) or 0
local entries = tonumber(cur[2]) or 0
local removed = 0
for j = 1, n do
  local b = 2 + (j - 1) * (2 + S)
  for k = 1, S do
    removed = removed + redis.call('HLEN', KEYS[b + 2 + k])
    redis.call('DEL', KEYS[b + 2 + k])
  end
  local v = redis.call('HMGET', KEYS[b + 1], 'n', 'corr', 'ver')
  if v[3] then
    redis.call('HSET', KEYS[b + 2], '#o', (tonumber(v[1]) or 0) - (tonumber(v[2]) or 0), '#v', v[3])
  end
  redis.call('DEL', KEYS[b + 1])
  redis.call('ZREM', KEYS[2], ARGV[4 + j])
end
if mark > retired then retired = mark end
entries = entries - removed
if entries < 0 then entries = 0 end
redis.call('HSET', KEYS[1], 'retired', string.format('%d', retired), 'entries', string.format('%d', entries))
return {removed, string.format('%d', retired)}
