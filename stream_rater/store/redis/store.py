"""The Redis state store: a batch is read by one Lua script and committed by another, every
ladder of it in one round trip each way (see `StateStore.read_many`): on a single Redis one
call of the script for all of them, on a Redis Cluster one call per ladder, sent concurrently;
each ladder's part is atomic on its own.

Key layout — every key of a ladder carries the hash tag ``{ladder}`` so the scripts are
valid on Redis Cluster (all keys of a ladder live in one slot), and ladders spread across
shards. Every key starts with the store's prefix, ``sr`` unless ``STREAM_RATER_REDIS_PREFIX``
says otherwise (deployments sharing one Redis each have their own; ``<prefix>:deployment``
records the stored format, see `store.deployment`); below it is ``sr``.
A ladder's ratings live in a *generation* (see `StateStore`); generation 0's keys are
``sr:{L}:<suffix>``, generation g's ``sr:{L}:g<g>:<suffix>``:

- ``players`` hash  player id → msgpack ``[mu, sigma, games, last_played, version]``
- ``effects`` hash  effect name → same state form (context effects, never ranked)

  (these two hashes and ``mk`` also have a field '' that is no id: it keeps them hash tables,
  see ``commit.lua``)
- ``lb``      zset  player id scored by display rating (the leaderboard; on a ladder whose
  rules rank only some players, just those)
- ``act``     zset  ranked player id scored by their last match (only on ladders whose rules
  rank only recently active players)
- ``seasons`` list  ids of the season-start records applied, in order; ``lb:season:<id>`` the
  leaderboard as the season that record ended left it
- ``mk``      hash  match id → empty string: the "match applied" markers
- ``unproduced`` hash  match id → msgpack list of the rating-changed events the match
  produced, until they are with the broker (dropped by a later commit; see `store.base`); each
  event in the stored form of `stored_events` (a compact array)
- ``mk:expiry`` zset  of each commit's marker ids (msgpack list) scored by when they expire,
  with a marker TTL (the idempotency window): a commit removes the markers past it
- ``h:<player_id>`` list, newest first, of msgpack rating-changed events in the stored form
  of `stored_events` (capped)
- ``meta``    hash  ``applied`` → matches applied to the generation so far (the watermark:
  it only grows, so a read that finds less than a worker committed means the store lost
  data); ``p:<partition>`` → offset after the last record of the ladder applied

and per ladder, whatever the generation:

- ``sr:{L}:control`` hash ``topic`` the matches topic the ladder is applied from (its
  positions are offsets of it; `store.deployment`), ``live`` / ``staging`` generation, ``last`` generation handed out,
  ``params:<g>`` generation g's parameter overrides (msgpack), ``voids`` changes of the voids
  so far and ``voids:<g>`` how many generation g was built with
- ``sr:{L}:lock`` the re-rate lock (owner; expires) · ``sr:{L}:frozen`` set for the moment
  of a switch (live commits are refused while it exists; expires)
- ``sr:{L}:outbox`` correction events a switch stored, until they are sent
- ``sr:{L}:voids`` hash match id → msgpack ``{"reason", "at"}``

The scripts receive every key they touch in KEYS (so they are valid on Redis Cluster and under
any proxy that routes by declared keys), and take everything else as one msgpack map of named
fields rather than thousands of arguments, to keep the worker's CPU per batch low (redis-py
encodes every argument and parses every reply item in Python). A script refuses with a status
that `stream_rater.store.status` turns into an exception. The read script answers with
one msgpack document that splices the stored values in unchanged, so one `msgpack.unpackb`
decodes the whole snapshot. The client caches each ladder's live generation; a script that
finds another one says so and the client retries with it.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from importlib.resources import files
from typing import Any

import msgpack
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from stream_rater.config.settings import Settings
from stream_rater.store.base import (
    DEFAULT_TIMEOUTS,
    Commit,
    CommitConflict,
    Event,
    Generations,
    LockLost,
    Lookup,
    PlayerState,
    ReadRequest,
    RedisTimeouts,
    Snapshot,
    StateStore,
    Void,
)
from stream_rater.store.cluster import cluster_client, is_cluster_url
from stream_rater.store.deployment import check_prefix
from stream_rater.store.status import check_reply, text
from stream_rater.store.stored_events import PACKER, pack_event, pack_events, stored_event


def _script(name: str) -> str:
    """A Lua script of this package, after the msgpack helpers both scripts use."""
    lua = files("stream_rater.store")
    return lua.joinpath("common.lua").read_text() + lua.joinpath(name).read_text()


#: Connections a store opens at most (`RedisStore.from_url`).
MAX_CONNECTIONS = 64

READ_SCRIPT = _script("read.lua")
COMMIT_SCRIPT = _script("commit.lua")
CONTROL_SCRIPT = _script("control.lua")
BOARD_SCRIPT = _script("board.lua")
#: Most leaderboard entries one step of the board script reads: at about 2 µs each, a step
#: holds Redis for some 20 ms at most however large the ladder (bench leaderboard).
BOARD_STEP = 10_000

#: Keys of a ladder that belong to no generation.
LADDER_KEYS = ("control", "lock", "frozen", "outbox", "voids")


#: The key prefix of a store made without one (`Settings.redis_prefix`).
DEFAULT_PREFIX: str = Settings.redis_prefix


def ladder_key(ladder: str, suffix: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The key ``<prefix>:{ladder}:suffix``; the braces make `ladder` the cluster hash tag."""
    return f"{prefix}:{{{ladder}}}:{suffix}"


