-- Helpers shared by the scripts (scripts.py puts this file first).

-- The header of a msgpack array of n items, as msgpack-python's Packer.pack_array_header.
local function array_header(n)
  if n < 16 then return string.char(0x90 + n) end
  if n < 65536 then return string.char(0xdc, math.floor(n / 256), n % 256) end
  return string.char(0xdd, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end


-- The refusal of a script whose keys are of another generation than it may use, or nil:
-- `args.generation` must be the live generation (`args.mode` 'live'; 0 before any re-rate)
-- or the staging one a re-rate builds (`args.mode` 'staging'). {'generation', live} when
-- the live one is another; {'gone', args.generation} when that is no longer the staging one.
-- `control` is the ladder's control hash.
local function wrong_generation(control, args)
  if args.mode == 'live' then
    local live = tonumber(redis.call('HGET', control, 'live') or '0')
    if live ~= args.generation then return {'generation', live} end
  elseif tonumber(redis.call('HGET', control, 'staging') or '-1') ~= args.generation then
    return {'gone', args.generation}
  end
  return nil
end
