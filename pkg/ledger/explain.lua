-- explain.lua: read what partition p holds about one window in one atomic
-- step: its retired mark, its partial and its explain record (apply.lua),
-- so the corrections read are exactly those the partial counts.
--
-- KEYS[1] checkpoint hash, KEYS[2] partial hash, KEYS[3] explain record.
-- Returns {retired, HGETALL partial, HGETALL explain record}.
local retired = redis.call('HGET', KEYS[1], 'retired') or '0'
return {retired, redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])}
