-- Leaderboard reads that count only recently active players (ladder rules; see keys.py
-- for the key layout), done beside the data so that the entries skipped never leave Redis,
-- and done in steps of at most `budget` entries per call, so that a read of a large ladder
-- never blocks Redis for long: the client calls again from `cursor` until the answer is whole.
--
-- KEYS: 1 the leaderboard zset, 2 the activity zset (ranked player → last match), both of one
--       generation of one ladder.
-- ARGV: 1 one msgpack map (raw strings):
--         mode    'top', 'places' or 'totals'
--         since   the oldest last match that counts as active ('totals': absent = everyone)
--         cursor  where this step starts (0 on the first call)
--         budget  most entries this step reads
--         top     ('top', 'above') rows still wanted
--         ids     ('places') the players whose places are wanted
--         path    ('places', after the first call) the path the first call chose
-- 'top' returns {next cursor or -1, id, score, id, score, …}: the next active players of the
-- leaderboard from place `cursor` on, best first (scores as Redis writes them).
-- 'above' returns {next cursor or -1, id, score, …}: the next active players going up the
-- leaderboard from place `cursor` - 1 (nearest first), the read of the players around one.
-- 'places' returns {total active, path, next cursor or -1, count for ids[1], …}: a count is
-- how many active players this step found above the player (the client adds the steps'
-- counts up), -1 for a player who is not ranked or not active. The first call chooses the
-- cheaper path: 'walk' down the leaderboard to the deepest asked player, go through the 'set'
-- of active players, or walk the 'tail' of the leaderboard below the shallowest asked player,
-- whichever is fewer entries. On the 'tail' path a count is of the active players found
-- *below* the player: the client's rank is then total - 1 - that count.
-- 'totals' returns {next cursor or -1, ranked, sum of their scores, active, sum of theirs} of
-- places cursor .. cursor + budget - 1 (sums as strings, "%.17g": a Lua number in a reply
-- would be cut to an integer); the client adds the steps up.
local args = cmsgpack.unpack(ARGV[1])
local board, activity, since = KEYS[1], KEYS[2], args.since
local cursor, budget = args.cursor, args.budget
local CHUNK = 1000

