-- msgpack helpers shared by read.lua and commit.lua (redis_store.py puts this file first).

-- The header of a msgpack array of n items, as msgpack-python's Packer.pack_array_header.
local function array_header(n)
  if n < 16 then return string.char(0x90 + n) end
  if n < 65536 then return string.char(0xdc, math.floor(n / 256), n % 256) end
  return string.char(0xdd, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end

