-- Read of one batch of one ladder (see redis_store.py for the key layout).
--
-- KEYS: 1 players hash, 2 effects hash, 3 meta hash (field 'applied': the watermark),
--       4.. the marker key of each match id, in order (every key the script touches).
-- ARGV: 1 msgpack [player ids, effect ids, match ids].
-- Returns one msgpack array [states, effect states, markers, watermark]: the first three
-- arrays of the stored values in request order, nil where absent (stored values are msgpack
-- already, so they are concatenated as they are); the watermark an integer, nil if absent.
local CHUNK = 1000  -- arguments per HMGET/MGET: unpack() is limited by the Lua stack
local NIL = string.char(0xc0)

local ids = cmsgpack.unpack(ARGV[1])
local out = {array_header(4)}
for part = 1, 3 do
  local list = ids[part]
  out[#out + 1] = array_header(#list)
  for i = 1, #list, CHUNK do
    local j = math.min(i + CHUNK - 1, #list)
    local values
    if part < 3 then
      values = redis.call('HMGET', KEYS[part], unpack(list, i, j))
    else
      values = redis.call('MGET', unpack(KEYS, 3 + i, 3 + j))
    end
    for x = 1, #values do out[#out + 1] = values[x] or NIL end
  end
end
local watermark = redis.call('HGET', KEYS[3], 'applied')
out[#out + 1] = watermark and cmsgpack.pack(tonumber(watermark)) or NIL
return table.concat(out)
