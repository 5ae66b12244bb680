"""Migrations of a Redis store's data from earlier layouts (`stream-rater migrate-markers`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgpack

from stream_rater.store.redis.keys import legacy_marker

if TYPE_CHECKING:
    from stream_rater.store.redis.store import RedisStore


async def migrate_markers(store: RedisStore) -> int:
    """Move the markers of the layout before the markers hash — a key ``m:<match_id>`` per
    match, holding the events not yet produced, expiring with the marker — into ``mk``,
    ``unproduced`` and ``mk:expiry``; returns how many were moved. For an upgrade, with no
    worker running: a marker left behind would let its match be applied again."""
    moved = 0
    found: list[tuple[bytes, str, int, str]] = []
    marker = legacy_marker(store.prefix)
    async for key in store.client.scan_iter(match=store.prefix + ":{*}:*m:*", count=1000):
        legacy = marker.match(key.decode())
        if legacy:
            ladder, generation, match_id = legacy.groups()
            found.append((key, ladder, int(generation or 0), match_id))
        if len(found) >= 500:
            moved += await _move_markers(store, found)
            found = []
    return moved + await _move_markers(store, found)


async def _move_markers(store: RedisStore, found: Sequence[tuple[bytes, str, int, str]]) -> int:
    """Move legacy markers, each ``(key, ladder, generation, match id)`` (see
    `migrate_markers`); returns how many still existed."""
    async with store.client.pipeline(transaction=False) as pipe:
        for key, *_ in found:
            pipe.get(key)
            pipe.pttl(key)
        replies = await pipe.execute()
    now = store.clock()
    moved = 0
    async with store.client.pipeline(transaction=False) as pipe:
        for (key, ladder, generation, match_id), value, ttl in zip(found, replies[0::2], replies[1::2]):
            if value is None:  # expired meanwhile
                continue
            prefix = store._gen_key(ladder, generation, "")
            pipe.hset(prefix + "mk", match_id, "")
            if msgpack.unpackb(value):
                pipe.hset(prefix + "unproduced", match_id, value)
            if ttl > 0:
                member = msgpack.packb([match_id], use_bin_type=False)
                pipe.zadd(prefix + "mk:expiry", {member: math.ceil(now + ttl / 1000)})
            pipe.delete(key)
            moved += 1
        await pipe.execute()
    return moved
