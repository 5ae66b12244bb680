-- Atomic commit of one batch of one ladder (see redis_store.py for the key layout).
-- Checks first, writes after: a refused commit writes nothing.
--
-- KEYS: 1 players hash, 2 effects hash, 3 leaderboard zset, 4 meta hash (field 'applied':
--       matches applied to the generation so far, the watermark that tells "lost" from
--       "new"; 'p:<partition>': offset after the last record applied), all of the generation
--       written, 5 the ladder's control hash, 6 its freeze key, 7 the activity zset and 8 the
--       seasons list of the generation, then the marker key of each marker id, then the
--       history key of each history id, then the marker key of each produced match (to
--       shrink), then (with `season`) the key that keeps the ending season's leaderboard, in
--       order: every key the script touches, all with the ladder's hash tag (one cluster slot).
-- ARGV: 1 the commit as one msgpack map (packed with raw strings, which cmsgpack reads;
--       `commit_args` in redis_store.py builds it):
--         generation       the generation the keys are of
--         mode             'live' or 'staging': which generation it must be
--         marker_ttl       seconds a new marker lives (0 = no expiry)
--         history_cap      entries a history list keeps
--         ids              player/effect id per write
--         is_effect        per write, true = effects hash
--         expected         per write, the stored version it expects (0 = absent)
--         states           per write, the packed state to store
--         scores           per write, leaderboard score as a decimal string (exact: the
--                          client's shortest round-trip repr) or nil (= not on the leaderboard:
--                          a player is removed from it, from the activity zset too)
--         activity         nil, or per write the player's last match for the activity zset
--                          (nil for writes not ranked)
--         season           nil, or the id of a season-start record: the leaderboard is copied
--                          to the last key first and the id appended to the seasons list
--         events           packed rating-changed events, each once
--         marker_ids       match ids
--         marker_sizes     events per marker: marker m stores the next marker_sizes[m]
--                          events (from 1 on) as one msgpack array
--         history_ids      player ids
--         history_sizes    entries per history list
--         history_entries  for each history list in turn, its entries (oldest first) as
--                          1-based indices into events
--         positions        map partition → offset after the batch's last record of it
-- A produced match's marker is shrunk to an empty msgpack array (its events are with the
-- broker: nothing to re-emit), keeping its expiry (KEEPTTL) and only if it still exists (XX).
-- Returns {'ok'} or a refusal (stream_rater/store/status.py): {'applied', match id} (a marker
-- exists), {'conflict', id} (a write whose stored version is not the expected one),
-- {'generation', g} / {'gone', g} (see wrong_generation) or {'frozen'} (a re-rate is
-- switching the live generation).
local CHUNK = 1000  -- values per command: unpack() is limited by the Lua stack
local PAIRS = CHUNK / 2

local args = cmsgpack.unpack(ARGV[1])
local ids, is_effect, expected = args.ids, args.is_effect, args.expected
local states, scores = args.states, args.scores
local events, marker_ids, marker_sizes = args.events, args.marker_ids, args.marker_sizes
local history_ids, history_sizes, entries = args.history_ids, args.history_sizes, args.history_entries
local FIXED = 8
local last_shrink = #KEYS - (args.season and 1 or 0)

local refused = wrong_generation(KEYS[5], args)
if refused then return refused end
if args.mode == 'live' and redis.call('EXISTS', KEYS[6]) == 1 then return {'frozen'} end

