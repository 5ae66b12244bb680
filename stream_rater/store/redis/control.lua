-- A re-rate's steps on one ladder's control keys (see keys.py for the key layout and
-- stream_rater/corrections/rerate.py for the protocol). One script, one step per call, so
-- each step is atomic.
--
-- KEYS: as named in K (the header scripts.py generates from keys.CONTROL_KEYS): control hash
--       (fields: 'live' generation, 'staging' generation, 'last' generation number handed
--       out, 'params:<g>' parameter overrides of generation g), lock (string: owner,
--       expires), frozen (string: owner, expires; live commits are refused while it exists;
--       from the switch on, a set: the players whose correction events are not sent yet,
--       whose live commits are refused; same expiry), outbox (hash: player id → msgpack
--       correction event still to send), the live generation's meta hash, and the staging
--       generation's staged_outbox (as outbox) and staged_held (set of its player ids): what
--       outbox and frozen become at the switch, filled before the freeze so that the switch
--       costs the same whatever the number of corrected players.
-- ARGV: 1 one msgpack map (raw strings): step, owner, ms (milliseconds of the lease or
--       freeze), and per step:
--   begin   params: parameter overrides of the new generation (msgpack; absent for none),
--           request: a token naming this begin (control fields 'begun' and 'abandoned' keep
--           it and its answer's abandoned generation)
--           → {'ok', new staging generation, abandoned staging generation or -1}
--             or {'running', holder, lock milliseconds left}
--   renew   → {'ok'} or {'lost'}
--   freeze  → {'ok'} or {'lost'}
--   stage   staging: the staging generation, put: player id, msgpack event, player id, …
--           (staged, replacing a staged event of the player), drop: player ids whose staged
--           event is withdrawn → {'ok'} or {'lost'}
--   switch  staging, put, drop: as stage (the last changes, made inside the freeze), live: the
--           expected live generation, positions: its expected positions (map partition →
--           offset); the staged outbox becomes the outbox, the staged hold the freeze's
--           successor (the hold)
--           → {'ok'}, {'lost'} (lock, freeze or staging generation not ours) or {'moved'}
--             (the live generation is not the expected one or went further)
--   release held: player ids whose correction events are with the broker → {'ok'} or {'lost'}
--   finish  → {'ok'} or {'lost'}
--   abort   → {'ok', staging generation or -1} or {'lost'}; a hold (of a switch whose reply was
--           lost) stays
-- Refusals are decoded by stream_rater/store/status.py.
--
-- Every step may be sent twice in a row: a reply lost after Redis ran the step (Redis
-- restarted, a connection cut) makes the client send it again (redis-py's cluster client does;
-- control.py does on a single Redis), and the second run answers as the first did, changing
-- nothing more. renew, freeze, stage and release are so by nature; switch answers ok once its
-- staging generation is live; begin answers the same generation (and abandoned one) while the
-- one its request opened is staging; finish answers ok once the lock, outbox and hold are gone;
-- abort answers the generation it forgot (the last handed out, neither staging nor live).
local args = cmsgpack.unpack(ARGV[1])
local step, owner, ms = args.step, args.owner, args.ms
local control, lock, frozen = KEYS[K.control], KEYS[K.lock], KEYS[K.frozen]
local outbox, meta = KEYS[K.outbox], KEYS[K.meta]
local staged, staged_held = KEYS[K.staged_outbox], KEYS[K.staged_held]
local holder = redis.call('GET', lock)

-- Call `command` on `key` with `items`, a thousand at a time (unpack's stack is bounded).
local function batched(command, key, items)
  for i = 1, #items, 1000 do
    redis.call(command, key, unpack(items, i, math.min(i + 999, #items)))
  end
end

-- Stage args.put's events (player id, event, …) and their players' hold; withdraw those of
-- the players args.drop names.
local function stage()
  local put, drop, ids = args.put or {}, args.drop or {}, {}
  for i = 1, #put, 2 do ids[#ids + 1] = put[i] end
  batched('HSET', staged, put)
  batched('SADD', staged_held, ids)
  batched('HDEL', staged, drop)
  batched('SREM', staged_held, drop)
end

-- Whether `staging` is the staging generation.
local function is_staging(staging)
  return tonumber(redis.call('HGET', control, 'staging') or '-1') == staging
end

-- Whether renew extends `frozen`: `owner`'s freeze, or a hold (of `owner`'s switch, or one an
-- abort kept, which `owner`'s re-rate ends once it sent the events: rerate.py's lock).
local function frozen_by_owner()
  local kind = redis.call('TYPE', frozen).ok
  return kind == 'set' or (kind == 'string' and redis.call('GET', frozen) == owner)
end

if step == 'begin' then
  if holder and holder ~= owner then
    return {'running', holder, redis.call('PTTL', lock)}
  end
  redis.call('SET', lock, owner, 'PX', ms)
  local begun = redis.call('HMGET', control, 'begun', 'staging', 'abandoned')
  -- Sent again (its request's generation still staging): the same answer, no second one.
  if begun[1] == args.request and begun[2] then
    return {'ok', tonumber(begun[2]), tonumber(begun[3])}
  end
  local abandoned = tonumber(begun[2] or '-1')
  local live = tonumber(redis.call('HGET', control, 'live') or '0')
  local gen = math.max(tonumber(redis.call('HGET', control, 'last') or '0'), live) + 1
  redis.call('HSET', control, 'last', gen, 'staging', gen, 'begun', args.request, 'abandoned', abandoned)
  if args.params then redis.call('HSET', control, 'params:' .. gen, args.params) end
  return {'ok', gen, abandoned}
end

if holder ~= owner then
  -- Sent again after it took effect: a finish that left nothing; an abort whose generation,
  -- forgotten (not staging, not live), is answered again to be dropped.
  if step == 'finish' and not holder and redis.call('EXISTS', outbox, frozen) == 0 then
    return {'ok'}
  end
  if step == 'abort' and not redis.call('HGET', control, 'staging') then
    local last = tonumber(redis.call('HGET', control, 'last') or '0')
    if last > tonumber(redis.call('HGET', control, 'live') or '0') then return {'ok', last} end
  end
  return {'lost'}
end

if step == 'renew' then
  redis.call('PEXPIRE', lock, ms)
  if frozen_by_owner() then redis.call('PEXPIRE', frozen, ms) end
  return {'ok'}
elseif step == 'freeze' then
  redis.call('SET', frozen, owner, 'PX', ms)
  return {'ok'}
elseif step == 'stage' then
  if not is_staging(args.staging) then return {'lost'} end
  stage()
  return {'ok'}
elseif step == 'switch' then
  -- Done already: a switch sent again after its reply was lost (a client's retry) keeps the hold.
  if tonumber(redis.call('HGET', control, 'live') or '0') == args.staging then return {'ok'} end
  if redis.call('TYPE', frozen).ok ~= 'string' or redis.call('GET', frozen) ~= owner
      or not is_staging(args.staging) then
    return {'lost'}
  end
  if tonumber(redis.call('HGET', control, 'live') or '0') ~= args.live then return {'moved'} end
  local fields = redis.call('HGETALL', meta)
  local found = 0
  for f = 1, #fields, 2 do
    if string.sub(fields[f], 1, 2) == 'p:' then found = found + 1 end
  end
  for partition, offset in pairs(args.positions) do
    if tonumber(redis.call('HGET', meta, 'p:' .. partition) or '-1') ~= offset then
      return {'moved'}
    end
    found = found - 1
  end
  if found ~= 0 then return {'moved'} end
  redis.call('HSET', control, 'live', args.staging)
  redis.call('HDEL', control, 'staging')
  stage()
  -- Renames, not copies: the same few commands for ten or ten thousand corrected players.
  local ttl = redis.call('PTTL', frozen)
  redis.call('UNLINK', outbox, frozen)
  if redis.call('EXISTS', staged) == 1 then redis.call('RENAME', staged, outbox) end
  if redis.call('EXISTS', staged_held) == 1 then
    redis.call('RENAME', staged_held, frozen)
    redis.call('PEXPIRE', frozen, math.max(ttl, 1))
  end
  return {'ok'}
elseif step == 'release' then
  if redis.call('TYPE', frozen).ok == 'set' then
    for i = 1, #args.held, 1000 do
      redis.call('SREM', frozen, unpack(args.held, i, math.min(i + 999, #args.held)))
    end
  end
  return {'ok'}
elseif step == 'finish' then
  redis.call('UNLINK', outbox, frozen, lock)
  return {'ok'}
elseif step == 'abort' then
  local staging = tonumber(redis.call('HGET', control, 'staging') or '-1')
  redis.call('HDEL', control, 'staging')
  -- The freeze is lifted, not a hold: a switch that took effect unheard of (its replies lost)
  -- keeps its players held until the next re-rate sends their events, or the hold expires.
  if redis.call('TYPE', frozen).ok == 'string' and redis.call('GET', frozen) == owner then
    redis.call('DEL', frozen)
  end
  redis.call('DEL', lock)
  return {'ok', staging}
end
return redis.error_reply('unknown step ' .. step)
