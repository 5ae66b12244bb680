-- Read of one batch of one ladder (see redis_store.py for the key layout).
--
-- KEYS: 1 players hash, 2 effects hash, 3 meta hash (field 'applied': the watermark), all of
--       the generation read, 4 the ladder's control hash ('params:<g>': generation g's
--       parameter overrides), 5 its voids hash, 6.. the marker key of each match id, in order
--       (every key the script touches).
-- ARGV: 1 one msgpack map (raw strings): players, effects, matches (the ids read), generation
--       (the one the keys are of), mode ('live' or 'staging': which generation it must be).
-- Returns {'generation', g} or {'gone', g} (see wrong_generation) when the generation is not
-- the expected one; else one msgpack array [states, effect states, markers, watermark, voids,
-- params]: the first three arrays of the stored values in request order, nil where absent
-- (stored values are msgpack already, so they are concatenated as they are); the watermark
-- an integer, nil if absent; voids the stored void per match id or nil (nil as a whole when
-- the ladder has no voids); params the stored overrides or nil.
local CHUNK = 1000  -- arguments per HMGET/MGET: unpack() is limited by the Lua stack
local NIL = string.char(0xc0)

local args = cmsgpack.unpack(ARGV[1])
local refused = wrong_generation(KEYS[4], args)
if refused then return refused end

local ids = {args.players, args.effects, args.matches}
local out = {array_header(6)}
local voided = redis.call('EXISTS', KEYS[5]) == 1
for part = 1, 4 do
  local list = ids[math.min(part, 3)]
  if part == 4 and not voided then
    out[#out + 1] = NIL  -- the ladder has no voids: nil rather than an array of nils
  else
    out[#out + 1] = array_header(#list)
    for i = 1, #list, CHUNK do
      local j = math.min(i + CHUNK - 1, #list)
      local values
      if part < 3 then
        values = redis.call('HMGET', KEYS[part], unpack(list, i, j))
      elseif part == 3 then
        values = redis.call('MGET', unpack(KEYS, 5 + i, 5 + j))
      else
        values = redis.call('HMGET', KEYS[5], unpack(list, i, j))
      end
      for x = 1, #values do out[#out + 1] = values[x] or NIL end
    end
  end
  if part == 3 then
    local watermark = redis.call('HGET', KEYS[3], 'applied')
    out[#out + 1] = watermark and cmsgpack.pack(tonumber(watermark)) or NIL
  end
end
out[#out + 1] = redis.call('HGET', KEYS[4], 'params:' .. args.generation) or NIL
return table.concat(out)
