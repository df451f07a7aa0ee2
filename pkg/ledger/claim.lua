-- claim.lua: claim an event id for a content fingerprint, atomically.
-- KEYS[1] claims hash of the record's ingest day, KEYS[2] of the day before
-- (same bucket, same hash tag). ARGV[1] event id, ARGV[2] fingerprint.
-- Returns the fingerprint that holds the id: the older day's claim wins,
-- else the day's existing claim, else this one (now recorded).
local y = redis.call('HGET', KEYS[2], ARGV[1])
if y then return y end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then return ARGV[2] end
return redis.call('HGET', KEYS[1], ARGV[1])
