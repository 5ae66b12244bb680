-- Atomic commit of one batch of one or more ladders (see keys.py for the key layout, stored format 3):
-- each ladder's part is checked and written on its own — checks first, writes after, so a
-- refused part writes nothing — and the parts of the other ladders go on.
--
-- KEYS: each ladder's keys in turn: first the K_FIXED named in K (the header scripts.py
--       generates from keys.COMMIT_KEYS): effects hash, lb leaderboard zset, meta hash (field
--       'applied': matches applied to the generation so far, the watermark that tells "lost"
--       from "new"; 'p:<partition>': offset after the last record applied; 'model' of the
--       history entries), the ladder's control hash, its frozen key (or hold set: control.lua),
--       act the activity zset, the seasons list, the unproduced-events hash and the older one
--       (keys.py), the ladder's voids hash, then the `buckets[1]` players buckets
--       written (states and histories), the `buckets[2]` markers slots of the last marker TTL
--       (keys.py), then each scorer's quality sums hash and window list, then (with `season`) the key that
--       keeps the ending season's leaderboard and the archive bucket of each players bucket, in
--       order: every key the script touches, all of one ladder with its hash tag (one cluster
--       slot; a call spans several ladders only on a single Redis).
-- ARGV: per ladder, its commit as one msgpack map (packed with raw strings, which cmsgpack
--       reads; `commit_args` in scripts.py builds it), then its `values` arguments, which the
--       script passes on to commands as they are (never decoded nor copied into tables): per
--       write its packed state, per history its chunk, per applied match its id and marker, per
--       match with events its id and events, the produced match ids, then each scorer's window
--       entries, in that order (`Values`), and last the writes' leaderboard scores as numbers
--       (one msgpack array, nil where `scores` has nil: what the running sum adds, with no
--       decimal to parse). The map's fields:
--         keys             how many of KEYS are the ladder's
--         generation       the generation the keys are of
--         mode             'live' or 'staging': which generation it must be
--         ids              player/effect id per write
--         bucket           per write, the index of its players bucket among the players keys
--                          (0: an effect, in the effects hash)
--         expected         per write, the stored version it expects (0 = absent), as one
--                          msgpack array decoded only when the versions are checked
--         watermark        nil, or the watermark of this generation in the read the commit
--                          was computed from: if the meta hash still shows it, no state changed
--                          since (every commit that writes applies a match, see store/base.py)
--                          and the versions are not checked one by one
--         unread           nil, or (a commit computed without a read, from the states its
--                          worker holds since its own last commit at `watermark`) per partition
--                          the offset of the batch's first record in it: refused ({'stale'})
--                          unless the watermark is unchanged, no record is below its partition's
--                          position and no match of it is marked or voided (the read's checks)
--         values           how many arguments follow the map
--         scores           per write, leaderboard score as a decimal string (exact) or nil
--                          (= not on the leaderboard: removed from it and the activity zset)
--         activity         nil, or per write the player's last match for the activity zset
--         trim_since       nil, or the oldest last match that keeps a player on the leaderboard
--                          (the ladder's activity rule as of the commit's clock): older ones
--                          are trimmed off it (`rank`); 'lb:sum' in the meta hash keeps the
--                          sum of the leaderboard's scores
--         season           nil, or the id of a season-start record: the leaderboard is copied
--                          to its key and the written players' states to the archive buckets
--                          first, and the id appended to the seasons list
--         markers          how many matches are applied (each a pair of values: its id and its
--                          marker, its placings packed or ''), written into the slot of index
--         slot             among the markers slots, which then expires in
--         slot_ttl         seconds (nil: never)
--         unproduced       how many of them have events (each a pair of values: its id and its
--                          events as one msgpack array), kept until produced
--         staged           nil, or (then `unproduced` is 0) the index among the ladder's keys of
--                          the hash in which the same transaction staged the events kept until
--                          produced (match id → events, and the field '' that makes it a hash
--                          table, store.py), so that they reach Redis without going through
--                          Lua: it becomes the unproduced hash (RENAME) where that holds
--                          nothing else, else its fields are copied in; a refused commit drops it
--         format           nil, or 2: the store is in stored format 2 (store/deployment.py),
--                          which workers of the release before may share and read: no events
--                          move aside to the older hash (`stage`), no field '' in a new
--                          quality sums hash (`add_quality`)
--         produced         how many match ids of earlier commits (values) have their events with
--                          the broker: their unproduced events are dropped (the markers stay)
--         history_fields   per player with history, the field of its ring it writes (its value
--                          the commit's state version, then its entries), in
--         history_bucket   its players bucket (index); with_history: per write, the index of its
--                          player's history (0: none), written in the same HSET as the state
--         model            nil, or the model of the history entries (meta field 'model')
--         positions        map partition → offset after the batch's last record of it
--         quality_add      per scorer, its sums' increments as field, decimal string, …
--         quality_window   per scorer, how many of the batch's match scores (values, packed,
--                          oldest first) are pushed onto the window list, which keeps the
--         quality_cap      newest quality_cap
--         boards           nil, or (a ladder with modes) its modes in the commit, and per write
--         board, board_ids the index of its mode's board and its id there (`rank_modes`)
--         previous         nil, or per write what its board held of it when the client's last
--         cards            commit left it, if the client knows (`store.redis.boards`): its score
--                          (a number), false (not on it) or nil (not known: asked with ZMSCORE);
--                          used only where no commit came since the read (the watermark) and
--                          the board's ZCARD is cards[board index] (a trim between commits takes
--                          players off without a commit): the running sum then adds up the same
--                          numbers, in the same order, without a ZMSCORE of those known
-- Returns per ladder {'ok', ZCARD of each board after the commit} or a refusal
-- (stream_rater/store/status.py): {'applied', match id}
-- (a marker exists), {'stale'} (an unread commit whose worker's states are not current), {'conflict', id} (a write whose stored version is not the expected
-- one), {'generation', g} / {'gone', g} (see wrong_generation) or {'frozen'}.
local CHUNK = 1000  -- values per command: unpack() is limited by the Lua stack
-- The effects and unproduced hashes have a field '' (no effect is named so) whose value is longer than Redis's
-- hash-max-listpack-value (also as deploy/README.md recommends it), so that it is a hash table from its first entry (it is never
-- bucketed: a ladder has few effects, each read by many matches). Made where written only: 4096
-- bytes made one at a time.
local function hash_table() return string.rep('-', 4096) end

