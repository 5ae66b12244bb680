"""How the store packs the values it keeps and hands to Redis: msgpack with the bin type, by
ormsgpack, which packs these small arrays and maps in about 40 % of the time msgpack takes
(`stream-rater bench redis`'s processor CPU per match); the bytes are the same.

ormsgpack refuses a few types msgpack packs (a float subclass such as numpy's ``float64``);
those values are packed by msgpack instead, so every value packs to the bytes it always did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgpack
import ormsgpack

#: msgpack's packer of the same form, for what ormsgpack refuses; sharing it is safe: packing
#: runs no Python code.
_FALLBACK = msgpack.Packer(use_bin_type=True)

T = TypeVar("T")


def pack(value: Any) -> bytes:
    """`value` as msgpack (strings as str, bytes as bin), as ``msgpack.packb(value,
    use_bin_type=True)`` would pack it."""
    try:
        return ormsgpack.packb(value)
    except ormsgpack.MsgpackEncodeError:
        packed: bytes = _FALLBACK.pack(value)
        return packed


def packing_with(build: Callable[[Callable[[Any], bytes]], T]) -> T:
    """``build(packer)`` with ormsgpack's own packer handed in, so that a loop packing many
    values calls no Python function per value; if ormsgpack refuses one, ``build(pack)``
    instead (so `build` must be safe to run again): the bytes `pack` gives either way."""
    try:
        return build(ormsgpack.packb)
    except ormsgpack.MsgpackEncodeError:
        return build(pack)
