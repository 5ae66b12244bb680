-- Reads of bucketed hashes, shared by the read and board scripts (scripts.py puts this file
-- after common.lua).
local CHUNK = 1000  -- arguments per HMGET: unpack() is limited by the Lua stack
local NIL = string.char(0xc0)

-- The values of `ids` in `hash` (HMGET in chunks), nil where absent: a table index → value.
local function hmget(hash, ids, out, at)
  for i = 1, #ids, CHUNK do
    local j = math.min(i + CHUNK - 1, #ids)
    local values = redis.call('HMGET', hash, unpack(ids, i, j))
    for x = 1, j - i + 1 do out[at[i + x - 1]] = values[x] end
  end
end

-- The values of `ids` (each in the bucket key `key(first + bucket[i])`), request order.
local function bucketed(key, first, ids, bucket)
  local groups, found = {}, {}
  for i, id in ipairs(ids) do
    local b = bucket[i]
    local group = groups[b]
    if not group then group = {ids = {}, at = {}}; groups[b] = group end
    group.ids[#group.ids + 1] = id
    group.at[#group.at + 1] = i
  end
  for b, group in pairs(groups) do hmget(key(first + b), group.ids, found, group.at) end
  return found
end

-- The values of `ids` (as `bucketed`) as one msgpack array, nil where absent: the stored
-- values are msgpack already, so they are concatenated as they are.
local function bucketed_array(key, first, ids, bucket)
  local found, out = bucketed(key, first, ids, bucket), {array_header(#ids)}
  for i = 1, #ids do out[i + 1] = found[i] or NIL end
  return table.concat(out)
end