def generation_key(ladder: str, generation: int, suffix: str, prefix: str = DEFAULT_PREFIX) -> str:
    """A key of one generation of `ladder` (generation 0 has no infix)."""
    return ladder_key(ladder, f"g{generation}:{suffix}" if generation else suffix, prefix)


def _ladder_of_players(prefix: str) -> re.Pattern[str]:
    """A players key of any generation of the store with key `prefix`: its ladder."""
    return re.compile(rf"^{re.escape(prefix)}:\{{(.+)\}}:(?:g\d+:)?players$")


def _legacy_marker(prefix: str) -> re.Pattern[str]:
    """A marker key of the layout before the markers hash: ladder, generation (None for 0), match."""
    return re.compile(rf"^{re.escape(prefix)}:\{{([^}}]+)\}}:(?:g(\d+):)?m:(.+)$", re.DOTALL)


def _script_args(**fields: Any) -> bytes:
    """A script's argument: its named fields as one msgpack map, with raw strings because
    Redis's cmsgpack cannot read the bin type."""
    packed: bytes = msgpack.packb(fields, use_bin_type=False)
    return packed


def _mode(generation: int | None) -> str:
    """A script's ``mode``: which generation its keys must be of (see ``common.lua``)."""
    return "live" if generation is None else "staging"


def commit_args(
    commit: Commit, keys: int, generation: int, marker_ttl: int, history_cap: int, now: float
) -> bytes:
    """The commit script's argument for `commit`, whose `keys` keys it passes (its fields are
    described in ``commit.lua``); `now` is the client's clock (seconds), for the markers'
    expiry."""
    ladder = commit.ladder
    ids, states, expected, is_effect, scores, active = zip(*commit.writes) if commit.writes else ((),) * 6
    # Each event is packed once, for its match's unproduced events and its history entry alike.
    packed = {id(e): pack_event(e, ladder) for events in commit.markers.values() for e in events}
    unproduced = [events for events in commit.markers.values() if events]
    history = [
        packed.get(id(e)) or pack_event(e, ladder) for entries in commit.history.values() for e in entries
    ]
    marker_ids = list(commit.markers)
    return _script_args(
        keys=keys,
        generation=generation,
        mode=_mode(commit.generation),
        ids=ids,
        is_effect=list(map(bool, is_effect)),
        expected=expected,
        watermark=commit.read_at[1]
        if commit.read_at is not None and commit.read_at[0] == generation
        else None,
        states=list(map(PlayerState.pack, states)),
        scores=[None if score is None else repr(float(score)) for score in scores],
        activity=list(active) if any(a is not None for a in active) else None,
        season=commit.season,
        marker_ids=marker_ids,
        unproduced_at=[i for i, events in enumerate(commit.markers.values(), 1) if events],
        unproduced=[
            PACKER.pack_array_header(len(events)) + b"".join(packed[id(e)] for e in events)
            for events in unproduced
        ],
        produced=list(commit.produced),
        expiry=math.ceil(now + marker_ttl) if marker_ttl else None,
        expiring=msgpack.packb(marker_ids, use_bin_type=False) if marker_ttl else None,
        now=now,
        history_cap=history_cap,
        history_sizes=[len(v) for v in commit.history.values()],
        history=history,
        positions=dict(commit.positions),
    )


