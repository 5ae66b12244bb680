"""The Redis state store: one Lua read and one atomic Lua commit per batch.

Key layout — every key of a ladder carries the hash tag ``{ladder}`` so the scripts are
valid on Redis Cluster (all keys of a ladder live in one slot), and ladders spread across
shards:

- ``sr:{L}:players`` hash  player id → msgpack ``[mu, sigma, games, last_played, version]``
- ``sr:{L}:effects`` hash  effect name → same state form (context effects, never ranked)
- ``sr:{L}:lb``      zset  player id scored by display rating (the leaderboard)
- ``sr:{L}:m:<match_id>``  msgpack list of the rating-changed events the match produced
  (the "match applied" marker; optional TTL)
- ``sr:{L}:h:<player_id>`` list, newest first, of msgpack rating-changed events (capped)
- ``sr:{L}:meta``    hash  ``applied`` → matches applied to the ladder so far (the watermark:
  it only grows, so a read that finds less than a worker committed means the store lost data)

Both scripts receive every key they touch in KEYS (so they are valid on Redis Cluster and under
any proxy that routes by declared keys), and take the rest of the batch as one msgpack
argument rather than thousands of arguments, to keep the worker's CPU per batch low (redis-py
encodes every argument and parses every reply item in Python). The read script answers with
one msgpack document that splices the stored values in unchanged, so one `msgpack.unpackb`
decodes the whole snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib.resources import files
from typing import Any

import msgpack
import redis.asyncio as aioredis

from stream_rater.store.base import Commit, CommitConflict, Lookup, PlayerState, Snapshot, StateStore
from stream_rater.store.cluster import cluster_client, is_cluster_url


def _script(name: str) -> str:
    """A Lua script of this package, after the msgpack helpers both scripts use."""
    lua = files("stream_rater.store")
    return lua.joinpath("msgpack.lua").read_text() + lua.joinpath(name).read_text()


#: Connections a store opens at most (`RedisStore.from_url`).
MAX_CONNECTIONS = 64

READ_SCRIPT = _script("read.lua")
COMMIT_SCRIPT = _script("commit.lua")


def ladder_key(ladder: str, suffix: str) -> str:
    """The key ``sr:{ladder}:suffix``; the braces make `ladder` the cluster hash tag."""
    return f"sr:{{{ladder}}}:{suffix}"


#: Packs events (``use_bin_type`` like every stored value). Packing a plain dict is one C call
#: that runs no Python code, so sharing the packer is safe under the GIL.
_PACKER = msgpack.Packer(use_bin_type=True)


def _script_args(obj: Any) -> bytes:
    """A script argument: raw strings, because Redis's cmsgpack cannot read the bin type."""
    return msgpack.packb(obj, use_bin_type=False)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisStore(StateStore):
    """`StateStore` on Redis or Redis Cluster (any client exposing the asyncio Redis API)."""

    def __init__(self, client: aioredis.Redis, history_limit: int = 100, marker_ttl: float = 0.0) -> None:
        self.client = client
        self.history_limit = history_limit
        self.marker_ttl = int(marker_ttl)
        self.round_trips = 0
        self._read = client.register_script(READ_SCRIPT)
        self._commit = client.register_script(COMMIT_SCRIPT)

    @classmethod
    def from_url(cls, url: str, max_connections: int = MAX_CONNECTIONS, **kwargs: Any) -> RedisStore:
        """A store on the Redis at `url` (``redis://``, ``rediss://`` for TLS, ``unix://``), or
        on the Redis Cluster at ``redis+cluster://host:port[,host:port…]`` (``rediss+cluster://``
        for TLS; see `stream_rater.store.cluster`).

        At most `max_connections` connections (per cluster node); a request beyond them waits
        for a free one (rather than failing with "Too many connections", as concurrent reads of
        the read API under load otherwise do)."""
        if is_cluster_url(url):
            return cls(cluster_client(url, max_connections), **kwargs)
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections)
        return cls(aioredis.Redis(connection_pool=pool), **kwargs)

    async def read(
        self, ladder: str, player_ids: Iterable[str], effect_ids: Iterable[str], match_ids: Iterable[str]
    ) -> Snapshot:
        player_ids, effect_ids, match_ids = list(player_ids), list(effect_ids), list(match_ids)
        prefix = ladder_key(ladder, "")
        reply = await self._read(
            keys=[prefix + "players", prefix + "effects", prefix + "meta", *(f"{prefix}m:{m}" for m in match_ids)],
            args=[_script_args([player_ids, effect_ids, match_ids])],
        )
        self.round_trips += 1
        states, effect_states, markers, watermark = msgpack.unpackb(reply, raw=False)
        make = PlayerState._make
        return Snapshot(
            players={i: make(s) for i, s in zip(player_ids, states) if s is not None},
            effects={i: make(s) for i, s in zip(effect_ids, effect_states) if s is not None},
            applied={m: events for m, events in zip(match_ids, markers) if events is not None},
            watermark=watermark or 0,
        )

    async def commit(self, commit: Commit) -> None:
        ladder, pack = commit.ladder, _PACKER.pack
        ids, states, expected, is_effect, scores = zip(*commit.writes) if commit.writes else ((),) * 5
        # Each event is packed once, for its marker and its history entry alike.
        marked = [e for events in commit.markers.values() for e in events]
        events = list(map(pack, marked))
        position = {id(e): i for i, e in enumerate(marked, 1)}
        entries = [position.get(id(e)) for history in commit.history.values() for e in history]
        if None in entries:  # history entries that are in no marker
            unmarked = (e for history in commit.history.values() for e in history)
            for n, e in enumerate(unmarked):
                if entries[n] is None:
                    events.append(pack(e))
                    entries[n] = len(events)
        batch = [
            ids, list(map(bool, is_effect)), expected, list(map(PlayerState.pack, states)), scores,
            events, list(commit.markers), [len(v) for v in commit.markers.values()],
            list(commit.history), [len(v) for v in commit.history.values()], entries,
        ]
        prefix = ladder_key(ladder, "")
        reply = await self._commit(
            keys=[prefix + "players", prefix + "effects", prefix + "lb", prefix + "meta",
                  *(f"{prefix}m:{m}" for m in commit.markers), *(f"{prefix}h:{p}" for p in commit.history)],
            args=[_script_args(batch), self.marker_ttl, self.history_limit],
        )
        self.round_trips += 1
        status = _text(reply[0])
        if status == "applied":
            match_id = list(commit.markers)[int(reply[1]) - 1]
            raise CommitConflict(f"match {match_id!r} already applied")
        if status == "conflict":
            raise CommitConflict(f"state of {_text(reply[1])!r} changed since it was read")

    async def players(self, ladder: str, effects: bool = False) -> dict[str, PlayerState]:
        key = ladder_key(ladder, "effects" if effects else "players")
        return {
            field.decode(): PlayerState.unpack(raw)
            async for field, raw in self.client.hscan_iter(key, count=1000)
        }

    async def leaderboard(self, ladder: str, top: int) -> list[tuple[str, float]]:
        rows = await self.client.zrevrange(ladder_key(ladder, "lb"), 0, top - 1, withscores=True)
        return [(member.decode(), float(score)) for member, score in rows]

    async def history(self, ladder: str, player_id: str, limit: int) -> list[dict]:
        rows = await self.client.lrange(ladder_key(ladder, f"h:{player_id}"), 0, limit - 1)
        return [msgpack.unpackb(raw, raw=False) for raw in rows]

    async def lookup(self, ladder: str, player_ids: Sequence[str]) -> Lookup:
        ids = list(player_ids)
        board = ladder_key(ladder, "lb")
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(ladder_key(ladder, "players"), ids) if ids else pipe.zcard(board)  # keyed: cluster-safe
            for player_id in ids:
                pipe.zrevrank(board, player_id)
            pipe.zcard(board)
            replies = await pipe.execute()
        self.round_trips += 1
        states = replies[0] if ids else []
        return Lookup(
            {i: PlayerState.unpack(s) for i, s in zip(ids, states) if s is not None},
            {i: place for i, place in zip(ids, replies[1:-1]) if place is not None},
            replies[-1],
        )

    async def ladders(self) -> list[str]:
        names = {
            key.decode()[len("sr:{"):-len("}:players")]
            async for key in self.client.scan_iter(match="sr:{*}:players", count=1000)
        }
        return sorted(names)

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except Exception:
            return False

    async def close(self) -> None:
        await self.client.aclose()
