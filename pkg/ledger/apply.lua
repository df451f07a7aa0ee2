-- apply.lua: apply one batch of a partition's VALID messages in one atomic
-- step: skip what the checkpoint says is applied, dedup against the ledger,
-- classify against the partition watermark, update window partials, advance
-- the checkpoint.
--
-- KEYS[1]          checkpoint hash  (seq, wm, retired, entries, pub, busy,
--                  raw)
-- KEYS[2]          window index zset (member window id, score start ms)
-- KEYS[2+j]        partial hash of window j, j = 1..W (n, corr, late, ver,
--                  otv, d1, d2, and the breakdown: c:<store> submissions
--                  counted, a:<store> their amount_cents sum, u:<store>
--                  how many of them were unpriced)
-- KEYS[2+W+j]      explain record of window j (Keys.Explain): field
--                  <event id> -> partial version after it, for each
--                  correction; field "#d" -> copies dropped as duplicates
-- KEYS[2+2W+k]     ledger shard k of the batch, k = 1..L (event IDKey ->
--                  "C" | "L<wm>"; each a shard of one window's ledger)
-- KEYS[#KEYS]      the partition's sources hash (Keys.Sources): field
--                  <source id> -> "h,grew,busy,last" (docs/spec.md §3.1)
-- ARGV[1] lateness ms, ARGV[2] grace ms, ARGV[3] replay horizon ms (0: none),
-- ARGV[4] window count W,
-- ARGV[5..4+W]     window start ms, ARGV[5+W..4+2W] window ids,
-- ARGV[5+2W]       expected checkpoint sequence (the caller's last applied;
--                  0: unknown), ARGV[6+2W] published mark (the last
--                  sequence whose outputs the caller has published and
--                  acked; 0: none), ARGV[7+2W] the writer's epoch
--                  (ledger.Fence; 0: not fenced), ARGV[8+2W] source idle
--                  ms, ARGV[9+2W] source forget ms, ARGV[10+2W] source
--                  count S, ARGV[11+2W..10+2W+S] the source ids, then
--                  ARGV[11+2W+S] record count N, then N records of 4
--                  arguments: the record line, the event IDKey, the store
--                  (a submission's partition_key; "" unknown) and the
--                  event id ("" unless s). The record line is 11 fields
--                  joined by commas: seq, kind (s submission | o other
--                  type | h heartbeat | H a heartbeat with which its
--                  source leaves), window index j (1-based, 0 for h),
--                  ledger shard index k (1-based, 0 unless s), time ms
--                  (event time; for h the source progress), the digest
--                  halves h1, h2 of the event id, the RAW sequence (0:
--                  unknown), the amount in cents ("" unpriced), the
--                  source index (1..S) and the broker time ms of the RAW
--                  message (0: unknown).
--
-- The explain record (receiptctl explain) is written in the same step as
-- the count it explains: a correction's id with the version it produced,
-- and one more duplicate for each copy the ledger drops. Neither changes
-- the partial or its version; a replayed record ("R") changes neither.
--
-- A submission counted (on time or as a correction) adds to its store's
-- breakdown in the same step as to the count, so a replay that changes no
-- count changes no breakdown either.
--
-- A record is already applied if its seq is at or below the checkpoint's
-- seq as the call found it (the records of one VALID frame share the
-- frame's seq, so a frame is applied whole or not at all), or if its RAW
-- sequence is at or below raw, the highest RAW sequence the partition
-- applied: VALID holds a partition's records in RAW order, and a lower one
-- comes from a frame the validator published again after a crash with
-- other bounds (a new VALID message, not a JetStream duplicate).
--
-- Returns {seq, wm, entries_added, decision_1, ..., decision_N} where a
-- decision is "c:<ver>" counted on time, "k:<ver>" counted as correction,
-- "l:<ver>:<wm>" routed late (judged against wm), "d" duplicate, "x:<wm>"
-- dropped because the window is past the replay horizon (retired), "o" other type, "h" heartbeat, "R" already applied, "RL:<wm>"
-- already applied and was routed late.
--
-- The watermark follows docs/spec.md §3.1, step by step: the partition's
-- broker clock (checkpoint field clk) and, per source, its progress h,
-- whether it is busy (an event new to the ledger, or of another type,
-- since its last heartbeat), grew (the clock when h last grew) and last
-- (the broker time of its last message). A heartbeat raises h only when
-- its source is not busy, or at the end of stream; W_p is raised to the
-- smallest h of the sources live in the partition (clock − grew < idle),
-- less lateness. The end-of-stream heartbeat closes every window. A
-- leaving heartbeat removes its source after that; a source whose h has
-- not grown for the forget time is forgotten. All of it is written in
-- this one step.
local M = 4294967296
local EOS = 253402300799999
local lateness = tonumber(ARGV[1])
local grace = tonumber(ARGV[2])
local horizon = tonumber(ARGV[3])
local nw = tonumber(ARGV[4])
local starts, ids = {}, {}
for j = 1, nw do
  starts[j] = tonumber(ARGV[4 + j])
  ids[j] = ARGV[4 + nw + j]
end
local expect = tonumber(ARGV[5 + 2 * nw])
local published = tonumber(ARGV[6 + 2 * nw])
local idle = tonumber(ARGV[8 + 2 * nw])
local forget = tonumber(ARGV[9 + 2 * nw])
local ns = tonumber(ARGV[10 + 2 * nw])
local base = 11 + 2 * nw + ns
local n = tonumber(ARGV[base])
local F = 4

-- The fence (fence.go): a later owner's epoch refuses this writer before
-- anything is written; a larger epoch raises it. Epoch 0: not checked.
local refused = fence(KEYS[1], 'fence', ARGV[7 + 2 * nw])
if refused then return refused end
local cur = redis.call('HMGET', KEYS[1], 'seq', 'wm', 'retired', 'entries', 'pub', 'clk', 'raw', 'busy')
local seq = tonumber(cur[1]) or 0
local wm = tonumber(cur[2]) or 0
local retired = tonumber(cur[3]) or 0
local entries = tonumber(cur[4]) or 0
local pub = tonumber(cur[5]) or 0
local clk = tonumber(cur[6]) or 0
local rawhw = tonumber(cur[7]) or 0
local seq0 = seq
if expect > 0 and seq < expect then
  -- Redis is behind what this writer applied: it lost writes (restarted
  -- from an older snapshot, or empty). Refuse; the writer restarts from
  -- the checkpoint and applies the lost records again.
  return redis.error_reply('REGRESSED checkpoint ' .. string.format('%d', seq) .. ' is behind ' .. string.format('%d', expect))
end
local added = 0

-- The partition's sources (docs/spec.md §3.1).
local SK = KEYS[#KEYS]
local src = {}
local known = redis.call('HGETALL', SK)
for i = 1, #known, 2 do
  local h, g, b, l = string.match(known[i + 1], '^(%-?%d+),(%-?%d+),(%d),(%-?%d+)$')
  src[known[i]] = {h = tonumber(h), g = tonumber(g), b = tonumber(b), l = tonumber(l), dirty = false}
end
-- A checkpoint written before sources (field busy, no sources hash) held
-- the one legacy source: it carries on, with the progress its watermark
-- says.
if cur[8] and #known == 0 then
  src[''] = {h = wm + lateness, g = clk, b = tonumber(cur[8]), l = 0, dirty = true}
end
-- source returns the state of the message's source after its broker time
-- T moved the clock, adding the source when the partition does not know it.
local function source(i, T)
  if T > clk then clk = T end
  local id = ARGV[10 + 2 * nw + i]
  local st = src[id]
  if st == nil or st.gone then
    st = {h = 0, g = clk, b = 0, l = T}
    src[id] = st
  end
  st.l = T
  st.dirty = true
  return st
end
-- raise sets h to t when t is larger, the clock being when it grew.
local function raise(st, t)
  if t > st.h then
    st.h = t
    st.g = clk
  end
end
-- settle raises W_p to the smallest progress of the live sources, less
-- lateness, then forgets the sources other than cur, the message's own,
-- that have not grown for too long (so one source is never forgotten).
local function settle(cur)
  local m = nil
  for _, st in pairs(src) do
    if not st.gone then
      local age = clk - st.g
      if age < idle then
        if m == nil or st.h < m then m = st.h end
      elseif st ~= cur and age >= forget then
        st.gone = true -- forget >= idle: a forgotten source was not live
      end
    end
  end
  if m ~= nil and m - lateness > wm then wm = m - lateness end
end

local parts = {}
local function partial(j)
  local p = parts[j]
  if p == nil then
    local v = redis.call('HMGET', KEYS[2 + j], 'n', 'corr', 'late', 'ver', 'otv', 'd1', 'd2')
    p = {n = tonumber(v[1]) or 0, corr = tonumber(v[2]) or 0, late = tonumber(v[3]) or 0,
         ver = tonumber(v[4]) or 0, otv = tonumber(v[5]) or 0, d1 = tonumber(v[6]) or 0,
         d2 = tonumber(v[7]) or 0, dirty = false, stores = {}}
    parts[j] = p
  end
  return p
end

local out = {}
for i = 0, n - 1 do
  local o = base + 1 + i * F
  local fs, kind, fj, fk, ft, fh1, fh2, fraw, amount, fsi, frecv = string.match(ARGV[o],
    '^(%d+),(%a),(%d+),(%d+),(%-?%d+),(%d+),(%d+),(%d+),([^,]*),(%d+),(%-?%d+)$')
  local s = tonumber(fs)
  local id = ARGV[o + 1]
  local j = tonumber(fj)
  local k = tonumber(fk)
  local t = tonumber(ft)
  local raw = tonumber(fraw)
  local d
  if s <= seq0 or (raw > 0 and raw <= rawhw) then
    d = 'R'
    if s > seq then seq = s end
    if kind == 's' then
      local lv = redis.call('HGET', KEYS[2 + 2 * nw + k], id)
      if lv and string.sub(lv, 1, 1) == 'L' then d = 'RL:' .. string.sub(lv, 2) end
    end
  elseif kind == 'h' or kind == 'H' then
    d = 'h'
    local st = source(tonumber(fsi), tonumber(frecv))
    if st.b == 0 or t >= EOS then raise(st, t) end
    st.b = 0
    if t >= EOS and t - lateness > wm then wm = t - lateness end
    settle(st)
    if kind == 'H' then st.gone = true end
    seq = s
    if raw > rawhw then rawhw = raw end
  else
    d = 'o'
    if kind == 's' then
      local e = starts[j] + 3600000
      if horizon > 0 and wm >= e + grace + horizon then
        -- Past the replay horizon: the window's state is (or may be)
        -- retired; nothing changes. A retry the ledger still knows is a
        -- plain duplicate.
        if redis.call('HEXISTS', KEYS[2 + 2 * nw + k], id) == 1 then
          d = 'd'
          redis.call('HINCRBY', KEYS[2 + nw + j], '#d', 1)
        else
          d = 'x:' .. string.format('%d', wm)
        end
      elseif wm >= e + grace then
        if redis.call('HSETNX', KEYS[2 + 2 * nw + k], id, 'L' .. string.format('%d', wm)) == 1 then
          local p = partial(j)
          p.late = p.late + 1
          p.ver = p.ver + 1
          p.dirty = true
          added = added + 1
          d = 'l:' .. p.ver .. ':' .. string.format('%d', wm)
        else
          d = 'd'
          redis.call('HINCRBY', KEYS[2 + nw + j], '#d', 1)
        end
      else
        if redis.call('HSETNX', KEYS[2 + 2 * nw + k], id, 'C') == 1 then
          local p = partial(j)
          p.n = p.n + 1
          p.ver = p.ver + 1
          p.d1 = (p.d1 + tonumber(fh1)) % M
          p.d2 = (p.d2 + tonumber(fh2)) % M
          p.dirty = true
          local store = ARGV[o + 2]
          local b = p.stores[store]
          if b == nil then
            b = {c = 0, a = 0, u = 0}
            p.stores[store] = b
          end
          b.c = b.c + 1
          if amount == '' then b.u = b.u + 1 else b.a = b.a + tonumber(amount) end
          added = added + 1
          if wm >= e then
            p.corr = p.corr + 1
            d = 'k:' .. p.ver
            redis.call('HSET', KEYS[2 + nw + j], ARGV[o + 3], p.ver)
          else
            p.otv = p.otv + 1
            d = 'c:' .. p.ver
          end
        else
          d = 'd'
          redis.call('HINCRBY', KEYS[2 + nw + j], '#d', 1)
        end
      end
    end
    local st = source(tonumber(fsi), tonumber(frecv))
    if kind ~= 's' or (d ~= 'd' and string.sub(d, 1, 1) ~= 'x') then st.b = 1 end
    raise(st, t)
    settle(st)
    seq = s
    if raw > rawhw then rawhw = raw end
  end
  out[#out + 1] = d
end

for j, p in pairs(parts) do
  if p.dirty then
    redis.call('HSET', KEYS[2 + j], 'n', p.n, 'corr', p.corr, 'late', p.late, 'ver', p.ver,
      'otv', p.otv, 'd1', string.format('%d', p.d1), 'd2', string.format('%d', p.d2))
    redis.call('ZADD', KEYS[2], starts[j], ids[j])
    for store, b in pairs(p.stores) do
      redis.call('HINCRBY', KEYS[2 + j], 'c:' .. store, b.c)
      if b.a ~= 0 then redis.call('HINCRBY', KEYS[2 + j], 'a:' .. store, string.format('%d', b.a)) end
      if b.u ~= 0 then redis.call('HINCRBY', KEYS[2 + j], 'u:' .. store, b.u) end
    end
  end
end
if published > pub and published <= seq then pub = published end
redis.call('HSET', KEYS[1], 'seq', string.format('%d', seq), 'wm', string.format('%d', wm),
  'entries', string.format('%d', entries + added), 'pub', string.format('%d', pub),
  'clk', string.format('%d', clk), 'raw', string.format('%d', rawhw))
if cur[8] then redis.call('HDEL', KEYS[1], 'busy') end
for id, st in pairs(src) do
  if st.gone then
    redis.call('HDEL', SK, id)
  elseif st.dirty then
    redis.call('HSET', SK, id, string.format('%d,%d,%d,%d', st.h, st.g, st.b, st.l))
  end
end
local res = {string.format('%d', seq), string.format('%d', wm), added}
for i = 1, #out do res[#res + 1] = out[i] end
return res
