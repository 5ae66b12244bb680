-- Atomic commit of one batch of one or more ladders (see keys.py for the key layout):
-- each ladder's part is checked and written on its own — checks first, writes after, so a
-- refused part writes nothing — and the parts of the other ladders go on.
--
-- KEYS: each ladder's keys in turn: 1 players hash, 2 effects hash, 3 leaderboard zset, 4 meta
--       hash (field 'applied': matches applied to the generation so far, the watermark that
--       tells "lost" from "new"; 'p:<partition>': offset after the last record applied), 5 the
--       ladder's control hash, 6 its freeze key, 7 the activity zset, 8 the seasons list, 9 the
--       markers hash, 10 the unproduced-events hash and 11 the markers' expiry zset of the
--       generation written, then the history key of each history id, then each scorer's quality
--       sums hash and window list, then (with `season`) the keys that keep the ending season's
--       leaderboard and its players' states, in order: every key the script
--       touches, all of one ladder with its hash tag (one cluster slot; a call spans several
--       ladders only on a single Redis).
-- ARGV: per ladder, its commit as one msgpack map (packed with raw strings, which cmsgpack
--       reads; `commit_args` in scripts.py builds it):
--         keys             how many of KEYS are the ladder's
--         generation       the generation the keys are of
--         mode             'live' or 'staging': which generation it must be
--         ids              player/effect id per write
--         is_effect        per write, true = effects hash
--         expected         per write, the stored version it expects (0 = absent)
--         watermark        nil, or the watermark of this generation in the read the commit
--                          was computed from (nil when that read was of another generation):
--                          if the meta hash still shows it, no state changed
--                          since (every commit that writes applies a match, see store/base.py)
--                          and the versions are not checked one by one
--         states           per write, the packed state to store
--         scores           per write, leaderboard score as a decimal string (exact: the
--                          client's shortest round-trip repr; cheaper for Redis than a number,
--                          which it would print as '%.17g') or nil (= not on the leaderboard:
--                          a player is removed from it, from the activity zset too)
--         activity         nil, or per write the player's last match for the activity zset
--                          (nil for writes not ranked)
--         season           nil, or the id of a season-start record: the leaderboard and the
--                          players hash are copied to the last two keys first and the id
--                          appended to the seasons list
--         marker_ids       the matches applied: each gets a marker, whose value is
--         placings         per match, its rated players' [player id, team rank] (packed), or
--                          '' (a match without rated players' events): the index by match
--         unproduced_at    the matches among them with events, as indices into marker_ids, and
--         unproduced       their events, each match's as one msgpack array, kept until produced
--         produced         match ids of earlier commits whose events are with the broker:
--                          their unproduced events are dropped (the markers stay)
--         expiry           nil (markers kept forever), or the score of this commit's markers
--                          in the expiry zset (when they expire, in seconds) and
--         expiring         the member: the marker ids packed (unique per commit)
--         now              the client's clock: markers whose expiry is past are removed
--         history_cap      entries a history list keeps
--         history_sizes    entries per history list, in KEYS order
--         history          for each history list in turn, its new entries (oldest first),
--                          each a packed rating-changed event
--         positions        map partition → offset after the batch's last record of it
--         quality_add      per scorer (its two keys follow the history keys: sums hash,
--                          window list), its sums' increments as field, decimal string, …
--         quality_window   per scorer, the batch's match scores (packed), oldest first,
--         quality_cap      pushed onto the window list, which keeps the newest quality_cap
-- Returns per ladder {'ok'} or a refusal (stream_rater/store/status.py): {'applied', match id}
-- (a marker exists), {'conflict', id} (a write whose stored version is not the expected one),
-- {'generation', g} / {'gone', g} (see wrong_generation) or {'frozen'} (a re-rate is
-- switching the live generation).
local CHUNK = 1000  -- values per command: unpack() is limited by the Lua stack
local PAIRS = CHUNK / 2 - 1  -- pairs per command, leaving room for the head pair
-- The players, effects and markers hashes have a field '' (no id is empty) whose value is
-- longer than Redis's hash-max-listpack-value (64 by default), written with their first
-- entries, so that they are hash tables from the start: a small hash in Redis's compact
-- listpack form is searched linearly, a cost per lookup that grows with the hash.
local HASH_TABLE = string.rep('-', 128)

-- `command key values…` in chunks of at most CHUNK values.
local function chunked(command, key, values)
  for i = 1, #values, CHUNK do
    redis.call(command, key, unpack(values, i, math.min(i + CHUNK - 1, #values)))
  end
end

-- `command key first[w] second[w] …` for the writes w of `of`, one call per chunk of pairs;
-- `head` (a table of values, or nil) goes first in every call.
local function paired(command, key, of, first, second, head)
  for i = 1, #of, PAIRS do
    local values = head and {unpack(head)} or {}
    for x = i, math.min(i + PAIRS - 1, #of) do
      values[#values + 1] = first[of[x]]
      values[#values + 1] = second[of[x]]
    end
    redis.call(command, key, unpack(values))
  end
end

-- One HMGET per chunk of each hash's writes: the id of the first write whose stored version
-- (the state's 5th field; 0 when absent) is not the expected one, or nil.
local function stale(hash, of, ids, expected)
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

-- One ladder's commit: its keys are KEYS[o + 1] … KEYS[o + args.keys]. Returns its reply.
local function commit(o, args)
  local function key(n) return KEYS[o + n] end
  local ids, is_effect, expected = args.ids, args.is_effect, args.expected
  local states, scores = args.states, args.scores
  local marker_ids, history_sizes, history = args.marker_ids, args.history_sizes, args.history
  local MARKERS, UNPRODUCED, EXPIRY, FIXED = key(9), key(10), key(11), 11

  local refused = wrong_generation(key(5), args)
  if refused then return refused end
  if args.mode == 'live' and redis.call('EXISTS', key(6)) == 1 then return {'frozen'} end

  -- One HMGET of the markers per chunk of match ids.
  for i = 1, #marker_ids, CHUNK do
    local j = math.min(i + CHUNK - 1, #marker_ids)
    local found = redis.call('HMGET', MARKERS, unpack(marker_ids, i, j))
    for m = 1, #found do
      if found[m] then return {'applied', marker_ids[i + m - 1]} end
    end
  end

  -- The writes to each hash (players, effects), as indices into the per-write arrays.
  local writes = {{}, {}}
  for w = 1, #ids do
    local of = writes[is_effect[w] and 2 or 1]
    of[#of + 1] = w
  end

  local watermark = tonumber(redis.call('HGET', key(4), 'applied') or '0')
  if args.watermark == nil or watermark ~= args.watermark then
    for h = 1, 2 do
      local id = stale(key(h), writes[h], ids, expected)
      if id then return {'conflict', id} end
    end
  end

  -- Every check passed: the writes begin. A season start first keeps the ending season's board
  -- and every player's state as the season left it.
  if args.season then
    local board, states = key(args.keys - 1), key(args.keys)
    redis.call('DEL', board, states)
    if redis.call('EXISTS', key(3)) == 1 then redis.call('COPY', key(3), board) end
    if redis.call('EXISTS', key(1)) == 1 then redis.call('COPY', key(1), states) end
    redis.call('RPUSH', key(8), args.season)
  end

  local scored, unranked = {}, {}
  for h = 1, 2 do
    paired('HSET', key(h), writes[h], ids, states, {'', HASH_TABLE})
  end
  for _, w in ipairs(writes[1]) do
    if scores[w] then scored[#scored + 1] = w else unranked[#unranked + 1] = ids[w] end
  end
  paired('ZADD', key(3), scored, scores, ids)
  chunked('ZREM', key(3), unranked)
  chunked('ZREM', key(7), unranked)
  if args.activity then
    local active = {}
    for _, w in ipairs(scored) do
      if args.activity[w] then active[#active + 1] = w end
    end
    paired('ZADD', key(7), active, args.activity, ids)
  end

  -- Markers past their expiry go first (a commit adds one expiry entry and removes up to two,
  -- so the zset never grows beyond the markers alive), with any events they still held.
  for _, expired in ipairs(redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', args.now, 'LIMIT', 0, 2)) do
    local gone = cmsgpack.unpack(expired)
    chunked('HDEL', MARKERS, gone)
    chunked('HDEL', UNPRODUCED, gone)
    redis.call('ZREM', EXPIRY, expired)
  end

  -- Dropped first, so that events this commit keeps anew are never dropped.
  chunked('HDEL', UNPRODUCED, args.produced)
  local marked = {'', HASH_TABLE}
  for m = 1, #marker_ids do
    marked[2 * m + 1] = marker_ids[m]
    marked[2 * m + 2] = args.placings[m]
  end
  chunked('HSET', MARKERS, marked)
  local kept = {}
  for m = 1, #args.unproduced_at do
    kept[2 * m - 1] = marker_ids[args.unproduced_at[m]]
    kept[2 * m] = args.unproduced[m]
  end
  chunked('HSET', UNPRODUCED, kept)
  if args.expiry and #marker_ids > 0 then
    redis.call('ZADD', EXPIRY, args.expiry, args.expiring)
  end
  redis.call('HINCRBY', key(4), 'applied', #marker_ids)
  for partition, offset in pairs(args.positions) do
    local field = 'p:' .. partition
    if tonumber(redis.call('HGET', key(4), field) or '0') < offset then
      redis.call('HSET', key(4), field, offset)
    end
  end

  -- A list is trimmed only once it is longer than the cap (LPUSH answers the new length).
  local k = 1
  for h = 1, #history_sizes do
    local list = key(FIXED + h)
    local last = k + history_sizes[h] - 1
    local length = 0
    while k <= last do
      local j = math.min(k + CHUNK - 1, last)
      length = redis.call('LPUSH', list, unpack(history, k, j))
      k = j + 1
    end
    if length > args.history_cap then
      redis.call('LTRIM', list, 0, args.history_cap - 1)
    end
  end

  -- Prediction quality, exactly once with the batch's markers.
  for s = 1, #args.quality_add do
    local sums, window = key(FIXED + #history_sizes + 2 * s - 1), key(FIXED + #history_sizes + 2 * s)
    local add = args.quality_add[s]
    for i = 1, #add, 2 do redis.call('HINCRBYFLOAT', sums, add[i], add[i + 1]) end
    if #args.quality_window[s] > 0 then
      chunked('LPUSH', window, args.quality_window[s])
      redis.call('LTRIM', window, 0, args.quality_cap - 1)
    end
  end

  return {'ok'}
end

local replies, o = {}, 0
for a = 1, #ARGV do
  local args = cmsgpack.unpack(ARGV[a])
  replies[a] = commit(o, args)
  o = o + args.keys
end
return replies
