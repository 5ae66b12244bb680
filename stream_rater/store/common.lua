-- Helpers shared by the scripts (redis_store.py puts this file first).

-- The header of a msgpack array of n items, as msgpack-python's Packer.pack_array_header.
local function array_header(n)
  if n < 16 then return string.char(0x90 + n) end
  if n < 65536 then return string.char(0xdc, math.floor(n / 256), n % 256) end
  return string.char(0xdd, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end


-- The generation a script may use: the live one (mode 'live'; 0 before any re-rate) or the
-- staging one a re-rate builds (mode 'staging'; -1 when there is none). `control` is the
-- ladder's control hash.
local function current_generation(control, mode)
  if mode == 'live' then
    return tonumber(redis.call('HGET', control, 'live') or '0')
  end
  return tonumber(redis.call('HGET', control, 'staging') or '-1')
end
