-- Leaderboard reads that count only recently active players (ladder rules; see redis_store.py
-- for the key layout), done beside the data so that the entries skipped never leave Redis.
--
-- KEYS: 1 the leaderboard zset, 2 the activity zset (ranked player → last match), both of one
--       generation of one ladder.
-- ARGV: 1 one msgpack map (raw strings):
--         mode    'top' or 'places'
--         since   the oldest last match that counts as active
--         top     ('top') rows wanted
--         ids     ('places') the players whose places are wanted
-- 'top' returns the first `top` active players of the leaderboard, best first, as a flat
-- array id, score, id, score, … (scores as Redis writes them). Cost: the entries read until
-- `top` active ones are found.
-- 'places' returns {total active, place of ids[1], …}: a place is 0-based among the active
-- players in leaderboard order, -1 for a player who is not ranked or not active. Cost:
-- min(the deepest asked player's leaderboard place, the active players) entries.
local CHUNK = 1000

local args = cmsgpack.unpack(ARGV[1])
local board, activity, since = KEYS[1], KEYS[2], args.since

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
  local out, found, start = {}, 0, 0
  while found < args.top do
    local page = redis.call('ZREVRANGE', board, start, start + CHUNK - 1, 'WITHSCORES')
    if #page == 0 then break end
    local members = {}
    for i = 1, #page, 2 do members[#members + 1] = page[i] end
    local active = active_of(members)
    for i = 1, #members do
      if active[i] then
        out[#out + 1] = page[2 * i - 1]
        out[#out + 1] = page[2 * i]
        found = found + 1
        if found == args.top then break end
      end
    end
    start = start + CHUNK
  end
  return out
end

local total = redis.call('ZCOUNT', activity, since, '+inf')
local out = {total}
local raw, deepest = {}, -1
local asked = active_of(args.ids)
for i, id in ipairs(args.ids) do
  local rank = asked[i] and redis.call('ZREVRANK', board, id)
  raw[i] = rank or -1
  if rank and rank > deepest then deepest = rank end
end
if deepest < 0 then
  for i = 1, #args.ids do out[i + 1] = -1 end
  return out
end

if deepest <= total then
  -- Walk the leaderboard down to the deepest asked player, counting the active above each.
  local above, start = {}, 0  -- above[r] = active players among places 0 .. r - 1
  local count = 0
  while start < deepest do
    local page = redis.call('ZREVRANGE', board, start, math.min(start + CHUNK, deepest) - 1)
    local active = active_of(page)
    for x = 1, #page do
      above[start + x - 1] = count
      if active[x] then count = count + 1 end
    end
    start = start + #page
  end
  above[deepest] = count
  for i = 1, #args.ids do out[i + 1] = raw[i] >= 0 and above[raw[i]] or -1 end
  return out
end

-- Fewer active players than the deepest place: count the active ones ranked above each
-- asked player, in the leaderboard's order (score, then member, both descending).
local scores = {}
for i, id in ipairs(args.ids) do
  if raw[i] >= 0 then scores[i] = tonumber(redis.call('ZSCORE', board, id)) end
  out[i + 1] = raw[i] >= 0 and 0 or -1
end
-- The active players are the activity set's last `total` members: paged by index (a LIMIT
-- offset would rescan the skipped entries on every page).
local card = redis.call('ZCARD', activity)
for start = card - total, card - 1, CHUNK do
  local page = redis.call('ZRANGE', activity, start, math.min(start + CHUNK, card) - 1)
  local rated = redis.call('ZMSCORE', board, unpack(page))
  for x = 1, #page do
    local score = rated[x] and tonumber(rated[x])
    if score then
      for i, id in ipairs(args.ids) do
        local own = scores[i]
        if own and (score > own or (score == own and page[x] > id)) then out[i + 1] = out[i + 1] + 1 end
      end
    end
  end
end
return out