-- Which of `members` (an array) are active: an array of booleans.
local function active_of(members)
  local out = {}
  for i = 1, #members, CHUNK do
    local j = math.min(i + CHUNK - 1, #members)
    local last = redis.call('ZMSCORE', activity, unpack(members, i, j))
    for x = 1, #last do out[i + x - 1] = last[x] and tonumber(last[x]) >= since end
  end
  return out
end

if args.mode == 'top' then
  local out = {-1}
  local found, start, stop = 0, cursor, cursor + budget
  while found < args.top and start < stop do
    local page = redis.call('ZREVRANGE', board, start, math.min(start + CHUNK, stop) - 1, 'WITHSCORES')
    if #page == 0 then return out end
    local members = {}
    for i = 1, #page, 2 do members[#members + 1] = page[i] end
    local active = active_of(members)
    for i = 1, #members do
      if active[i] then
        out[#out + 1] = page[2 * i - 1]
        out[#out + 1] = page[2 * i]
        found = found + 1
        if found == args.top then
          out[1] = start + i
          return out
        end
      end
    end
    start = start + #members
  end
  out[1] = start
  return out
end

if args.mode == 'totals' then
  local ranked, ranked_sum, active, active_sum = 0, 0, 0, 0
  local start, stop = cursor, cursor + budget
  while start < stop do
    local last = math.min(start + CHUNK, stop) - 1
    local page = redis.call('ZRANGE', board, start, last, 'WITHSCORES')
    local members = {}
    for i = 1, #page, 2 do members[#members + 1] = page[i] end
    local counts = since and active_of(members)
    for i = 1, #members do
      local score = tonumber(page[2 * i])
      ranked, ranked_sum = ranked + 1, ranked_sum + score
      if not counts or counts[i] then active, active_sum = active + 1, active_sum + score end
    end
    start = start + #members
    if #members < last - (start - #members) + 1 then
      start = -1
      break
    end
  end
  return {start, ranked, string.format('%.17g', ranked_sum), active, string.format('%.17g', active_sum)}
end

if args.mode == 'above' then
  local out = {-1}
  local found, stop, low = 0, cursor, math.max(0, cursor - budget)
  while found < args.top and stop > low do
    local start = math.max(low, stop - CHUNK)
    local page = redis.call('ZREVRANGE', board, start, stop - 1, 'WITHSCORES')
    if #page == 0 then return out end
    local members = {}
    for i = 1, #page, 2 do members[#members + 1] = page[i] end
    local active = active_of(members)
    for i = #members, 1, -1 do
      if active[i] then
        out[#out + 1] = page[2 * i - 1]
        out[#out + 1] = page[2 * i]
        found = found + 1
        if found == args.top then
          out[1] = start + i - 1
          return out
        end
      end
    end
    stop = start
  end
  if stop > 0 then out[1] = stop end
  return out
end

local total = redis.call('ZCOUNT', activity, since, '+inf')
local ids = args.ids
local raw, deepest, shallowest = {}, -1, math.huge
local asked = active_of(ids)
for i, id in ipairs(ids) do
  local rank = asked[i] and redis.call('ZREVRANK', board, id)
  raw[i] = rank or -1
  if rank and rank > deepest then deepest = rank end
  if rank and rank < shallowest then shallowest = rank end
end
local ranked = redis.call('ZCARD', board)
local path = args.path
if not path then
  local tail = ranked - 1 - shallowest
  path = (deepest <= total and deepest <= tail and 'walk') or (total <= tail and 'set') or 'tail'
end
local out = {total, path, -1}
for i = 1, #ids do out[i + 3] = raw[i] >= 0 and 0 or -1 end
if deepest < 0 then return out end

-- Go down the leaderboard's places start .. stop - 1; each active one counts for every asked
-- player `counts(their place, its place)` says. Returns where it stopped.
local function count_down(start, stop, counts)
  while start < stop do
    local page = redis.call('ZREVRANGE', board, start, math.min(start + CHUNK, stop) - 1)
    if #page == 0 then break end
    local active = active_of(page)
    for x = 1, #page do
      if active[x] then
        local place = start + x - 1
        for i = 1, #ids do
          if counts(raw[i], place) then out[i + 3] = out[i + 3] + 1 end
        end
      end
    end
    start = start + #page
  end
  return start
end

if path == 'tail' then
  -- Places below the shallowest asked player, cursor entries of them already counted.
  local start = shallowest + 1 + cursor
  start = count_down(start, math.min(start + budget, ranked), function(rank, place)
    return rank >= 0 and rank < place
  end)
  if start < ranked then out[3] = start - shallowest - 1 end
  return out
end

if path == 'walk' then
  -- Places cursor .. stop - 1 of the leaderboard: count the active ones above each player.
  local start = count_down(cursor, math.min(cursor + budget, deepest), function(rank, place)
    return rank > place
  end)
  if start < deepest then out[3] = start end
  return out
end

-- The active players are the activity set's last `total` members, paged by index; each one
-- ranked above an asked player (score, then member, both descending) counts for them.
local scores = {}
for i, id in ipairs(ids) do
  if raw[i] >= 0 then scores[i] = tonumber(redis.call('ZSCORE', board, id)) end
end
local card = redis.call('ZCARD', activity)
local first = card - total
local start, stop = first + cursor, math.min(first + cursor + budget, card)
while start < stop do
  local page = redis.call('ZRANGE', activity, start, math.min(start + CHUNK, stop) - 1)
  if #page == 0 then break end
  local rated = redis.call('ZMSCORE', board, unpack(page))
  for x = 1, #page do
    local score = rated[x] and tonumber(rated[x])
    if score then
      for i, id in ipairs(ids) do
        local own = scores[i]
        -- A tie is ordered as ZREVRANK orders it (bytes, not the server's collation).
        if own and (score > own or (score == own and redis.call('ZREVRANK', board, page[x]) < raw[i])) then
          out[i + 3] = out[i + 3] + 1
        end
      end
    end
  end
  start = start + #page
end
if start < card then out[3] = start - first end
return out
