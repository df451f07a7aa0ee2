-- retire.lua: retire the state of windows that are final and past the
-- replay horizon, in one atomic step: delete their partials and ledgers,
-- drop them from the index, lower the entry count and raise the
-- partition's retired mark (events of windows ending at or before it are
-- dropped by apply.lua without touching any state).
--
-- KEYS[1] checkpoint, KEYS[2] index, KEYS[1+2j] partial j, KEYS[2+2j] ledger j
-- ARGV[1] new retired mark (ms), ARGV[2] window count n, ARGV[3..2+n] ids
-- Returns {ledger entries removed, retired mark}.
local mark = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'retired', 'entries')
local retired = tonumber(cur[1]) or 0
local entries = tonumber(cur[2]) or 0
local removed = 0
for j = 1, n do
  local l = redis.call('HLEN', KEYS[2 + 2 * j])
  removed = removed + l
  redis.call('DEL', KEYS[1 + 2 * j], KEYS[2 + 2 * j])
  redis.call('ZREM', KEYS[2], ARGV[2 + j])
end
if mark > retired then retired = mark end
entries = entries - removed
if entries < 0 then entries = 0 end
redis.call('HSET', KEYS[1], 'retired', string.format('%d', retired), 'entries', string.format('%d', entries))
return {removed, string.format('%d', retired)}