def _snapshot(request: ReadRequest, generation: int, reply: bytes) -> Snapshot:
    """The `Snapshot` in the read script's answer to `request` (on `generation`)."""
    states, effect_states, markers, watermark, voids, params = msgpack.unpackb(reply, raw=False)
    make = PlayerState.of
    return Snapshot(
        players={i: make(s) for i, s in zip(request.player_ids, states) if s is not None},
        effects={i: make(s) for i, s in zip(request.effect_ids, effect_states) if s is not None},
        applied={
            m: [stored_event(e, request.ladder) for e in events]
            for m, events in zip(request.match_ids, markers)
            if events is not None
        },
        watermark=watermark or 0,
        generation=generation,
        voided=frozenset(m for m, v in zip(request.match_ids, voids or ()) if v is not None),
        params=params,
    )


def _stored_states(ids: Iterable[str], values: Iterable[bytes | str | None]) -> dict[str, PlayerState]:
    """The states of `ids` from their HMGET `values`, leaving out the absent ones (None).
    Stored states are msgpack, which this store's clients answer as bytes."""
    return {i: PlayerState.unpack(raw) for i, raw in zip(ids, values) if isinstance(raw, bytes)}


class RedisStore(StateStore):
    """`StateStore` on Redis or Redis Cluster (any client exposing the asyncio Redis API)."""

    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        history_limit: int = 100,
        marker_ttl: float = 0.0,
        clock: Callable[[], float] = time.time,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self.namespace = f"the Redis store of prefix {prefix!r}"
        self.history_limit = history_limit
        self.marker_ttl = int(marker_ttl)
        self.clock = clock
        self.round_trips = 0
        self._read = client.register_script(READ_SCRIPT)
        self._commit = client.register_script(COMMIT_SCRIPT)
        self._control_script = client.register_script(CONTROL_SCRIPT)
        self._board_script = client.register_script(BOARD_SCRIPT)
        #: Ladder → its live generation as last seen (scripts check it, see the docstring).
        self._live: dict[str, int] = {}

    def _key(self, ladder: str, suffix: str) -> str:
        """`ladder_key` of this store's prefix."""
        return f"{self.prefix}:{{{ladder}}}:{suffix}"

    def _gen_key(self, ladder: str, generation: int, suffix: str) -> str:
        """`generation_key` of this store's prefix."""
        return self._key(ladder, f"g{generation}:{suffix}" if generation else suffix)

    @classmethod
    def from_url(
        cls,
        url: str,
        max_connections: int = MAX_CONNECTIONS,
        timeouts: RedisTimeouts = DEFAULT_TIMEOUTS,
        **kwargs: Any,
    ) -> RedisStore:
        """A store on the Redis at `url` (``redis://``, ``rediss://`` for TLS, ``unix://``), or
        on the Redis Cluster at ``redis+cluster://host:port[,host:port…]`` (``rediss+cluster://``
        for TLS; see `stream_rater.store.cluster`).

        At most `max_connections` connections (per cluster node); a request beyond them waits
        for a free one (rather than failing with "Too many connections", as concurrent reads of
        the read API under load otherwise do). Every connection waits as `timeouts` say."""
        options = timeouts.client_options()
        if is_cluster_url(url):
            return cls(cluster_client(url, max_connections, **options), **kwargs)
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, **options)
        return cls(aioredis.Redis(connection_pool=pool), **kwargs)

    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        snapshots: dict[int, Snapshot] = {}
        pending = list(range(len(requests)))
        while pending:  # again for the ladders whose live generation moved on
            calls = [self._read_call(requests[i]) for i in pending]
            replies = await self._run_script(self._read, [(keys, arg) for _, keys, arg in calls])
            again = []
            for i, (gen, _, _), reply in zip(pending, calls, replies):
                request = requests[i]
                if isinstance(reply, list):  # a refusal; an answer is one msgpack document
                    if text(reply[0]) != "generation":
                        check_reply(request.ladder, reply)  # raises
                    self._live[request.ladder] = int(reply[1])
                    again.append(i)
                else:
                    snapshots[i] = _snapshot(request, gen, reply)
            pending = again
        return [snapshots[i] for i in range(len(requests))]

    def _read_call(self, request: ReadRequest) -> tuple[int, list[str], bytes]:
        """The generation, keys and argument of the read script for `request`."""
        ladder, generation = request.ladder, request.generation
        gen = self._live.get(ladder, 0) if generation is None else generation
        prefix = self._gen_key(ladder, gen, "")
        keys = [
            prefix + "players",
            prefix + "effects",
            prefix + "meta",
            prefix + "mk",
            prefix + "unproduced",
            self._key(ladder, "control"),
            self._key(ladder, "voids"),
        ]
        arg = _script_args(
            players=request.player_ids,
            effects=request.effect_ids,
            matches=request.match_ids,
            generation=gen,
            mode=_mode(generation),
        )
        return gen, keys, arg

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        replies = await self._run_script(self._commit, [self._commit_call(c) for c in commits])
        outcomes: list[CommitConflict | None] = []
        for commit, reply in zip(commits, replies):
            if text(reply[0]) == "generation":
                self._live[commit.ladder] = int(reply[1])  # for the re-read after the conflict
            try:
                check_reply(commit.ladder, reply)
            except CommitConflict as refused:
                outcomes.append(refused)
            else:
                outcomes.append(None)
        return outcomes

    def _commit_call(self, commit: Commit) -> tuple[list[str], bytes]:
        """The keys and argument of the commit script for `commit`."""
        ladder = commit.ladder
        gen = self._live.get(ladder, 0) if commit.generation is None else commit.generation
        prefix = self._gen_key(ladder, gen, "")
        keys = [
            prefix + "players",
            prefix + "effects",
            prefix + "lb",
            prefix + "meta",
            self._key(ladder, "control"),
            self._key(ladder, "frozen"),
            prefix + "act",
            prefix + "seasons",
            prefix + "mk",
            prefix + "unproduced",
            prefix + "mk:expiry",
            *(f"{prefix}h:{p}" for p in commit.history),
        ]
        if commit.season is not None:
            keys.append(f"{prefix}lb:season:{commit.season}")
        return keys, commit_args(commit, len(keys), gen, self.marker_ttl, self.history_limit, self.clock())

    async def _run_script(self, script: AsyncScript, calls: Sequence[tuple[list[str], bytes]]) -> list[Any]:
        """The replies of `script` for each ladder's ``(keys, argument)`` of `calls`, each
        ladder's part atomic on its own, in one round trip: one call of the script for them
        all on a single Redis; on a Redis Cluster one call per ladder, sent concurrently (each
        to its ladder's master). A call that finds the script unloaded (a Redis restarted or
        flushed since) loads it and is sent again, an extra round trip `round_trips` does not
        count. If a call fails with an error rather than a reply, the first such error is
        raised once every call is answered."""
        if not calls:
            return []
        self.round_trips += 1
        if not isinstance(self.client, RedisCluster):
            keys = [key for call_keys, _ in calls for key in call_keys]
            replies: list[Any] = await script(keys=keys, args=[arg for _, arg in calls])
            return replies
        answered = await asyncio.gather(
            *(script(keys=keys, args=[arg]) for keys, arg in calls), return_exceptions=True
        )
        ladders: list[Any] = []
        for reply in answered:
            if isinstance(reply, BaseException):
                raise reply
            ladders.append(reply[0])
        return ladders

    async def _live_generation(self, ladder: str) -> int:
        """The ladder's live generation, asked of Redis (and cached)."""
        live = await self.client.hget(self._key(ladder, "control"), "live")
        self._live[ladder] = int(live or 0)
        return self._live[ladder]

    async def _on_live(self, ladder: str, build: Callable[[Any, int], None]) -> list[Any]:
        """Replies of the commands `build(pipeline, generation)` queues for the live
        generation, in one round trip that also checks the cached generation is live."""
        while True:
            gen = self._live.get(ladder, 0)
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hget(self._key(ladder, "control"), "live")
                build(pipe, gen)
                replies = await pipe.execute()
            self.round_trips += 1
            if int(replies[0] or 0) == gen:
                return replies[1:]
            self._live[ladder] = int(replies[0] or 0)

    async def players(
        self,
        ladder: str,
        effects: bool = False,
        generation: int | None = None,
        only: Collection[str] | None = None,
    ) -> dict[str, PlayerState]:
        gen = await self._live_generation(ladder) if generation is None else generation
        key = self._gen_key(ladder, gen, "effects" if effects else "players")
        if only is not None:
            ids = list(only)
            found = await self.client.hmget(key, ids) if ids else []
            return _stored_states(ids, found)
        return {
            field.decode(): PlayerState.unpack(raw)
            async for field, raw in self.client.hscan_iter(key, count=1000)
            if field  # the field '' is commit.lua's, not a player
        }

    async def leaderboard(
        self, ladder: str, top: int, start: int = 0, season: int | None = None
    ) -> list[tuple[str, float]]:
        board = "lb"
        if season is not None:
            ended = await self.seasons(ladder)
            if not 1 <= season <= len(ended):
                raise KeyError(season)
            board = f"lb:season:{ended[season - 1]}"
        [rows] = await self._on_live(
            ladder,
            lambda pipe, gen: pipe.zrevrange(
                self._gen_key(ladder, gen, board), start, start + top - 1, withscores=True
            ),
        )
        return [(member.decode(), float(score)) for member, score in rows]

    async def seasons(self, ladder: str) -> list[str]:
        [ids] = await self._on_live(
            ladder, lambda pipe, gen: pipe.lrange(self._gen_key(ladder, gen, "seasons"), 0, -1)
        )
        return [text(i) for i in ids]

    async def active_leaderboard(self, ladder: str, top: int, since: float) -> list[tuple[str, float]]:
        rows: list[tuple[str, float]] = []
        cursor = 0
        while cursor >= 0 and len(rows) < top:
            step = await self._board(ladder, mode="top", since=since, cursor=cursor, top=top - len(rows))
            cursor = int(step[0])
            rows += [(text(step[i]), float(step[i + 1])) for i in range(1, len(step), 2)]
        return rows

    async def active_places(
        self, ladder: str, player_ids: Sequence[str], since: float
    ) -> tuple[dict[str, int], int]:
        ids = list(player_ids)
        counts = [0] * len(ids)
        cursor, path, total = 0, None, 0
        while cursor >= 0:
            step = await self._board(ladder, mode="places", since=since, ids=ids, cursor=cursor, path=path)
            total, path, cursor = int(step[0]), text(step[1]), int(step[2])
            counts = [c + n if n >= 0 and c >= 0 else -1 for c, n in zip(counts, step[3:])]
        return {p: c for p, c in zip(ids, counts) if c >= 0}, total

    async def _board(self, ladder: str, **fields: Any) -> list[Any]:
        """One step of the board script on the ladder's live leaderboard (see ``board.lua``):
        the live generation is asked first (one more round trip, so that a switch by another
        process is never missed)."""
        gen = await self._live_generation(ladder)
        self.round_trips += 2
        keys = [self._gen_key(ladder, gen, "lb"), self._gen_key(ladder, gen, "act")]
        reply: list[Any] = await self._board_script(
            keys=keys, args=[_script_args(budget=BOARD_STEP, **fields)]
        )
        return reply

    async def history(self, ladder: str, player_id: str, limit: int) -> list[Event]:
        [rows] = await self._on_live(
            ladder, lambda pipe, gen: pipe.lrange(self._gen_key(ladder, gen, f"h:{player_id}"), 0, limit - 1)
        )
        return [stored_event(msgpack.unpackb(raw, raw=False), ladder) for raw in rows]

    async def lookup(self, ladder: str, player_ids: Sequence[str]) -> Lookup:
        ids = list(player_ids)

        def build(pipe: Any, gen: int) -> None:
            board = self._gen_key(ladder, gen, "lb")
            pipe.hmget(self._gen_key(ladder, gen, "players"), ids) if ids else pipe.zcard(
                board
            )  # keyed: cluster-safe
            for player_id in ids:
                pipe.zrevrank(board, player_id)
            pipe.zcard(board)

        replies = await self._on_live(ladder, build)
        states = replies[0] if ids else []
        return Lookup(
            _stored_states(ids, states),
            {i: place for i, place in zip(ids, replies[1:-1]) if place is not None},
            replies[-1],
        )

    async def ladders(self) -> list[str]:
        names = set()
        of_players = _ladder_of_players(self.prefix)
        async for key in self.client.scan_iter(match=self.prefix + ":{*players", count=1000):
            found = of_players.match(key.decode())
            if found:
                names.add(found.group(1))
        return sorted(names)

    async def _control(
        self, ladder: str, step: str, owner: str, seconds: float, live: int = 0, **fields: Any
    ) -> list[Any]:
        """Run one re-rate `step` of the control script on `ladder` whose live generation is
        `live` (its other `fields` are described in ``control.lua``); raise what a refusal
        means."""
        reply: list[Any] = await self._control_script(
            keys=[self._key(ladder, k) for k in ("control", "lock", "frozen", "outbox")]
            + [self._gen_key(ladder, live, "meta")],
            args=[_script_args(step=step, owner=owner, ms=max(1, int(seconds * 1000)), live=live, **fields)],
        )
        check_reply(ladder, reply)
        return reply

    async def generations(self, ladder: str) -> Generations:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self._key(ladder, "control"))
            pipe.get(self._key(ladder, "lock"))
            control, lock = await pipe.execute()
        control = {text(k): v for k, v in control.items()}
        live = int(control.get("live", 0))
        meta = await self.client.hgetall(self._gen_key(ladder, live, "meta"))
        params = control.get(f"params:{live}")
        return Generations(
            live=live,
            staging=int(control["staging"]) if "staging" in control else None,
            positions={int(text(k)[2:]): int(v) for k, v in meta.items() if text(k).startswith("p:")},
            params=msgpack.unpackb(params, raw=False) if params else None,
            lock_owner=text(lock) if lock else None,
            voids_pending=control.get(f"voids:{live}", b"0") != control.get("voids", b"0"),
        )

    async def begin_rerate(
        self, ladder: str, owner: str, lease: float, params: Mapping[str, Any] | None
    ) -> tuple[int, int | None]:
        overrides = msgpack.packb(dict(params), use_bin_type=False) if params else None
        reply = await self._control(ladder, "begin", owner, lease, params=overrides)
        abandoned = int(reply[2])
        return int(reply[1]), abandoned if abandoned >= 0 else None

    async def renew(self, ladder: str, owner: str, lease: float) -> None:
        await self._control(ladder, "renew", owner, lease)

    async def freeze(self, ladder: str, owner: str, ttl: float) -> None:
        await self._control(ladder, "freeze", owner, ttl)

    async def switch(
        self, ladder: str, owner: str, staging: int, live: Generations, outbox: Sequence[Event]
    ) -> None:
        await self._control(
            ladder,
            "switch",
            owner,
            0,
            live=live.live,
            staging=staging,
            positions=dict(live.positions),
            outbox=msgpack.packb(list(outbox), use_bin_type=True),
        )
        self._live[ladder] = staging

    async def finish_rerate(self, ladder: str, owner: str) -> None:
        await self._control(ladder, "finish", owner, 0)

    async def abort_rerate(self, ladder: str, owner: str) -> int | None:
        try:
            reply = await self._control(ladder, "abort", owner, 0)
        except LockLost:
            return None
        staging = int(reply[1])
        return staging if staging >= 0 else None

    async def drop_generation(self, ladder: str, generation: int) -> None:
        found = await self.generations(ladder)
        if generation in (found.live, found.staging):
            return
        if generation:
            patterns = [self._gen_key(ladder, generation, "*")]
            keys = []
        else:
            patterns = [self._key(ladder, "h:*"), self._key(ladder, "lb:season:*")]
            keys = [
                self._key(ladder, k)
                for k in (
                    "players",
                    "effects",
                    "lb",
                    "meta",
                    "act",
                    "seasons",
                    "mk",
                    "unproduced",
                    "mk:expiry",
                )
            ]
        for pattern in patterns:
            async for key in self.client.scan_iter(match=pattern, count=1000):
                keys.append(key)
                if len(keys) >= 500:
                    await self.client.unlink(*keys)
                    keys = []
        if keys:
            await self.client.unlink(*keys)
        await self.client.hdel(self._key(ladder, "control"), f"params:{generation}", f"voids:{generation}")

    async def outbox(self, ladder: str) -> list[Event]:
        raw = await self.client.get(self._key(ladder, "outbox"))
        return msgpack.unpackb(raw, raw=False) if raw else []

    async def unproduced(self, ladder: str, generation: int, match_ids: Sequence[str]) -> list[str]:
        if not match_ids:
            return []
        held = await self.client.hmget(self._gen_key(ladder, generation, "unproduced"), list(match_ids))
        return [m for m, events in zip(match_ids, held) if events is not None]

    async def hold_events(self, ladder: str, generation: int, events: Mapping[str, list[Event]]) -> None:
        ids = [m for m, held in events.items() if held]
        marked = await self.client.hmget(self._gen_key(ladder, generation, "mk"), ids) if ids else []
        held = [m for m, marker in zip(ids, marked) if marker is not None]
        if held:
            pairs = [value for m in held for value in (m, pack_events(events[m], ladder))]
            await self.client.hset(self._gen_key(ladder, generation, "unproduced"), items=pairs)

    async def migrate_markers(self) -> int:
        """Move the markers of the layout before the markers hash — a key ``m:<match_id>`` per
        match, holding the events not yet produced, expiring with the marker — into ``mk``,
        ``unproduced`` and ``mk:expiry``; returns how many were moved. For an upgrade, with no
        worker running: a marker left behind would let its match be applied again."""
        moved = 0
        found: list[tuple[bytes, str, int, str]] = []
        marker = _legacy_marker(self.prefix)
        async for key in self.client.scan_iter(match=self.prefix + ":{*}:*m:*", count=1000):
            legacy = marker.match(key.decode())
            if legacy:
                ladder, generation, match_id = legacy.groups()
                found.append((key, ladder, int(generation or 0), match_id))
            if len(found) >= 500:
                moved += await self._move_markers(found)
                found = []
        return moved + await self._move_markers(found)

    async def _move_markers(self, found: Sequence[tuple[bytes, str, int, str]]) -> int:
        """Move legacy markers, each ``(key, ladder, generation, match id)`` (see
        `migrate_markers`); returns how many still existed."""
        async with self.client.pipeline(transaction=False) as pipe:
            for key, *_ in found:
                pipe.get(key)
                pipe.pttl(key)
            replies = await pipe.execute()
        now = self.clock()
        moved = 0
        async with self.client.pipeline(transaction=False) as pipe:
            for (key, ladder, generation, match_id), value, ttl in zip(found, replies[0::2], replies[1::2]):
                if value is None:  # expired meanwhile
                    continue
                prefix = self._gen_key(ladder, generation, "")
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

    async def voids(self, ladder: str) -> dict[str, Void]:
        rows = await self.client.hgetall(self._key(ladder, "voids"))
        return {text(k): msgpack.unpackb(v, raw=False) for k, v in rows.items()}

    async def set_voids(
        self, ladder: str, add: Mapping[str, Void], remove: Iterable[str], generation: int
    ) -> None:
        key, control, remove = self._key(ladder, "voids"), self._key(ladder, "control"), list(remove)
        async with self.client.pipeline(transaction=True) as pipe:
            if add:
                pipe.hset(key, mapping={m: PACKER.pack(why) for m, why in add.items()})
            if remove:
                pipe.hdel(key, *remove)
            if add or remove:
                pipe.hincrby(control, "voids", 1)
            pipe.hget(control, "voids")
            version = (await pipe.execute())[-1]
        await self.client.hset(control, f"voids:{generation}", version or 0)

    async def deployment_record(self, fields: Mapping[str, str] | None = None) -> dict[str, str]:
        key = self.prefix + ":deployment"
        async with self.client.pipeline(transaction=False) as pipe:
            for name, value in (fields or {}).items():
                pipe.hsetnx(key, name, value)
            pipe.hgetall(key)
            record = (await pipe.execute())[-1]
        return {text(k): text(v) for k, v in record.items()}

    async def ladder_topics(self, ladders: Sequence[str], topic: str | None) -> dict[str, str]:
        async with self.client.pipeline(transaction=False) as pipe:
            for ladder in ladders:
                if topic is not None:
                    pipe.hsetnx(self._key(ladder, "control"), "topic", topic)
                pipe.hget(self._key(ladder, "control"), "topic")
            replies = await pipe.execute()
        found = replies[1::2] if topic is not None else replies
        return {ladder: text(bound) for ladder, bound in zip(ladders, found) if bound is not None}

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except Exception:
            return False

    async def close(self) -> None:
        await self.client.aclose()
