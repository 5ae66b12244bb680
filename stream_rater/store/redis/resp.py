"""How the Redis store's connections pack their commands into RESP bytes."""

from __future__ import annotations

from typing import Any

import hiredis
from redis.connection import HiredisRespSerializer


class HiredisPacking:
    """A connection class mixin that packs commands with hiredis (C), as redis-py's
    synchronous client does, rather than with the asyncio client's Python loop over the
    arguments: a script call naming tens of bucket keys costs a read server some 10 µs less
    (`bench api`)."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        """The command's RESP bytes, as `HiredisRespSerializer` packs them; by hiredis at once
        where that gives the same (a one-word command name, no bytearray or memoryview, which
        hiredis refuses): the serializer's Python pass over the arguments costs the worker about
        0.3 µs per argument of a commit's script call."""
        if isinstance(args[0], str) and " " not in args[0]:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:  # a bytearray or memoryview (the serializer makes them bytes)
                pass
        packed: list[bytes] = self._packer.pack(*args)
        return packed
