"""How the store packs the values it keeps and hands to Redis: msgpack with the bin type, by
ormsgpack, which packs these small arrays and maps in about 40 % of the time msgpack takes
(`stream-rater bench redis`'s processor CPU per match); the bytes are the same.

ormsgpack refuses a few types msgpack packs (a float subclass such as numpy's ``float64``);
those values are packed by msgpack instead, so every value packs to the bytes it always did.
"""

from __future__ import annotations

from typing import Any

import msgpack
import ormsgpack

#: msgpack's packer of the same form, for what ormsgpack refuses; sharing it is safe: packing
#: runs no Python code.
_FALLBACK = msgpack.Packer(use_bin_type=True)


def pack(value: Any) -> bytes:
    """`value` as msgpack (strings as str, bytes as bin), as ``msgpack.packb(value,
    use_bin_type=True)`` would pack it."""
    try:
        return ormsgpack.packb(value)
    except ormsgpack.MsgpackEncodeError:
        packed: bytes = _FALLBACK.pack(value)
        return packed
