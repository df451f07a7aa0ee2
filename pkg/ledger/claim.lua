-- claim.lua: claim an event id for a content fingerprint, atomically.
-- KEYS[1] claims hash of the record's ingest day, KEYS[2] of the day before
-- (same bucket, same hash tag). ARGV[1] the event id's IDKey (16 bytes),
-- ARGV[2] the content fingerprint (8 bytes), ARGV[3] the Unix time (s) at
-- which the day's claims are no longer needed.
-- Returns the fingerprint that holds the id: the older day's claim wins,
-- else the day's existing claim, else this one (now recorded). A bucket
-- written for the first time gets its expiry, so Redis drops a day's
-- claims by itself once no record can be checked against them.
local y = redis.call('HGET', KEYS[2], ARGV[1])
if y then return y end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIREAT', KEYS[1], ARGV[3]) end
  return ARGV[2]
end
return redis.call('HGET', KEYS[1], ARGV[1])
