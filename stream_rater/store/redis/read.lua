-- Read of one batch of one or more ladders (see keys.py for the key layout, stored format 3).
--
-- KEYS: each ladder's keys in turn: first the K_FIXED named in K (the header scripts.py
--       generates from keys.READ_KEYS): effects hash, meta hash (field 'applied': the
--       watermark; 'p:<partition>': the positions), unproduced-events hash, all of the
--       generation read, the ladder's control hash ('params:<g>': generation g's parameter
--       overrides), its voids hash, the generation's older unproduced-events hash (keys.py),
--       then its `buckets[1]` players buckets and `buckets[2]` markers slots of the last marker
--       TTL (every key the script touches).
-- ARGV: per ladder one msgpack map (raw strings): players, bucket (per player the index of its
--       bucket among the players keys), effects, matches (the ids read), records (nil, or per
--       match its partition and offset in the matches topic, flat, both nil where unknown, as
--       one msgpack array, decoded only where lowest (partition → the lowest offset of the
--       batch in it) is below the partition's position: a redelivery), buckets, generation (the
--       one the keys are of), mode ('live' or 'staging': which generation it must be).
-- Returns per ladder {'generation', g} or {'gone', g} (see wrong_generation) when the
-- generation is not the expected one; else one msgpack array [states, effect states, markers,
-- watermark, voids, params]: the first two arrays of the stored values in request order, nil
-- where absent (stored values are msgpack already, so they are concatenated as they are);
-- markers per match id nil (not applied), or the events it still has to produce (an empty
-- array once they are with the broker). A match is applied if it has a marker in one of the
-- slots, or if its record is below the ladder's position in that partition (a redelivery after
-- a crash: positions never expire). The watermark an integer, nil if absent; voids the
-- stored void per match id or nil (nil as a whole when the ladder has no voids); params the
-- stored overrides or nil.
local EMPTY = array_header(0)

-- 1 … n.
local function indices(n)
  local out = {}
  for i = 1, n do out[i] = i end
  return out
end

-- Per index of `args.matches`, true where the match has a marker in one of the slots (one
-- HMGET per slot that exists, its replies looked at where they are, with no table per slot).
local function marked(key, args)
  local matches, found = args.matches, {}
  local n = #matches
  for s = 1, args.buckets[2] do
    local slot = key(K_FIXED + args.buckets[1] + s)
    if redis.call('EXISTS', slot) == 1 then  -- most slots of a quiet ladder are empty
      for i = 1, n, CHUNK do
        local j = math.min(i + CHUNK - 1, n)
        local values = redis.call('HMGET', slot, unpack(matches, i, j))
        for x = 1, j - i + 1 do
          if values[x] then found[i + x - 1] = true end
        end
      end
    end
  end
  return found
end

-- The ladder's position in `partition` (0 if none), read from `meta` once (`positions`).
local function position(meta, positions, partition)
  local at = positions[partition]
  if not at then
    at = tonumber(meta['p:' .. partition] or '0')
    positions[partition] = at
  end
  return at
end

-- The records (flat: partition, offset, …) of `args`, decoded, if one of them may be below
-- its partition's position; else nil (none is).
local function redelivered(args, meta, positions)
  if not args.records then return nil end
  for partition, offset in pairs(args.lowest) do
    if offset < position(meta, positions, partition) then return cmsgpack.unpack(args.records) end
  end
  return nil
end

-- The match ids of `args` that are applied (see the header), in request order.
local function applied_matches(key, args, meta)
  local markers, positions = marked(key, args), {}
  local records = redelivered(args, meta, positions)
  local applied, a = {}, 0
  for i, m in ipairs(args.matches) do
    local hit = markers[i]
    local offset = not hit and records and records[2 * i]
    if offset then hit = offset < position(meta, positions, records[2 * i - 1]) end
    if hit then a = a + 1; applied[a] = m end
  end
  return applied
end

-- One ladder's read: its keys are KEYS[o + 1] …. Returns its reply.
local function read(o, args)
  local function key(n) return KEYS[o + n] end
  local refused = wrong_generation(key(K.control), args)
  if refused then return refused end
  local fields, meta = redis.call('HGETALL', key(K.meta)), {}
  for i = 1, #fields, 2 do meta[fields[i]] = fields[i + 1] end

  local out = {array_header(6), bucketed_array(key, K_FIXED, args.players, args.bucket)}
  local effects = {}
  hmget(key(K.effects), args.effects, effects, indices(#args.effects))
  out[#out + 1] = array_header(#args.effects)
  for i = 1, #args.effects do out[#out + 1] = effects[i] or NIL end

  -- An applied match's events are looked up only then (redeliveries: rare).
  local applied = applied_matches(key, args, meta)
  out[#out + 1] = array_header(#args.matches)
  if #applied == 0 then
    out[#out + 1] = string.rep(NIL, #args.matches)
  else
    local unproduced, held, older = {}, {}, {}
    hmget(key(K.unproduced), applied, held, applied)
    if redis.call('EXISTS', key(K.older)) == 1 then hmget(key(K.older), applied, older, applied) end
    for _, m in ipairs(applied) do unproduced[m] = held[m] or older[m] or EMPTY end
    for _, m in ipairs(args.matches) do out[#out + 1] = unproduced[m] or NIL end
  end

  local watermark = meta['applied']
  out[#out + 1] = watermark and cmsgpack.pack(tonumber(watermark)) or NIL
  if redis.call('EXISTS', key(K.voids)) == 1 then
    local voids = {}
    hmget(key(K.voids), args.matches, voids, indices(#args.matches))
    out[#out + 1] = array_header(#args.matches)
    for i = 1, #args.matches do out[#out + 1] = voids[i] or NIL end
  else
    out[#out + 1] = NIL  -- the ladder has no voids: nil rather than an array of nils
  end
  out[#out + 1] = redis.call('HGET', key(K.control), 'params:' .. args.generation) or NIL
  return table.concat(out)
end

local replies, o = {}, 0
for a = 1, #ARGV do
  local args = cmsgpack.unpack(ARGV[a])
  replies[a] = read(o, args)
  o = o + args.keys
end
return replies
