-- read.lua: read a partition's watermark and some of its window partials in
-- one atomic step, so a partial is never newer or older than the watermark
-- read with it.
--
-- KEYS[1]    checkpoint hash
-- KEYS[2..]  partial hashes
-- Returns {wm, seq, retired, p_1, ..., p_n} where p_i is the HGETALL of
-- partial i (field, value, ...; empty where absent): the counts, the
-- digest and the breakdown fields (apply.lua).
local cur = redis.call('HMGET', KEYS[1], 'wm', 'seq', 'retired')
local res = {cur[1] or '0', cur[2] or '0', cur[3] or '0'}
for i = 2, #KEYS do
  res[#res + 1] = redis.call('HGETALL', KEYS[i])
end
return res
