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

-- The values of `ids` (each in the bucket key `key(first + bucket[i])`) as one msgpack array,
-- in request order, nil where absent: the stored values are msgpack already, so they are
-- concatenated as they are. One HMGET per run of ids in one bucket (nearly always one id: a
-- batch's players are spread over many buckets), with no table per bucket.
local function bucketed_array(key, first, ids, bucket)
  local out, n, i = {array_header(#ids)}, #ids, 1
  while i <= n do
    local b, j = bucket[i], math.min(i + CHUNK - 1, n)
    for x = i + 1, j do
      if bucket[x] ~= b then j = x - 1; break end
    end
    local values = redis.call('HMGET', key(first + b), unpack(ids, i, j))
    for x = 1, j - i + 1 do out[i + x] = values[x] or NIL end
    i = j + 1
  end
  return table.concat(out)
end
