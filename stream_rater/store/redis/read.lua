-- Read of one batch of one or more ladders (see keys.py for the key layout).
--
-- KEYS: each ladder's keys in turn: 1 players hash, 2 effects hash, 3 meta hash (field
--       'applied': the watermark), 4 markers hash, 5 unproduced-events hash, all of the
--       generation read, 6 the ladder's control hash ('params:<g>': generation g's parameter
--       overrides), 7 its voids hash (every key the script touches).
-- ARGV: per ladder one msgpack map (raw strings): players, effects, matches (the ids read),
--       generation (the one the keys are of), mode ('live' or 'staging': which generation it
--       must be).
-- Returns per ladder {'generation', g} or {'gone', g} (see wrong_generation) when the
-- generation is not the expected one; else one msgpack array [states, effect states, markers,
-- watermark, voids, params]: the first two arrays of the stored values in request order, nil
-- where absent (stored values are msgpack already, so they are concatenated as they are);
-- markers per match id nil (not applied), or the events it still has to produce (an empty
-- array once they are with the broker); the watermark an integer, nil if absent; voids the
-- stored void per match id or nil (nil as a whole when the ladder has no voids); params the
-- stored overrides or nil.
local CHUNK = 1000  -- arguments per HMGET: unpack() is limited by the Lua stack
local NIL = string.char(0xc0)
local EMPTY = array_header(0)

-- One ladder's read: its keys are KEYS[o + 1] … KEYS[o + 7]. Returns its reply.
local function read(o, args)
  local refused = wrong_generation(KEYS[o + 6], args)
  if refused then return refused end

  -- The stored values of `ids` in `hash` (NIL where absent), appended to out as one array.
  local out = {array_header(6)}
  local function each(hash, ids)
    out[#out + 1] = array_header(#ids)
    for i = 1, #ids, CHUNK do
      local j = math.min(i + CHUNK - 1, #ids)
      local values = redis.call('HMGET', hash, unpack(ids, i, j))
      for x = 1, j - i + 1 do
        out[#out + 1] = values[x] or NIL
      end
    end
  end

  each(KEYS[o + 1], args.players)
  each(KEYS[o + 2], args.effects)

  -- A marker's events are looked up only for the matches that have one (redeliveries: rare).
  local applied = {}
  for i = 1, #args.matches, CHUNK do
    local j = math.min(i + CHUNK - 1, #args.matches)
    local values = redis.call('HMGET', KEYS[o + 4], unpack(args.matches, i, j))
    for x = 1, j - i + 1 do
      if values[x] then applied[#applied + 1] = args.matches[i + x - 1] end
    end
  end
  local unproduced = {}
  for i = 1, #applied, CHUNK do
    local j = math.min(i + CHUNK - 1, #applied)
    local values = redis.call('HMGET', KEYS[o + 5], unpack(applied, i, j))
    for x = 1, j - i + 1 do unproduced[applied[i + x - 1]] = values[x] or EMPTY end
  end
  out[#out + 1] = array_header(#args.matches)
  for _, m in ipairs(args.matches) do out[#out + 1] = unproduced[m] or NIL end

  local watermark = redis.call('HGET', KEYS[o + 3], 'applied')
  out[#out + 1] = watermark and cmsgpack.pack(tonumber(watermark)) or NIL
  if redis.call('EXISTS', KEYS[o + 7]) == 1 then
    each(KEYS[o + 7], args.matches)
  else
    out[#out + 1] = NIL  -- the ladder has no voids: nil rather than an array of nils
  end
  out[#out + 1] = redis.call('HGET', KEYS[o + 6], 'params:' .. args.generation) or NIL
  return table.concat(out)
end

local replies = {}
for a = 1, #ARGV do
  replies[a] = read(7 * (a - 1), cmsgpack.unpack(ARGV[a]))
end
return replies
