-- Atomic commit of one batch of one ladder (see redis_store.py for the key layout).
-- Checks first, writes after: a refused commit writes nothing.
--
-- KEYS: 1 players hash, 2 effects hash, 3 leaderboard zset, 4 meta hash (field 'applied':
--       matches applied to the generation so far, the watermark that tells "lost" from
--       "new"; 'p:<partition>': offset after the last record applied), all of the generation
--       written, 5 the ladder's control hash, 6 its freeze key, then the marker key of each
--       marker id, then the history key of each history id, then the marker key of each
--       produced match (to shrink), in order: every key the script touches, all with the
--       ladder's hash tag (one cluster slot).
-- ARGV: 1 the batch as one msgpack array (packed with raw strings, which cmsgpack reads):
--         1 ids            player/effect id per write
--         2 is_effect      per write, true = effects hash
--         3 expected       per write, the stored version it expects (0 = absent)
--         4 states         per write, the packed state to store
--         5 scores         per write, leaderboard score or nil (= not on the leaderboard)
--         6 events         packed rating-changed events, each once
--         7 marker_ids     match ids
--         8 marker_counts  events per marker: marker m stores the next marker_counts[m]
--                          events (from 1 on) as one msgpack array
--         9 history_ids    player ids
--        10 history_counts entries per history list
--        11 entries        for each history list in turn, its entries (oldest first) as
--                          1-based indices into events
--       2 marker ttl (s, 0 = keep), 3 history cap, 4 the generation the keys are of,
--       5 'live' or 'staging' (which generation it must be), 6 msgpack [partition, offset, …].
-- A produced match's marker is shrunk to an empty msgpack array (its events are with the
-- broker: nothing to re-emit), keeping its expiry (KEEPTTL) and only if it still exists (XX).
-- Returns {'ok'}, {'applied', m} (m = index of an already-applied marker),
-- {'conflict', id} (a write whose stored version is not the expected one),
-- {'generation', g} (not the expected generation; g as in read.lua) or {'frozen'} (a re-rate
-- is switching the live generation).
local CHUNK = 1000  -- values per LPUSH: unpack() is limited by the Lua stack

local batch = cmsgpack.unpack(ARGV[1])
local ids, is_effect, expected, states, scores = batch[1], batch[2], batch[3], batch[4], batch[5]
local events, marker_ids, marker_counts = batch[6], batch[7], batch[8]
local history_ids, history_counts, entries = batch[9], batch[10], batch[11]
local ttl, cap = tonumber(ARGV[2]), tonumber(ARGV[3])
local FIXED = 6

local current = current_generation(KEYS[5], ARGV[5])
if current ~= tonumber(ARGV[4]) then return {'generation', current} end
if ARGV[5] == 'live' and redis.call('EXISTS', KEYS[6]) == 1 then return {'frozen'} end

for m = 1, #marker_ids do
  if redis.call('EXISTS', KEYS[FIXED + m]) == 1 then
    return {'applied', m}
  end
end

for w = 1, #ids do
  local hash = is_effect[w] and KEYS[2] or KEYS[1]
  local stored = redis.call('HGET', hash, ids[w])
  local version = 0
  if stored then version = cmsgpack.unpack(stored)[5] end
  if version ~= expected[w] then
    return {'conflict', ids[w]}
  end
end

for w = 1, #ids do
  redis.call('HSET', is_effect[w] and KEYS[2] or KEYS[1], ids[w], states[w])
  if scores[w] then
    redis.call('ZADD', KEYS[3], string.format('%.17g', scores[w]), ids[w])
  end
end

-- Shrinks first, so that a marker this commit writes anew is never shrunk.
local shrunk = array_header(0)
for x = FIXED + #marker_ids + #history_ids + 1, #KEYS do
  redis.call('SET', KEYS[x], shrunk, 'XX', 'KEEPTTL')
end

local e = 1
for m = 1, #marker_ids do
  local value = array_header(marker_counts[m]) .. table.concat(events, '', e, e + marker_counts[m] - 1)
  if ttl > 0 then
    redis.call('SET', KEYS[FIXED + m], value, 'EX', ttl)
  else
    redis.call('SET', KEYS[FIXED + m], value)
  end
  e = e + marker_counts[m]
end
redis.call('HINCRBY', KEYS[4], 'applied', #marker_ids)
local positions = cmsgpack.unpack(ARGV[6])
for p = 1, #positions, 2 do
  local field = 'p:' .. positions[p]
  if tonumber(redis.call('HGET', KEYS[4], field) or '0') < positions[p + 1] then
    redis.call('HSET', KEYS[4], field, positions[p + 1])
  end
end

local k = 1
for h = 1, #history_ids do
  local key = KEYS[FIXED + #marker_ids + h]
  local last = k + history_counts[h] - 1
  while k <= last do
    local values = {}
    for x = k, math.min(k + CHUNK - 1, last) do
      values[#values + 1] = events[entries[x]]
    end
    redis.call('LPUSH', key, unpack(values))
    k = k + #values
  end
  redis.call('LTRIM', key, 0, cap - 1)
end

return {'ok'}
