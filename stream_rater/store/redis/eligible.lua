-- The eligible leaderboard, shared by the commit and board scripts (scripts.py puts this file
-- after common.lua). The leaderboard zset holds the players the ladder ranks, by display
-- rating; on a ladder with an activity rule its activity zset (player → last match) is the
-- leaderboard's time index, and the players idle since a time leave both, a bounded number per
-- call (`trim_board`). The meta field 'lb:sum' keeps the sum of the leaderboard's scores, so
-- that the inflation totals are read in O(1).
local BOARD_SUM = 'lb:sum'
local BOARD_CHUNK = 1000  -- members per command: unpack() is limited by the Lua stack

-- `x` as a decimal string that reads back as the same double (a Lua number would be cut).
local function board_number(x)
  return string.format('%.17g', x)
end

-- The scores on `board` of `members` (an array): per index a number, or false (not on it).
-- A score is made a number by `* 1`, Lua's arithmetic coercion (the same conversion as
-- tonumber, which parses the string twice).
local function board_scores(board, members)
  local out = {}
  for i = 1, #members, BOARD_CHUNK do
    local j = math.min(i + BOARD_CHUNK - 1, #members)
    local found = redis.call('ZMSCORE', board, unpack(members, i, j))
    for x = 1, j - i + 1 do out[i + x - 1] = found[x] and found[x] * 1 or false end
  end
  return out
end

-- The sum of the scores on `board` of `members` (an array; those not on it add nothing), added
-- up in their order, each made a number as `board_scores` makes it.
local function board_sum(board, members)
  local sum = 0
  for i = 1, #members, BOARD_CHUNK do
    local found = redis.call('ZMSCORE', board, unpack(members, i, math.min(i + BOARD_CHUNK - 1, #members)))
    for x = 1, #found do
      if found[x] then sum = sum + found[x] * 1 end
    end
  end
  return sum
end

-- `command key members…` in chunks.
local function board_chunked(command, key, members)
  for i = 1, #members, BOARD_CHUNK do
    redis.call(command, key, unpack(members, i, math.min(i + BOARD_CHUNK - 1, #members)))
  end
end

-- Takes at most `most` players (-1: all) whose last match is before `since` off `board` and
-- `activity`, and their scores off the sum in `meta`; returns how many it took off.
local function trim_board(board, activity, meta, since, most)
  local idle = redis.call('ZRANGEBYSCORE', activity, '-inf', '(' .. board_number(since), 'LIMIT', 0, most)
  if #idle == 0 then return 0 end
  local gone = board_sum(board, idle)
  board_chunked('ZREM', board, idle)
  board_chunked('ZREM', activity, idle)
  redis.call('HINCRBYFLOAT', meta, BOARD_SUM, board_number(-gone))
  return #idle
end