-- `command key values…` in chunks of at most CHUNK values.
local function chunked(command, key, values)
  for i = 1, #values, CHUNK do
    redis.call(command, key, unpack(values, i, math.min(i + CHUNK - 1, #values)))
  end
end

-- `of` (write indices) grouped by `bucket[w]`: a table bucket index → list of writes.
local function by_bucket(of, bucket)
  local groups = {}
  for _, w in ipairs(of) do
    local b = bucket[w]
    local group = groups[b]
    if not group then group = {}; groups[b] = group end
    group[#group + 1] = w
  end
  return groups
end

-- The stored values of the ids of writes `of` in `hash` (HMGET, in chunks).
local function stored(hash, of, ids)
  local out = {}
  for i = 1, #of, CHUNK do
    local fields = {}
    for x = i, math.min(i + CHUNK - 1, #of) do fields[#fields + 1] = ids[of[x]] end
    for _, v in ipairs(redis.call('HMGET', hash, unpack(fields))) do out[#out + 1] = v end
  end
  return out
end

-- The id of the first write of `of` in `hash` whose stored version (the state's 5th field;
-- 0 when absent) is not the expected one, or nil.
local function stale(hash, of, ids, expected)
  local values = stored(hash, of, ids)
  for x, w in ipairs(of) do
    local version = 0
    if values[x] then version = cmsgpack.unpack(values[x])[5] end
    if version ~= expected[w] then return ids[w] end
  end
  return nil
end

-- The positions in ARGV of the values of the ladder's commit whose map is ARGV[a]: value i of
-- a kind is ARGV[V.<kind> + i] (the pairs' i-th id ARGV[V.<kind> + 2i - 1]).
local function Values(a, args)
  local V = {states = a}
  V.history = V.states + #args.ids
  V.markers = V.history + #args.history_fields
  V.unproduced = V.markers + 2 * args.markers
  V.produced = V.unproduced + 2 * args.unproduced
  V.quality = V.produced + args.produced
  return V
end

-- `command key` with the arguments ARGV[from] … ARGV[to], in chunks of CHUNK (even: a chunk of
-- pairs holds whole pairs).
local function ranged(command, key, from, to)
  for i = from, to, CHUNK do
    redis.call(command, key, unpack(ARGV, i, math.min(i + CHUNK - 1, to)))
  end
end

-- The ids of the commit's applied matches (`Values`), and 1 … their number.
local function marker_ids(args, V)
  local ids, at = {}, {}
  for m = 1, args.markers do ids[m] = ARGV[V.markers + 2 * m - 1]; at[m] = m end
  return ids, at
end

-- HSET of the writes `of` into `hash`, their ids and values ARGV[at + w], `head` (a pair, or
-- nil) first.
local function hset(hash, of, ids, at, head)
  local PAIRS = CHUNK / 2 - 1
  for i = 1, #of, PAIRS do
    local args = head and {head[1], head[2]} or {}
    for x = i, math.min(i + PAIRS - 1, #of) do
      args[#args + 1] = ids[of[x]]
      args[#args + 1] = ARGV[at + of[x]]
    end
    redis.call('HSET', hash, unpack(args))
  end
end

-- Whether a live commit must wait: its ladder is frozen (a string: a re-rate is switching it),
-- or it writes a player held (a set: players whose correction events are not sent yet).
local function held(frozen, args)
  if redis.call('TYPE', frozen).ok ~= 'set' then return true end
  for w = 1, #args.ids do
    if args.bucket[w] > 0 and redis.call('SISMEMBER', frozen, args.ids[w]) == 1 then return true end
  end
  return false
end

-- The id of the first of the commit's matches (`ids`, at `at`) marked in one of the slots, or nil.
local function first_marked(key, B, args, ids, at)
  for s = 1, args.buckets[2] do
    local found = redis.call('EXISTS', key(B.markers + s)) == 1 and stored(key(B.markers + s), at, ids) or {}
    for m = 1, #ids do
      if found[m] then return ids[m] end
    end
  end
  return nil
end

-- Whether an unread commit (`args.unread`) finds what a read would have told its worker
-- changed: a record below its partition's position, or a match of it voided or marked.
local function changed(key, args, B, V)
  for partition, offset in pairs(args.unread) do
    if offset < tonumber(redis.call('HGET', key(K.meta), 'p:' .. partition) or '0') then return true end
  end
  local ids, at = marker_ids(args, V)
  if redis.call('EXISTS', key(K.voids)) == 1 then
    for _, void in ipairs(stored(key(K.voids), at, ids)) do
      if void then return true end
    end
  end
  return first_marked(key, B, args, ids, at) ~= nil
end

-- The refusal of a commit of ladder keys `key` (a function n → KEYS) and `args`, or nil.
local function refusal(key, args, players, writes, B, V)
  local refused = wrong_generation(key(K.control), args)
  if refused then return refused end
  if args.mode == 'live' and redis.call('EXISTS', key(K.frozen)) == 1 and held(key(K.frozen), args) then
    return {'frozen'}
  end
  -- An unchanged watermark means no commit since the read, which found no marker of these.
  local watermark = tonumber(redis.call('HGET', key(K.meta), 'applied') or '0')
  args.unchanged = args.watermark ~= nil and watermark == args.watermark
  if args.unread and not (args.unchanged and not changed(key, args, B, V)) then return {'stale'} end
  if not args.unchanged then
    local ids, at = marker_ids(args, V)
    local marked = first_marked(key, B, args, ids, at)
    if marked then return {'applied', marked} end
    local expected = cmsgpack.unpack(args.expected)
    for b, of in pairs(by_bucket(players, args.bucket)) do
      local id = stale(key(B.players + b), of, args.ids, expected)
      if id then return {'conflict', id} end
    end
    local id = stale(key(K.effects), writes, args.ids, expected)
    if id then return {'conflict', id} end
  end
  return nil
end

-- ---- The eligible leaderboard (rank-store; eligible.lua has the helpers) ----------------
-- Players idle since `trim_since` leave the leaderboard at most this many per commit (bounded
-- work: the worker's trim takes the rest, and reads skip the few left, see board.lua).
local TRIM_STEP = 256

-- The sum of the scores on `board` of `members` (the writes `of`), added up in their order as
-- `board_sum` adds them: from `previous` (per write a number, false or nil: see the header)
-- where `known`, else, and for the writes it does not know, from ZMSCORE.
local function old_sum(board, members, of, previous, known)
  if not known then return board_sum(board, members) end
  local asked, a = {}, 0
  for x = 1, #of do
    if previous[of[x]] == nil then a = a + 1; asked[a] = members[x] end
  end
  local found, k, sum = a > 0 and board_scores(board, asked) or {}, 0, 0
  for x = 1, #of do
    local score = previous[of[x]]
    if score == nil then k = k + 1; score = found[k] end
    if score then sum = sum + score end
  end
  return sum
end

-- The leaderboard and activity zsets after the player writes `of`, and the leaderboard's sum:
-- a write is ranked with a score unless it is idle since `trim_since` (a late match of an idle
-- player); then players idle since `trim_since` are trimmed off. `numbers`: per write its
-- score as a number, what the sum adds; `b`: the board's index in `cards`. Returns the
-- board's ZCARD after.
local function rank(key, args, of, numbers, b)
  local n = #of
  if n == 0 then return redis.call('ZCARD', key(K.lb)) end
  local ids, scores, activity, since = args.ids, args.scores, args.activity, args.trim_since
  local members, scored, unranked, active, added = {}, {}, {}, {}, 0
  local s, u, a = 0, 0, 0  -- the sizes of scored, unranked and active
  for x = 1, n do
    local w = of[x]
    local id, score, last = ids[w], scores[w], activity and activity[w]
    members[x] = id
    if score and not (since and last and last < since) then
      scored[s + 1] = score; scored[s + 2] = id; s = s + 2
      added = added + numbers[w]
      if last then active[a + 1] = last; active[a + 2] = id; a = a + 2 end
    else
      u = u + 1; unranked[u] = id
    end
  end
  local known = args.unchanged and args.previous and redis.call('ZCARD', key(K.lb)) == args.cards[b]
  local removed = old_sum(key(K.lb), members, of, args.previous, known)
  chunked('ZADD', key(K.lb), scored)
  chunked('ZREM', key(K.lb), unranked)
  chunked('ZREM', key(K.act), unranked)
  chunked('ZADD', key(K.act), active)
  redis.call('HINCRBYFLOAT', key(K.meta), BOARD_SUM, board_number(added - removed))
  if since then trim_board(key(K.lb), key(K.act), key(K.meta), since, TRIM_STEP) end
  return redis.call('ZCARD', key(K.lb))
end
-- ---- end of the eligible leaderboard ------------------------------------------------------

-- A markers slot is a listpack while small (a quiet ladder's: compact), and a hash table once it
-- holds SLOT_TABLE markers (the field '', as the unproduced hash's), not only past Redis's
-- hash-max-listpack-entries: every HSET and HMGET of a listpack scans it, so a busy ladder's
-- first batches of each slot did quadratic work. Past 512 fields it is a hash table anyway.
local SLOT_TABLE = 128
local function slot_table(slot, adding)
  local n = redis.call('HLEN', slot)
  if n + adding >= SLOT_TABLE and n <= 512 then redis.call('HSETNX', slot, '', hash_table()) end
end

-- Whether the unproduced-events hash `hash` holds no events (absent, or only its field '').
local function no_events(hash)
  local n = redis.call('HLEN', hash)
  return n == 0 or (n == 1 and redis.call('HEXISTS', hash, '') == 1)
end

-- The events the transaction staged (`staged`) made the unproduced hash (RENAME, its '' too: a
-- hash table). Where that still holds events of earlier commits (a worker produces a batch's
-- events while it commits the next), they move aside to the older hash if it holds none (not
-- in stored format 2: its readers know no older hash); else (the broker lags more) the staged
-- events are copied in.
local function stage(key, args)
  local staged, unproduced, older = key(args.staged), key(K.unproduced), key(K.older)
  if no_events(unproduced) then
    redis.call('RENAME', staged, unproduced)
  elseif not args.format and no_events(older) then
    redis.call('RENAME', unproduced, older)
    redis.call('RENAME', staged, unproduced)
  else
    chunked('HSET', unproduced, redis.call('HGETALL', staged))
    redis.call('DEL', staged)
  end
end

-- The produced matches' events (values `from` … `to`) dropped: from the older hash (if any)
-- first, then, unless they were all there, from the unproduced hash.
local function drop_produced(key, from, to)
  if to < from then return end
  if redis.call('EXISTS', key(K.older)) == 1 then
    local dropped = 0
    for i = from, to, CHUNK do
      dropped = dropped + redis.call('HDEL', key(K.older), unpack(ARGV, i, math.min(i + CHUNK - 1, to)))
    end
    if dropped == to - from + 1 then return end
  end
  ranged('HDEL', key(K.unproduced), from, to)
end

-- The markers (into their slot, which then expires with them), their unproduced events, the
-- watermark and the positions.
local function mark(key, args, B, V)
  -- first: events this commit keeps are never dropped
  drop_produced(key, V.produced + 1, V.produced + args.produced)
  if args.markers > 0 then
    local slot = key(B.markers + args.slot)
    slot_table(slot, args.markers)
    ranged('HSET', slot, V.markers + 1, V.markers + 2 * args.markers)
    if args.slot_ttl then redis.call('EXPIRE', slot, args.slot_ttl) end
  end
  if args.staged then stage(key, args) end
  if args.unproduced > 0 then
    -- The field '' keeps the unproduced hash a hash table: a batch's hundreds of fields in a
    -- listpack would make each HDEL of the next commit scan them all. Written only where it is
    -- not there yet (a 4 KB argument, and a command of the AOF, every commit otherwise).
    redis.call('HSETNX', key(K.unproduced), '', hash_table())
    ranged('HSET', key(K.unproduced), V.unproduced + 1, V.unproduced + 2 * args.unproduced)
  end
  redis.call('HINCRBY', key(K.meta), 'applied', args.markers)
  for partition, offset in pairs(args.positions) do
    local field = 'p:' .. partition
    if tonumber(redis.call('HGET', key(K.meta), field) or '0') < offset then
      redis.call('HSET', key(K.meta), field, offset)
    end
  end
end

-- The players' states and histories, each player's in one HSET (a history without a state
-- written, not the processor's way, on its own). The ladder's keys are KEYS[o + 1] ….
local function write_players(key, o, args, B, players, V)
  local ids, bucket, with, fields = args.ids, args.bucket, args.with_history, args.history_fields
  local states, chunks, first, call, joined = V.states, V.history, o + B.players, redis.call, 0
  local keys, argv = KEYS, ARGV  -- locals: no lookup of the globals per player
  for x = 1, #players do
    local w = players[x]
    local h = with[w]
    if h > 0 then
      call('HSET', keys[first + bucket[w]], ids[w], argv[states + w], fields[h], argv[chunks + h])
      joined = joined + 1
    else
      call('HSET', keys[first + bucket[w]], ids[w], argv[states + w])
    end
  end
  if joined < #fields then
    local done = {}
    for x = 1, #players do done[with[players[x]]] = true end
    for h = 1, #fields do
      if not done[h] then call('HSET', key(B.players + args.history_bucket[h]), fields[h], ARGV[chunks + h]) end
    end
  end
  if args.model then call('HSET', key(K.meta), 'model', args.model) end
end

-- Prediction quality, exactly once with the batch's markers. A sums hash is a hash table from
-- its first write (the field '', no sum's name; not in stored format 2, whose readers take
-- every field for a sum): each of a batch's HINCRBYFLOATs (a few dozen) scanned its listpack twice.
local function add_quality(key, args, B, V)
  local at = V.quality
  for s = 1, #args.quality_add do
    local sums, window = key(B.scorers + 2 * s - 1), key(B.scorers + 2 * s)
    local add = args.quality_add[s]
    if #add > 0 and not args.format and redis.call('EXISTS', sums) == 0 then redis.call('HSET', sums, '', hash_table()) end
    for i = 1, #add, 2 do redis.call('HINCRBYFLOAT', sums, add[i], add[i + 1]) end
    local n = args.quality_window[s]
    if n > 0 then
      ranged('LPUSH', window, at + 1, at + n)
      redis.call('LTRIM', window, 0, args.quality_cap - 1)
    end
    at = at + n
  end
end

-- A season start keeps the ending season's board and the written players' states first.
local function archive(key, args, players, B)
  local board = key(B.season)
  redis.call('DEL', board)
  if redis.call('EXISTS', key(K.lb)) == 1 then redis.call('COPY', key(K.lb), board) end
  for b, of in pairs(by_bucket(players, args.bucket)) do
    local old, fields = stored(key(B.players + b), of, args.ids), {}
    for x, w in ipairs(of) do
      if old[x] then fields[#fields + 1] = args.ids[w]; fields[#fields + 1] = old[x] end
    end
    chunked('HSET', key(B.season + b), fields)
  end
  redis.call('RPUSH', key(K.seasons), args.season)
end

-- A moded ladder's players (`boards`: its modes in the commit; `board`: per write the index of
-- its mode's board; `board_ids`: per write the player id without its mode) each on their mode's
-- board, whose keys (board, activity, running sum) are the last 3 per mode of the ladder's keys.
-- Returns per mode its board's ZCARD after.
local function rank_modes(key, args, players, numbers)
  local first = args.keys - 3 * #args.boards
  local ranked = {ids = args.board_ids, scores = args.scores, activity = args.activity, trim_since = args.trim_since,
                  previous = args.previous, cards = args.cards, unchanged = args.unchanged}
  local groups, cards = by_bucket(players, args.board), {}
  for b = 1, #args.boards do
    local at = {[K.lb] = first + 3 * b - 2, [K.act] = first + 3 * b - 1, [K.meta] = first + 3 * b}
    cards[b] = rank(function(n) return key(at[n] or n) end, ranked, groups[b] or {}, numbers, b)
  end
  return cards
end

-- One ladder's commit: its keys are KEYS[o + 1] … KEYS[o + args.keys], its values follow
-- ARGV[a] (`Values`). Returns its reply.
local function commit(o, a, args)
  local function key(n) return KEYS[o + n] end
  local nb, nm = args.buckets[1], args.buckets[2]
  local B = {players = K_FIXED, markers = K_FIXED + nb, scorers = K_FIXED + nb + nm}
  B.season = B.scorers + 2 * #args.quality_add + 1
  local players, effects, bucket, np, ne = {}, {}, args.bucket, 0, 0
  for w = 1, #args.ids do
    if bucket[w] == 0 then ne = ne + 1; effects[ne] = w else np = np + 1; players[np] = w end
  end
  local V = Values(a, args)
  local refused = refusal(key, args, players, effects, B, V)
  if refused then
    if args.staged then redis.call('DEL', key(args.staged)) end
    return refused
  end

  if args.season then
    -- the ending season's board is the eligible one: every idle player off first
    if args.trim_since then trim_board(key(K.lb), key(K.act), key(K.meta), args.trim_since, -1) end
    archive(key, args, players, B)
  end
  write_players(key, o, args, B, players, V)
  if #effects > 0 then hset(key(K.effects), effects, args.ids, V.states, {'', hash_table()}) end
  local numbers = cmsgpack.unpack(ARGV[a + args.values])  -- the last value (`Values`)
  local cards = args.boards and rank_modes(key, args, players, numbers) or {rank(key, args, players, numbers, 1)}
  mark(key, args, B, V)
  add_quality(key, args, B, V)
  return {'ok', unpack(cards)}
end

local replies, o, a = {}, 0, 1
while a <= #ARGV do
  local args = cmsgpack.unpack(ARGV[a])
  replies[#replies + 1] = commit(o, a, args)
  o = o + args.keys
  a = a + 1 + args.values
end
return replies
