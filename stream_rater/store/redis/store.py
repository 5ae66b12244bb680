"""The Redis state store: a batch is read by one Lua script and committed by another, every
ladder of it in one round trip each way (see `BatchStore.read_many`): on a single Redis one
call of the script for all of them, on a Redis Cluster one call per ladder, sent concurrently;
each ladder's part is atomic on its own. The keys are described in `keys`, the scripts'
arguments in `scripts`; the re-rate control is `control.RerateControl`, the leaderboard reads
`leaderboard.LeaderboardReads`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import msgpack
import redis.asyncio as aioredis
from redis import exceptions
from redis.asyncio.cluster import RedisCluster

from stream_rater.config.settings import DEFAULT_HISTORY
from stream_rater.store.base import StateStore
from stream_rater.store.deployment import EARLIEST_FORMAT, STORE_FORMAT, check_prefix
from stream_rater.store.redis.boards import LIMIT as KNOWN_BOARDS
from stream_rater.store.redis.boards import KnownBoards
from stream_rater.store.redis.cluster import cluster_client, is_cluster_url
from stream_rater.store.redis.control import RerateControl
from stream_rater.store.redis.keys import (
    BUCKETS,
    DEFAULT_PREFIX,
    HISTORY_SLOTS,
    bucket,
    grouped,
    history_slot,
    ladder_of_meta,
    marker_slots,
)
from stream_rater.store.redis.leaderboard import LeaderboardReads
from stream_rater.store.redis.lean import ScriptCall, lean_script, ready
from stream_rater.store.redis.mode_boards import mode_boards
from stream_rater.store.redis.resp import HiredisPacking
from stream_rater.store.redis.scripts import (
    BOARD_SCRIPT,
    COMMIT_SCRIPT,
    CONTROL_SCRIPT,
    READ_SCRIPT,
    SCAN_SCRIPT,
    SCAN_STEP,
    Buckets,
    commit_args,
    format_fields,
    read_args,
    script_args,
    snapshot,
    staged_commit_args,
    stored_states,
)
from stream_rater.store.status import check_reply, text
from stream_rater.store.stored_events import unpack_entries
from stream_rater.store.values import (
    DEFAULT_TIMEOUTS,
    Commit,
    CommitConflict,
    Event,
    PlayerState,
    ReadRequest,
    RedisTimeouts,
    Snapshot,
    trim_since,
)

#: Connections a store opens at most (`RedisStore.from_url`).
MAX_CONNECTIONS = 64
#: The value of the field '' of a hash of staged events: longer than Redis's
#: hash-max-listpack-value, so that the hash is a hash table from its first entry (as
#: ``commit.lua``'s unproduced hash).
HASH_TABLE = b"-" * 4096


class RedisStore(RerateControl, LeaderboardReads, StateStore):
    """`StateStore` on Redis or Redis Cluster (any client exposing the asyncio Redis API)."""

    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        history_limit: int = DEFAULT_HISTORY,
        marker_ttl: float = 0.0,
        clock: Callable[[], float] = time.time,
        prefix: str = DEFAULT_PREFIX,
        known_boards: int = KNOWN_BOARDS,
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self.namespace = f"the Redis store of prefix {prefix!r}"
        self.history_limit = history_limit
        self.marker_ttl = int(marker_ttl)
        self.clock = clock
        self.round_trips = 0
        self._read = lean_script(client, READ_SCRIPT)  # the read API's calls: lean
        self._commit = client.register_script(COMMIT_SCRIPT)
        self._control_script = client.register_script(CONTROL_SCRIPT)
        self._board_script = lean_script(client, BOARD_SCRIPT)
        self._scan_script = client.register_script(SCAN_SCRIPT)
        #: Ladder → its live generation as last seen (scripts check it, see the docstring).
        self._live: dict[str, int] = {}
        #: What this store's commits left on the leaderboards (`boards.KnownBoards`).
        self.known_boards = KnownBoards(known_boards)
        #: The stored format its commits write (`store.deployment`): the record's as its first
        #: commit reads it (none: a new store, this release's), kept for the store's life. On
        #: a format-2 store (workers of the release before may share it) each commit writes
        #: format 2 (``commit.lua``, ``format``); one raised meanwhile is written so from the
        #: next store opened on (a worker's next start).
        self.stored_format: int | None = None

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
        for TLS; see `stream_rater.store.redis.cluster`).

        At most `max_connections` connections (per cluster node); a request beyond them waits
        for a free one (rather than failing with "Too many connections", as concurrent reads of
        the read API under load otherwise do). Every connection waits as `timeouts` say."""
        options = timeouts.client_options(url)
        if is_cluster_url(url):
            return cls(cluster_client(url, max_connections, **options), **kwargs)
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, **options)
        plain = pool.connection_class  # by the URL's scheme: TCP, TLS or a Unix socket
        pool.connection_class = type(plain.__name__, (HiredisPacking, plain), {})
        return cls(aioredis.Redis(connection_pool=pool), **kwargs)

    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        snapshots: dict[int, Snapshot] = {}
        pending = list(range(len(requests)))
        while pending:  # again for the ladders whose live generation moved on
            calls = [self._read_call(requests[i]) for i in pending]
            replies = await self._run_script(self._read, [(keys, [arg]) for _, keys, arg in calls])
            again = []
            for i, (gen, _, _), reply in zip(pending, calls, replies):
                request = requests[i]
                if isinstance(reply, list):  # a refusal; an answer is one msgpack document
                    if text(reply[0]) != "generation":
                        check_reply(request.ladder, reply)  # raises
                    self._live[request.ladder] = int(reply[1])
                    again.append(i)
                else:
                    snapshots[i] = snapshot(request, gen, reply)
            pending = again
        return [snapshots[i] for i in range(len(requests))]

    def _read_call(self, request: ReadRequest) -> tuple[int, list[str], bytes]:
        """The generation, keys and argument of the read script for `request`."""
        ladder, generation = request.ladder, request.generation
        gen = self._live.get(ladder, 0) if generation is None else generation
        players, markers, fields = read_args(request, gen, self.clock(), self.marker_ttl)
        keys = self.read_keys(ladder, gen, players, markers)
        return gen, keys, script_args(keys=len(keys), **fields)

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        try:
            return await self._commit_many(commits)
        finally:  # the ladders of calls not answered are forgotten
            self.known_boards.forget(commits)

    async def _commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        if self.stored_format is None:
            recorded = await self.client.hget(self.prefix + ":deployment", "format")
            self.stored_format = int(recorded or EARLIEST_FORMAT)
        if isinstance(self.client, RedisCluster):  # one script call per ladder, events as arguments
            replies = await self._run_script(self._commit, [self._commit_call(c)[:2] for c in commits])
        elif commits:
            replies = await self._staged_commit([self._commit_call(c, staged=True) for c in commits])
        else:
            replies = []
        outcomes: list[CommitConflict | None] = []
        for commit, reply in zip(commits, replies):
            self.known_boards.answered(commit, reply)
            if text(reply[0]) == "generation":
                self._live[commit.ladder] = int(reply[1])  # for the re-read after the conflict
            try:
                check_reply(commit.ladder, reply)
            except CommitConflict as refused:
                outcomes.append(refused)
            else:
                outcomes.append(None)
        return outcomes

    def _commit_call(
        self, commit: Commit, staged: bool = False
    ) -> tuple[list[str], list[bytes | str], Staged]:
        """The keys and arguments of the commit script for `commit`, and (`staged`, where it
        has events kept until produced) its key ``unproduced:staged`` (among the keys, the last
        but a moded ladder's boards') with the events to stage there first: match id, events, …"""
        sent = commit  # the one `commit_many` answers (`known_boards`)
        if not self.history_limit:  # Redis keeps no history: the archive answers it
            commit = dataclasses.replace(commit, history={})
        ladder = commit.ladder
        gen = self._live.get(ladder, 0) if commit.generation is None else commit.generation
        now = self.clock()
        buckets = Buckets.of(commit, now, self.marker_ttl)
        keys = self.commit_keys(ladder, gen, buckets.keys(), commit.season, commit.quality)
        staging = staged and any(commit.markers.values())
        if staging:
            keys.append(self._gen_key(ladder, gen, "unproduced:staged"))
        at = len(keys)
        boards = mode_boards(self, ladder, gen, commit)  # a moded ladder's: last, after the others
        keys += boards[0]
        since = trim_since(commit, now)
        known = self.known_boards.fields(sent, gen, since, boards[1])
        more: dict[str, Any] = {
            "trim_since": since,
            "more": {**boards[1], **known, **format_fields(self.stored_format or STORE_FORMAT)},
        }
        if not staging:
            return keys, commit_args(commit, len(keys), gen, buckets, self.history_limit, **more), None
        args, events = staged_commit_args(commit, len(keys), gen, buckets, self.history_limit, at, **more)
        return keys, args, (keys[at - 1], events)

    async def _staged_commit(self, calls: Sequence[tuple[list[str], list[bytes | str], Staged]]) -> list[Any]:
        """The commit script's replies for `calls` (`_commit_call`, staged), in one round trip:
        one transaction that stages each ladder's events and then calls the script for all
        ladders. The events so reach Redis as one plain ``HSET`` per ladder, never as Lua
        strings; the staged key is emptied first (of what a failed transaction may have left)
        and gets the field '' first, that makes it a hash table from the start (``commit.lua``)."""
        commands: list[tuple[Any, ...]] = []
        for _, _, staged in calls:
            if staged is not None:
                key, events = staged
                commands += [("DEL", key), ("HSET", key, "", HASH_TABLE, *events)]
        keys = [key for call_keys, _, _ in calls for key in call_keys]
        args = [arg for _, call_args, _ in calls for arg in call_args]
        self.round_trips += 1
        return await self._transaction(commands, keys, args)  # type: ignore[no-any-return]

    async def _transaction(self, commands: list[tuple[Any, ...]], keys: list[str], args: list[Any]) -> Any:
        """The commit script's reply for `keys` and `args`, called after `commands` in one
        MULTI/EXEC written on a pooled connection (as `lean.LeanScript` writes a call): a
        refusal Redis gives a queued command (``OOM``, ``READONLY``, …) is raised as Redis
        gave it; a script Redis does not know is loaded and the transaction sent again."""
        script = ("EVALSHA", self._commit.sha, len(keys), *keys, *args)
        pool = self.client.connection_pool  # type: ignore[union-attr]  # a single Redis's
        conn = await pool.get_connection()
        try:
            await ready(conn)
            replies = await _exec(conn, [*commands, script])
            if isinstance(replies[-1], exceptions.NoScriptError):
                await conn.send_command("SCRIPT", "LOAD", self._commit.script)
                await conn.read_response()
                replies = await _exec(conn, [*commands, script])
        except exceptions.ResponseError:  # an error reply: the connection is in step
            await pool.release(conn)
            raise
        except BaseException:  # mid-call: what is left on the connection is unknown
            await conn.disconnect(nowait=True)
            await pool.release(conn)
            raise
        await pool.release(conn)
        if isinstance(replies[-1], exceptions.ResponseError):
            raise replies[-1]
        return replies[-1]

    async def _run_script(
        self, script: ScriptCall, calls: Sequence[tuple[list[str], Sequence[bytes | str]]]
    ) -> list[Any]:
        """The replies of `script` for each ladder's ``(keys, arguments)`` of `calls`, each
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
            replies: list[Any] = await script(keys=keys, args=[arg for _, args in calls for arg in args])
            return replies
        answered = await asyncio.gather(
            *(script(keys=keys, args=args) for keys, args in calls), return_exceptions=True
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
        if effects:
            key = self._gen_key(ladder, gen, "effects")
            if only is not None:
                ids = list(only)
                return stored_states(ids, await self.client.hmget(key, ids) if ids else [])
            rows = await self.client.hgetall(key)
            named = {text(f): raw for f, raw in rows.items() if f}  # '' is commit.lua's, no effect
            return stored_states(named, named.values())
        if only is not None:
            return await self._bucketed(ladder, gen, "players", list(only))
        return await self.scan_buckets(ladder, gen, "players")

    async def scan_buckets(self, ladder: str, generation: int, kind: str) -> dict[str, PlayerState]:
        """Every state in the ``<kind>:<b>`` buckets of `ladder`'s `generation`: `SCAN_STEP`
        buckets per call of the scan script (each call atomic, the whole not: as HSCAN)."""
        found: dict[str, PlayerState] = {}
        for first in range(0, BUCKETS, SCAN_STEP):
            keys = self.bucket_keys(ladder, generation, kind, range(first, first + SCAN_STEP))
            rows = await self._scan_script(keys=keys, args=[])
            self.round_trips += 1
            found.update((text(rows[i]), PlayerState.unpack(rows[i + 1])) for i in range(0, len(rows), 2))
        return found

    async def _bucketed(
        self, ladder: str, generation: int, kind: str, ids: list[str]
    ) -> dict[str, PlayerState]:
        """The states of `ids` in the ``<kind>:<b>`` buckets, one HMGET per bucket, pipelined."""
        if not ids:
            return {}
        buckets, index = grouped(ids, bucket)
        groups: list[list[str]] = [[] for _ in buckets]
        for i, at in zip(ids, index):
            groups[at - 1].append(i)
        keys = self.bucket_keys(ladder, generation, kind, buckets)
        async with self.client.pipeline(transaction=False) as pipe:
            for key, group in zip(keys, groups):
                pipe.hmget(key, group)
            replies = await pipe.execute()
        self.round_trips += 1
        return {i: s for group, found in zip(groups, replies) for i, s in stored_states(group, found).items()}

    async def leaderboard(
        self, ladder: str, top: int, start: int = 0, season: int | None = None
    ) -> list[tuple[str, float]]:
        board = "lb" if season is None else f"lb:season:{await self._season_id(ladder, season)}"
        [rows] = await self._on_live(
            ladder,
            lambda pipe, gen: pipe.zrevrange(
                self._gen_key(ladder, gen, board), start, start + top - 1, withscores=True
            ),
        )
        return [(member.decode(), float(score)) for member, score in rows]

    async def season_states(
        self, ladder: str, season: int, player_ids: Sequence[str]
    ) -> dict[str, PlayerState]:
        season_id = await self._season_id(ladder, season)
        ids = list(player_ids)
        if not ids:
            return {}
        archive = f"players:season:{season_id}"
        gen = await self._live_generation(ladder)
        return await self._bucketed(ladder, gen, archive, ids)

    async def seasons(self, ladder: str) -> list[str]:
        [ids] = await self._on_live(
            ladder, lambda pipe, gen: pipe.lrange(self._gen_key(ladder, gen, "seasons"), 0, -1)
        )
        return [text(i) for i in ids]

    async def history(self, ladder: str, player_id: str, limit: int) -> list[Event]:
        if not self.history_limit:
            return []
        fields = [history_slot(player_id, n, HISTORY_SLOTS) for n in range(HISTORY_SLOTS)]

        def build(pipe: Any, gen: int) -> None:
            pipe.hget(self._gen_key(ladder, gen, "meta"), "model")
            pipe.hmget(self._gen_key(ladder, gen, f"players:{bucket(player_id)}"), fields)

        model, chunks = await self._on_live(ladder, build)
        newest = sorted((c for c in chunks if c), key=lambda c: int.from_bytes(c[:4], "big"), reverse=True)
        events = unpack_entries(
            b"".join(c[4:] for c in newest), ladder, player_id, text(model) if model else None
        )
        return events[: min(limit, self.history_limit)]

    async def quality(self, ladder: str, scorer: str, last: int) -> tuple[dict[str, float], list[list[Any]]]:
        def build(pipe: Any, gen: int) -> None:
            pipe.hgetall(self._gen_key(ladder, gen, f"q:{scorer}"))
            pipe.lrange(self._gen_key(ladder, gen, f"qw:{scorer}"), 0, max(last, 1) - 1)

        sums, window = await self._on_live(ladder, build)
        scores = [msgpack.unpackb(raw, raw=False) for raw in window[:last]]
        return {text(k): float(v) for k, v in sums.items() if k}, scores  # '' keeps it a hash table

    async def placings(self, ladder: str, match_id: str) -> list[tuple[str, int]] | None:
        if not match_id:  # a busy markers slot's field '' (commit.lua) is no match's marker
            return None
        slots = marker_slots(self.clock(), self.marker_ttl)[0]

        def build(pipe: Any, gen: int) -> None:
            for key in self.bucket_keys(ladder, gen, "mk", slots):
                pipe.hget(key, match_id)

        found = [raw for raw in await self._on_live(ladder, build) if raw is not None]
        if not found:
            return None  # never applied, or past the markers' window
        return [(p, r) for p, r in msgpack.unpackb(found[0], raw=False)] if found[0] else []

    async def ladders(self) -> list[str]:
        names = set()
        of_meta = ladder_of_meta(self.prefix)
        async for key in self.client.scan_iter(match=self.prefix + ":{*meta", count=1000):
            found = of_meta.match(key.decode())
            if found:
                names.add(found.group(1))
        return sorted(names)

    async def unrecorded_format(self) -> int | None:
        """1 if any generation has a format-1 ``players`` hash (format 2's are ``players:<b>``)
        or a format-1 ``mk`` hash, else None (a store new, or of a later format not recorded yet)."""
        async for _ in self.client.scan_iter(match=self.prefix + ":{*:players", count=1000):
            return 1
        async for _ in self.client.scan_iter(match=self.prefix + ":{*:mk", count=1000):
            return 1
        return None

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


#: A commit's staged events (`RedisStore._commit_call`): its staged key and match id, events, …
Staged = tuple[str, list[bytes | str]] | None


async def _exec(conn: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    """The replies of `commands` in one MULTI/EXEC on `conn` (errors of the commands run are
    in the list); the first refusal of a queued command raised (the transaction did nothing)."""
    await conn.send_packed_command(conn.pack_commands([("MULTI",), *commands, ("EXEC",)]), check_health=False)
    refused: exceptions.ResponseError | None = None
    for _ in range(len(commands) + 1):  # +OK, then QUEUED per command (or its refusal)
        try:
            await conn.read_response()
        except exceptions.ResponseError as error:
            refused = refused or error
    try:
        replies: list[Any] = await conn.read_response()
    except exceptions.ExecAbortError:
        if refused is not None:
            raise refused from None
        raise
    return replies
