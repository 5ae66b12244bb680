-- Reads of the eligible leaderboard (see eligible.lua and keys.py), each O(log N) plus what it
-- returns: the leaderboard holds only the players the ladder ranks, and on a ladder with an
-- activity rule the commits (and the worker's trim) take idle players off it. The few who went
-- idle since the last trim (last match before the read's `since`) are still on it: a read
-- looks them up through the activity zset's time index and skips them, at most `limit` of
-- them; more, and the read is refused ({'behind'}) rather than made slow.
--
-- Ranks are standard competition ranking ("1224"): 1 + the players scored strictly higher
-- (ZCOUNT of an exclusive range, less the idle ones above), so tied players share a rank;
-- inside a tie the rows come as ZREVRANGE gives them, by member, descending (byte order).
--
-- KEYS: as named in K (the header scripts.py generates from keys.BOARD_KEYS): lb the
--       leaderboard zset (of one generation, or an ended season's copy), act the activity
--       zset, the meta hash (field 'lb:sum'), the ladder's control hash; then ('lookup') the
--       players buckets of the ids asked.
-- ARGV: 1 one msgpack map (raw strings):
--         op          'ranks', 'lookup', 'top', 'around', 'totals', 'recount' or 'trim'
--         generation  the generation the keys are of, which must be the live one (`mode`
--                     'live', see common.lua)
--         since       nil (no activity rule, or an ended season's board), or the oldest last
--                     match that counts as active
--         limit       most idle players a read skips
--         ids         ('ranks') the players asked
--         ids, bucket ('lookup') the players asked, and per id the index of its bucket among
--                     the players keys
--         top         ('top') rows wanted
--         ids, n      ('around') the players, and rows wanted above and below each
--         cursor, budget ('recount', 'trim') where the step starts, most entries it reads
-- Returns {'generation', g} or {'gone', g} for keys of another generation (wrong_generation),
-- {'behind', limit} when too many idle players are left to skip, else {'ok', …}:
--   'ranks'   {'ok', eligible, rank of ids[1] or -1, …}
--   'lookup'  {'ok', eligible, states, rank of ids[1] or -1, …}: states one msgpack array of
--             the ids' stored states, nil where absent (as read.lua's)
--   'top'     {'ok', eligible, id, score, rank, …} best first
--   'around'  {'ok', eligible, per id {rank of id or -1, id, score, rank, …} best first}
--   'totals'  {'ok', eligible, sum of their scores or '' (no running sum kept yet)}
--   'recount' {'ok', next cursor or -1, count, sum} of the active entries at places cursor ..
--             cursor + budget - 1 (an exact pass in steps, the check of the running sum)
--   'trim'    {'ok', players taken off} (at most budget; writes)
-- Scores and sums are strings (a Lua number in a reply would be cut to an integer).
local args = cmsgpack.unpack(ARGV[1])
local board, activity, meta = KEYS[K.lb], KEYS[K.act], KEYS[K.meta]
local refused = wrong_generation(KEYS[K.control], args)
if refused then return refused end

if args.op == 'trim' then
  return {'ok', trim_board(board, activity, meta, args.since, args.budget)}
end

if args.op == 'recount' then
  local count, sum, start = 0, 0, args.cursor
  local page = redis.call('ZRANGE', board, start, start + args.budget - 1, 'WITHSCORES')
  local members = {}
  for i = 1, #page, 2 do members[#members + 1] = page[i] end
  local last = args.since and board_scores(activity, members)
  for i = 1, #members do
    if not last or (last[i] and last[i] >= args.since) then
      count, sum = count + 1, sum + tonumber(page[2 * i])
    end
  end
  local after = #members < args.budget and -1 or start + #members
  return {'ok', after, count, board_number(sum)}
end

-- The players on the board idle since `since`: their ids (a set id → score) and scores, or
-- nil when there are more than the limit.
local idle_scores, idle = {}, {}
if args.since then
  local ids = redis.call('ZRANGEBYSCORE', activity, '-inf', '(' .. board_number(args.since),
                         'LIMIT', 0, args.limit + 1)
  if #ids > args.limit then return {'behind', args.limit} end
  for i, score in ipairs(board_scores(board, ids)) do
    if score then idle[ids[i]] = score; idle_scores[#idle_scores + 1] = score end
  end
end
local eligible = redis.call('ZCARD', board) - #idle_scores

-- The rank of a player scored `score` (Redis's string of it): 1 + the eligible scored higher.
local function rank_of(score)
  local above = redis.call('ZCOUNT', board, '(' .. score, '+inf')
  local value = tonumber(score)
  for _, s in ipairs(idle_scores) do
    if s > value then above = above - 1 end
  end
  return above + 1
end

-- Appends to `out` the rows of `page` (ZREVRANGE … WITHSCORES) but the idle players, at most
-- `most` of them, as id, score, rank: a row tied with the one before shares its rank (Redis
-- writes equal scores as equal strings); else its rank is `first` + the rows before it when
-- `first` is given (a page from the top), else counted. Returns how many rows it appended.
local function append_rows(out, page, first, most)
  local rows, previous, rank = 0, nil, nil
  for i = 1, #page, 2 do
    if rows == most then break end
    if idle[page[i]] == nil then
      local score = page[i + 1]
      if score ~= previous then
        rank = first and first + rows or rank_of(score)
        previous = score
      end
      out[#out + 1] = page[i]; out[#out + 1] = score; out[#out + 1] = rank
      rows = rows + 1
    end
  end
  return rows
end

-- The rank of player `id`, or -1 when not eligible.
local function rank_of_id(id)
  local score = redis.call('ZSCORE', board, id)
  return (score and idle[id] == nil) and rank_of(score) or -1
end

if args.op == 'ranks' then
  local out = {'ok', eligible}
  for i, id in ipairs(args.ids) do out[i + 2] = rank_of_id(id) end
  return out
end

if args.op == 'lookup' then
  local function key(n) return KEYS[n] end
  local out = {'ok', eligible, bucketed_array(key, K_FIXED, args.ids, args.bucket)}
  for i, id in ipairs(args.ids) do out[i + 3] = rank_of_id(id) end
  return out
end

if args.op == 'top' then
  local out = {'ok', eligible}
  if args.top < 1 then return out end
  local page = redis.call('ZREVRANGE', board, 0, args.top + #idle_scores - 1, 'WITHSCORES')
  append_rows(out, page, 1, args.top)
  return out
end

-- The rows around `id` (see the header): {rank of id or -1, id, score, rank, …}.
local function around(id, n)
  local place = redis.call('ZREVRANK', board, id)
  if not place or idle[id] ~= nil then return {-1} end
  local wide = n + #idle_scores
  local page = redis.call('ZREVRANGE', board, math.max(0, place - wide), place + wide, 'WITHSCORES')
  local found, at = {}, nil  -- the page's eligible rows; the player's among them
  for i = 1, #page, 2 do
    if idle[page[i]] == nil then
      found[#found + 1] = page[i]; found[#found + 1] = page[i + 1]
      if page[i] == id then at = #found - 1 end
    end
  end
  local from = math.max(1, at - 2 * n)
  local out = {-1}
  append_rows(out, {unpack(found, from, math.min(#found, at + 1 + 2 * n))}, nil, -1)
  for i = 2, #out, 3 do
    if out[i] == id then out[1] = out[i + 2] end
  end
  return out
end

if args.op == 'around' then
  local out = {'ok', eligible}
  for i, id in ipairs(args.ids) do out[i + 2] = around(id, args.n) end
  return out
end

-- 'totals'
local sum = redis.call('HGET', meta, BOARD_SUM)
if not sum then
  return {'ok', eligible, redis.call('ZCARD', board) == 0 and '0' or ''}
end
local value = tonumber(sum)
for _, s in ipairs(idle_scores) do value = value - s end
return {'ok', eligible, board_number(value)}