-- One EXISTS per chunk of markers; only if one exists, which one.
for i = 1, #marker_ids, CHUNK do
  local j = math.min(i + CHUNK - 1, #marker_ids)
  if redis.call('EXISTS', unpack(KEYS, FIXED + i, FIXED + j)) > 0 then
    for m = i, j do
      if redis.call('EXISTS', KEYS[FIXED + m]) == 1 then return {'applied', marker_ids[m]} end
    end
  end
end

-- The writes to each hash (players, effects), as indices into the per-write arrays.
local writes = {{}, {}}
for w = 1, #ids do
  local of = writes[is_effect[w] and 2 or 1]
  of[#of + 1] = w
end

-- One HMGET per chunk of each hash's writes: the id of the first write whose stored version
-- (the state's 5th field; 0 when absent) is not the expected one, or nil.
local function stale(hash, of)
  for i = 1, #of, CHUNK do
    local j = math.min(i + CHUNK - 1, #of)
    local fields = {}
    for x = i, j do fields[#fields + 1] = ids[of[x]] end
    local stored = redis.call('HMGET', hash, unpack(fields))
    for x = 1, #fields do
      local w = of[i + x - 1]
      local version = 0
      if stored[x] then version = cmsgpack.unpack(stored[x])[5] end
      if version ~= expected[w] then return ids[w] end
    end
  end
  return nil
end

for h = 1, 2 do
  local id = stale(KEYS[h], writes[h])
  if id then return {'conflict', id} end
end

-- Every check passed: the writes begin. A season start first keeps the ending season's board.
if args.season then
  local archive = KEYS[#KEYS]
  redis.call('DEL', archive)
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('COPY', KEYS[3], archive) end
  redis.call('RPUSH', KEYS[8], args.season)
end

-- `command key first[w] second[w] …` for the writes w of `of`, one call per chunk of pairs.
local function paired(command, key, of, first, second)
  for i = 1, #of, PAIRS do
    local values = {}
    for x = i, math.min(i + PAIRS - 1, #of) do
      values[#values + 1] = first[of[x]]
      values[#values + 1] = second[of[x]]
    end
    redis.call(command, key, unpack(values))
  end
end

local scored, unranked = {}, {}
for h = 1, 2 do
  paired('HSET', KEYS[h], writes[h], ids, states)
end
for _, w in ipairs(writes[1]) do
  if scores[w] then scored[#scored + 1] = w else unranked[#unranked + 1] = ids[w] end
end
paired('ZADD', KEYS[3], scored, scores, ids)
if #unranked > 0 then
  for i = 1, #unranked, CHUNK do
    local j = math.min(i + CHUNK - 1, #unranked)
    redis.call('ZREM', KEYS[3], unpack(unranked, i, j))
    redis.call('ZREM', KEYS[7], unpack(unranked, i, j))
  end
end
if args.activity then
  local active = {}
  for _, w in ipairs(scored) do
    if args.activity[w] then active[#active + 1] = w end
  end
  paired('ZADD', KEYS[7], active, args.activity, ids)
end

-- Shrinks first, so that a marker this commit writes anew is never shrunk.
local shrunk = array_header(0)
for x = FIXED + #marker_ids + #history_ids + 1, last_shrink do
  redis.call('SET', KEYS[x], shrunk, 'XX', 'KEEPTTL')
end

local ttl = args.marker_ttl
local e = 1
for m = 1, #marker_ids do
  local value = array_header(marker_sizes[m]) .. table.concat(events, '', e, e + marker_sizes[m] - 1)
  if ttl > 0 then
    redis.call('SET', KEYS[FIXED + m], value, 'EX', ttl)
  else
    redis.call('SET', KEYS[FIXED + m], value)
  end
  e = e + marker_sizes[m]
end
redis.call('HINCRBY', KEYS[4], 'applied', #marker_ids)
for partition, offset in pairs(args.positions) do
  local field = 'p:' .. partition
  if tonumber(redis.call('HGET', KEYS[4], field) or '0') < offset then
    redis.call('HSET', KEYS[4], field, offset)
  end
end

-- A list is trimmed only once it is longer than the cap (LPUSH answers the new length).
local k = 1
for h = 1, #history_ids do
  local key = KEYS[FIXED + #marker_ids + h]
  local last = k + history_sizes[h] - 1
  local length = 0
  while k <= last do
    local values = {}
    for x = k, math.min(k + CHUNK - 1, last) do
      values[#values + 1] = events[entries[x]]
    end
    length = redis.call('LPUSH', key, unpack(values))
    k = k + #values
  end
  if length > args.history_cap then
    redis.call('LTRIM', key, 0, args.history_cap - 1)
  end
end

return {'ok'}
