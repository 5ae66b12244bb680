"""The Redis state store: one pipelined read and one atomic Lua commit per batch.

Key layout — every key of a ladder carries the hash tag ``{ladder}`` so the commit script is
valid on Redis Cluster, and ladders spread across shards:

- ``sr:{L}:players`` hash  player id → msgpack ``[mu, sigma, games, last_played, version]``
- ``sr:{L}:effects`` hash  effect name → same state form (context effects, never ranked)
- ``sr:{L}:lb``      zset  player id scored by display rating (the leaderboard)
- ``sr:{L}:m:<match_id>``  msgpack list of the rating-changed events the match produced
  (the "match applied" marker; optional TTL)
- ``sr:{L}:h:<player_id>`` list, newest first, of msgpack rating-changed events (capped)
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.resources import files
from typing import Any

import msgpack
import redis.asyncio as aioredis

from stream_rater.store.base import Commit, CommitConflict, PlayerState, Snapshot, StateStore

COMMIT_SCRIPT = files("stream_rater.store").joinpath("commit.lua").read_text()


def ladder_key(ladder: str, suffix: str) -> str:
    """The key ``sr:{ladder}:suffix``; the braces make `ladder` the cluster hash tag."""
    return f"sr:{{{ladder}}}:{suffix}"


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _pack_array(packed: list[bytes]) -> bytes:
    """A msgpack array of already-packed items: each event is packed once for both its
    marker and its history entry."""
    return _ARRAY_HEADER.pack_array_header(len(packed)) + b"".join(packed)


_ARRAY_HEADER = msgpack.Packer()


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False)


class RedisStore(StateStore):
    """`StateStore` on Redis or Redis Cluster (any client exposing the asyncio Redis API)."""

    def __init__(self, client: aioredis.Redis, history_limit: int = 100, marker_ttl: float = 0.0) -> None:
        self.client = client
        self.history_limit = history_limit
        self.marker_ttl = int(marker_ttl)
        self.round_trips = 0
        self._commit = client.register_script(COMMIT_SCRIPT)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStore:
        """A store on the Redis at `url` (``redis://``, ``rediss://`` for TLS, ``unix://``)."""
        return cls(aioredis.from_url(url), **kwargs)

    async def read(
        self, ladder: str, player_ids: Iterable[str], effect_ids: Iterable[str], match_ids: Iterable[str]
    ) -> Snapshot:
        player_ids, effect_ids, match_ids = list(player_ids), list(effect_ids), list(match_ids)
        pipe = self.client.pipeline(transaction=False)
        if player_ids:
            pipe.hmget(ladder_key(ladder, "players"), player_ids)
        if effect_ids:
            pipe.hmget(ladder_key(ladder, "effects"), effect_ids)
        if match_ids:
            pipe.mget([ladder_key(ladder, f"m:{m}") for m in match_ids])
        replies = iter(await pipe.execute())
        self.round_trips += 1

        def states(ids: list[str]) -> dict[str, PlayerState]:
            if not ids:
                return {}
            return {i: PlayerState.unpack(raw) for i, raw in zip(ids, next(replies)) if raw is not None}

        players, effects = states(player_ids), states(effect_ids)
        applied = (
            {m: _unpack(raw) for m, raw in zip(match_ids, next(replies)) if raw is not None}
            if match_ids
            else {}
        )
        return Snapshot(players=players, effects=effects, applied=applied)

    async def commit(self, commit: Commit) -> None:
        ladder = commit.ladder
        keys = [ladder_key(ladder, "players"), ladder_key(ladder, "effects"), ladder_key(ladder, "lb")]
        keys += [ladder_key(ladder, f"m:{m}") for m in commit.markers]
        keys += [ladder_key(ladder, f"h:{p}") for p in commit.history]
        args: list[Any] = [
            len(commit.writes), len(commit.markers), len(commit.history),
            self.marker_ttl, self.history_limit,
        ]
        for w in commit.writes:
            score = "" if w.leaderboard_score is None else repr(float(w.leaderboard_score))
            args += ["1" if w.is_effect else "0", w.player_id, w.expected_version, w.state.pack(), score]
        packed = {id(e): _pack(e) for events in commit.markers.values() for e in events}
        args += [_pack_array([packed[id(e)] for e in events]) for events in commit.markers.values()]
        for entries in commit.history.values():
            args.append(len(entries))
            args += [packed.get(id(e)) or _pack(e) for e in entries]
        reply = await self._commit(keys=keys, args=args)
        self.round_trips += 1
        status = reply[0].decode() if isinstance(reply[0], bytes) else reply[0]
        if status == "applied":
            match_id = list(commit.markers)[int(reply[1]) - 1]
            raise CommitConflict(f"match {match_id!r} already applied")
        if status == "conflict":
            player = reply[1].decode() if isinstance(reply[1], bytes) else reply[1]
            raise CommitConflict(f"state of {player!r} changed since it was read")

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
        return [_unpack(raw) for raw in rows]

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
