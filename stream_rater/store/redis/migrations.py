"""Upgrades of a Redis store from earlier layouts (`stream-rater migrate --to 2|3`): the
markers of before the markers hash, stored format 1 to format 2, and the leaderboards' running
sums; the record of format 2 raised to 3 (`raise_format`)."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

import msgpack

from stream_rater.store.redis.keys import bucket, history_chunk, history_slot, legacy_marker, marker_slots
from stream_rater.store.status import text
from stream_rater.store.stored_events import pack_entry, stored_event
from stream_rater.store.values import PlayerState

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


#: Keys the upgrade moves per pipeline.
_BATCH = 500
#: Leaderboard entries one read of `recount_board_sums` takes.
_BOARD_STEP = 10_000


async def upgrade_to_2(store: RedisStore) -> dict[str, int]:
    """Rewrite a store of stored format 1 (`store.redis.keys` ends with what it was) into
    format 2, in place, then record format 2: markers of the layout before the markers hash
    first (`migrate_markers`), then per generation the players hash and each season archive into
    buckets, the histories into compact bucketed ones (their newest `history_limit` entries)
    and the markers with their expiry. For an upgrade with no worker running; run again after an
    interruption, it goes on where it stopped (each key is deleted once moved). Returns how many
    of each kind were moved."""
    counts = {"legacy markers": await migrate_markers(store), "states": 0, "histories": 0, "markers": 0}
    async for key, (ladder, generation, rest) in _format_1_keys(store):
        if rest == "players" or rest.startswith("players:season:"):
            counts["states"] += await _move_states(store, key, ladder, generation, rest)
        elif rest == "mk":
            counts["markers"] += await _move_markers_2(store, key, ladder, generation)
    async for key, (ladder, generation, rest) in _format_1_keys(store, "h:"):  # once the states are
        counts["histories"] += await _move_history(store, key, ladder, generation, rest[2:])
    counts["leaderboard sums"] = await recount_board_sums(store)
    await raise_format(store, 2)  # 2, not 3: workers of the release before may start on it
    return counts


#: Sets the record's ``format`` (KEYS[1], ARGV[1]) unless it is already that or later, in one
#: step; returns the format it found (0: none).
_RAISE = """local found = tonumber(redis.call('HGET', KEYS[1], 'format') or '0')
if found < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'format', ARGV[1]) end
return found"""


async def raise_format(store: RedisStore, to: int) -> int:
    """Record stored format `to` unless the store's record says it or a later one (a record
    never goes down: `store.deployment`); returns the format recorded before (0: none). Raising
    2 to 3 changes no data, so it may run while workers run (`stream-rater migrate --to 3`);
    it is for when every worker runs a release of format 3: an earlier one then refuses the
    store at start."""
    found: int = await store.client.eval(_RAISE, 1, store.prefix + ":deployment", str(to))
    return found


async def recount_board_sums(store: RedisStore) -> int:
    """Set the running sum of every generation's leaderboard (meta field ``lb:sum``, which the
    commits keep from then on: ``eligible.lua``) to the exact sum of its scores, read in steps;
    returns how many leaderboards. For an upgrade, with no worker running (a store written
    before the sum was kept reads its totals by a recount until then)."""
    board = re.compile(rf"^{re.escape(store.prefix)}:\{{[^}}]+\}}:(?:g\d+:)?lb$", re.DOTALL)
    done = 0
    async for key in store.client.scan_iter(match=store.prefix + ":{*lb", count=1000):
        name = key.decode()
        if not board.match(name):
            continue
        scores: list[float] = []
        while True:
            rows = await store.client.zrange(key, len(scores), len(scores) + _BOARD_STEP - 1, withscores=True)
            scores += (float(row[1]) for row in rows)
            if len(rows) < _BOARD_STEP:
                break
        await store.client.hset(name[: -len("lb")] + "meta", "lb:sum", repr(math.fsum(scores)))
        done += 1
    return done


async def _format_1_keys(
    store: RedisStore, kind: str = ""
) -> AsyncIterator[tuple[bytes, tuple[str, int, str]]]:
    """The keys of format 1 to move (a players or season hash, a markers hash; with `kind`
    ``h:`` the history lists), each with its ladder, generation and suffix. Format 2's own keys
    (``players:<b>``, ``mk:<s>``) are passed over."""
    pattern = re.compile(rf"^{re.escape(store.prefix)}:\{{([^}}]+)\}}:(?:g(\d+):)?({kind}.+)$", re.DOTALL)
    async for key in store.client.scan_iter(match=store.prefix + ":{*", count=1000):
        found = pattern.match(key.decode())
        if not found:
            continue
        ladder, generation, rest = found.groups()
        if rest.startswith("h:"):
            wanted = b"list"
        elif rest in ("players", "mk") or (rest.startswith("players:season:") and not _archive_bucket(rest)):
            wanted = b"hash"
        else:
            continue
        if await store.client.type(key) == wanted:
            yield key, (ladder, int(generation or 0), rest)


def _archive_bucket(rest: str) -> bool:
    """Whether ``players:season:…`` is a format-2 archive bucket (``…:<id>:<b>``)."""
    parts = rest.split(":")
    return len(parts) > 3 and parts[-1].isdigit()


async def _move_states(store: RedisStore, key: bytes, ladder: str, generation: int, rest: str) -> int:
    """Move the format-1 states hash `key` (players, or a season's) into its buckets."""
    moved = 0
    rows: list[tuple[str, bytes]] = []
    async for field, raw in store.client.hscan_iter(key, count=1000):
        if field:  # '' kept it a hash table
            rows.append((field.decode(), PlayerState.unpack(raw).pack()))
    for i in range(0, len(rows), _BATCH):
        async with store.client.pipeline(transaction=False) as pipe:
            for player, packed in rows[i : i + _BATCH]:
                pipe.hset(store._gen_key(ladder, generation, f"{rest}:{bucket(player)}"), player, packed)
            await pipe.execute()
        moved += len(rows[i : i + _BATCH])
    await store.client.delete(key)
    return moved


async def _move_markers_2(store: RedisStore, key: bytes, ladder: str, generation: int) -> int:
    """Move the format-1 markers hash `key` and its expiry zset into the markers slots: each
    into the slot of the time it was written (its expiry less the store's marker TTL; a marker
    kept longer or for ever into the present slot: it then lives one TTL from now), leaving out
    those already past the TTL."""
    expiry_key = store._gen_key(ladder, generation, "mk:expiry")
    expiries: dict[bytes, float] = {}
    async for member, score in store.client.zscan_iter(expiry_key, count=1000):
        expiries.update((m.encode() if isinstance(m, str) else m, score) for m in msgpack.unpackb(member))
    rows = [(m, v) async for m, v in store.client.hscan_iter(key, count=1000) if m]
    now, ttl, moved = store.clock(), store.marker_ttl, 0
    lives: dict[str, int] = {}  # slot key → its time to live from now, the longest of its markers'
    async with store.client.pipeline(transaction=False) as pipe:
        for match, value in rows:
            # when it was written; one kept longer than this TTL allows (or for ever): now
            written = min(expiries[match] - ttl, now) if match in expiries and ttl else now
            _, slot, seconds = marker_slots(written, ttl)
            slot_key = store._gen_key(ladder, generation, f"mk:{slot}")
            if seconds is not None:
                seconds -= int(now - written)
                if seconds <= 0:
                    continue  # past the window already
                lives[slot_key] = max(seconds, lives.get(slot_key, 0))
            pipe.hset(slot_key, match, value)
            moved += 1
        for slot_key, seconds in lives.items():
            pipe.expire(slot_key, seconds)
        await pipe.execute()
    await store.client.delete(key, expiry_key)
    return moved


async def _move_history(store: RedisStore, key: bytes, ladder: str, generation: int, player: str) -> int:
    """Move one format-1 history list into the player's bucket: its newest entries as one
    chunk, in the ring's slot of the player's state version (none where Redis keeps no history:
    the list is dropped, the archive holds it)."""
    if not store.history_limit:
        await store.client.delete(key)
        return 1
    rows = await store.client.lrange(key, 0, store.history_limit - 1)
    events = [stored_event(msgpack.unpackb(raw, raw=False), ladder) for raw in rows]
    meta = store._gen_key(ladder, generation, "meta")
    model = next((e["model"] for e in events if isinstance(e.get("model"), str)), None)
    if model is not None:
        await store.client.hsetnx(meta, "model", model)
        model = text(await store.client.hget(meta, "model") or model)
    players = store._gen_key(ladder, generation, f"players:{bucket(player)}")
    state = await store.client.hget(players, player)
    version = PlayerState.unpack(state).version if isinstance(state, bytes) else 0  # states moved first
    chunk = history_chunk(version, (pack_entry(e, ladder, model or "", player) for e in events))
    field = history_slot(player, version, store.history_limit)
    async with store.client.pipeline(transaction=True) as pipe:
        pipe.hset(players, field, chunk)
        pipe.delete(key)
        await pipe.execute()
    return 1
