-- Atomic commit of one batch of one ladder (see redis_store.py for the argument layout).
-- Checks first, writes after: a refused commit writes nothing.
--
-- KEYS: 1 players hash, 2 effects hash, 3 leaderboard zset,
--       then n_markers marker keys, then n_history history lists.
-- ARGV: 1 n_writes, 2 n_markers, 3 n_history, 4 marker ttl (s, 0 = keep), 5 history cap,
--       then per write: is_effect ("1"/"0"), player id, expected version, packed state,
--                       leaderboard score ("" = not on the leaderboard),
--       then per marker: packed events,
--       then per history list: its entry count c, then c packed entries (oldest first).
local n_writes, n_markers, n_history = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl, cap = tonumber(ARGV[4]), tonumber(ARGV[5])

for m = 1, n_markers do
  if redis.call('EXISTS', KEYS[3 + m]) == 1 then
    return {'applied', m}
  end
end

local a = 6
for w = 1, n_writes do
  local hash = KEYS[1]
  if ARGV[a] == '1' then hash = KEYS[2] end
  local stored = redis.call('HGET', hash, ARGV[a + 1])
  local version = 0
  if stored then version = cmsgpack.unpack(stored)[5] end
  if version ~= tonumber(ARGV[a + 2]) then
    return {'conflict', ARGV[a + 1]}
  end
  a = a + 5
end

a = 6
for w = 1, n_writes do
  local hash = KEYS[1]
  if ARGV[a] == '1' then hash = KEYS[2] end
  redis.call('HSET', hash, ARGV[a + 1], ARGV[a + 3])
  if ARGV[a + 4] ~= '' then
    redis.call('ZADD', KEYS[3], ARGV[a + 4], ARGV[a + 1])
  end
  a = a + 5
end

for m = 1, n_markers do
  if ttl > 0 then
    redis.call('SET', KEYS[3 + m], ARGV[a], 'EX', ttl)
  else
    redis.call('SET', KEYS[3 + m], ARGV[a])
  end
  a = a + 1
end

for h = 1, n_history do
  local key = KEYS[3 + n_markers + h]
  local c = tonumber(ARGV[a])
  redis.call('LPUSH', key, unpack(ARGV, a + 1, a + c))
  redis.call('LTRIM', key, 0, cap - 1)
  a = a + 1 + c
end
return {'ok'}
