-- claim.lua: claim an event id for one RAW copy, atomically.
-- KEYS[1] is the claims hash of the record's ingest day, KEYS[2..n] those of
-- the days before it that are still kept (same bucket, same hash tag).
-- ARGV[1] the event id's IDKey (16 bytes), ARGV[2] the claim: the content
-- fingerprint (8 bytes) followed by the copy's RAW sequence in decimal
-- (nothing when it is unknown, which ranks as the oldest), ARGV[3] the Unix
-- time (s) at which the day's claims are no longer needed (0: never).
-- Returns the claim that holds the id: the one with the lowest RAW sequence
-- over every kept day. A copy with a lower sequence than the holder takes
-- the claim over (it is written under its own day); the same copy again
-- (equal sequence) or a later one changes nothing. A bucket written for the
-- first time gets its expiry, so Redis drops a day's claims by itself once
-- no record can be checked against them.
local function seqof(v)
  if #v <= 8 then return 0 end
  return tonumber(string.sub(v, 9)) or 0
end
local want = seqof(ARGV[2])
local held, heldseq
for i = 1, #KEYS do
  local v = redis.call('HGET', KEYS[i], ARGV[1])
  if v then
    local s = seqof(v)
    if not held or s < heldseq then held, heldseq = v, s end
  end
end
if held and heldseq <= want then return held end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] ~= '0' and redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIREAT', KEYS[1], ARGV[3]) end
return ARGV[2]
