-- claims.lua: claim event ids for their RAW copies, a batch at a time,
-- atomically. Each claim is decided as if claimed alone, in order.
-- KEYS are groups of claims hashes: a group is the hash of one bucket for
-- one ingest day followed by those of the same bucket for the days before
-- it that are still kept (ARGV[1] hashes in all). Outside Redis Cluster
-- the keys may be in many slots. On a cluster the caller sends one call
-- per master, with the script flag allow-cross-slot-keys (Redis ≥ 7.0);
-- Redis Cluster refuses declared keys of two slots, so it declares only
-- the first and passes the others in ARGV, after ARGV[3]. (Before 7.0, or
-- while its slot map is out of date, one call per slot.)
-- ARGV[1] n, the hashes in a group; ARGV[2] m, how many key names
-- continue KEYS (as ARGV[4..3+m]); ARGV[3] t, the index in the keys of a
-- hash whose field 'takeovers' counts the takeovers (0: none; on a single
-- Redis the claim progress hash, so the count is lost with the claims);
-- then four arguments per claim: the
-- index in the keys of its group's first hash (its ingest day), the event id's
-- IDKey (16 bytes), the claim (the content fingerprint, 8 bytes, followed
-- by the copy's RAW sequence in decimal; nothing when it is unknown, which
-- ranks as the oldest), and the Unix time (s) at which the day's claims
-- are no longer needed (0: never).
-- Returns, for each claim in order, the claim that holds its id: the one
-- with the lowest RAW sequence over every kept day. A copy with a lower
-- sequence than the holder takes the claim over (it is written under its
-- own day); the same copy again (equal sequence) or a later one changes
-- nothing. A bucket written for the first time gets its expiry, so Redis
-- drops a day's claims by itself once no record can be checked against
-- them.
local function seqof(v)
  if #v <= 8 then return 0 end
  return tonumber(string.sub(v, 9)) or 0
end
local n, m, t = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local keys = {}
for i = 1, #KEYS do keys[i] = KEYS[i] end
for i = 1, m do keys[#KEYS + i] = ARGV[3 + i] end
local out = {}
local expiring = {}
for a = 4 + m, #ARGV, 4 do
  local k, id, claim, at = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local want = seqof(claim)
  local held, heldseq
  for i = k, k + n - 1 do
    local v = redis.call('HGET', keys[i], id)
    if v then
      local s = seqof(v)
      if not held or s < heldseq then held, heldseq = v, s end
    end
  end
  if not held or heldseq > want then
    if held and t > 0 then redis.call('HINCRBY', keys[t], 'takeovers', 1) end
    redis.call('HSET', keys[k], id, claim)
    -- One expiry check per hash and call: after it the hash expires.
    if at ~= '0' and not expiring[keys[k]] then
      expiring[keys[k]] = true
      if redis.call('TTL', keys[k]) == -1 then redis.call('EXPIREAT', keys[k], at) end
    end
    held = claim
  end
  out[#out + 1] = held
end
return out
