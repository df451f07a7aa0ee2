-- progress.lua: the validator partitions' claim progress (one hash, one
-- field per RAW partition: the highest RAW sequence through which the
-- partition has written the claims of every record it holds).
-- KEYS[1] the progress hash. ARGV[1] a partition number, or '' to only
-- read; ARGV[2] its new progress; ARGV[3] the progress its writer last
-- saw there (0: unknown). Progress never goes back: a lower value (a
-- redelivered batch) changes nothing. Progress found below ARGV[3] means
-- Redis lost writes (a failover, a restore, a FLUSHALL): nothing is
-- written and the error REGRESSED <found> is returned, so the writer
-- claims the lost range again before it marks anything.
-- ARGV[4] the writer's epoch (ledger.Fence; 0 or absent: not fenced) and
-- KEYS[2] the fence hash beside KEYS[1] (Keys.ClaimFence): a mark whose
-- epoch is below the partition's fence writes nothing and returns the
-- error FENCED; a larger epoch raises the fence.
-- Returns the whole hash, as field, value, field, value, ...
if ARGV[1] ~= '' then
  local refused = fence(KEYS[2], ARGV[1], ARGV[4])
  if refused then return refused end
  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1])) or 0
  if cur < tonumber(ARGV[3]) then
    return redis.error_reply('REGRESSED ' .. cur)
  end
  if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
end
return redis.call('HGETALL', KEYS[1])
