"""The Redis store's re-rate control (`store.roles.RerateStore` beyond the batch path) and
voids: the control script's steps, generations, dropping one, outbox, held events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import msgpack
import redis.asyncio as aioredis
from redis import exceptions
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from stream_rater.store.packing import pack
from stream_rater.store.redis.keys import CONTROL_KEYS, STAGED_KEYS, KeyLayout
from stream_rater.store.redis.scripts import script_args
from stream_rater.store.status import check_reply, text
from stream_rater.store.stored_events import stored_event
from stream_rater.store.values import Event, Generations, LockLost, Void
from stream_rater.waiting import backoff

#: Correction events per call of the control script's ``stage`` step: each call is short, so
#: that staging ten thousand of them never holds Redis for long.
STAGE_CHUNK = 1000
#: Times a control step is sent on a single Redis when its reply does not come (a connection
#: cut or timed out after the request: the step may have run; each step is safe to run again,
#: see ``control.lua``), over some 3-5 s in all (a Redis restarting; less than half the default
#: lease). A Redis Cluster's client sends commands again itself (redis-py).
STEP_ATTEMPTS = 7


def _put(events: Sequence[Event]) -> list[Any]:
    """The ``put`` argument of the control script: player id, msgpack event, player id, …"""
    return [
        item for event in events for item in (event["player_id"], msgpack.packb(event, use_bin_type=True))
    ]


class RerateControl(KeyLayout):
    """The re-rate and voids methods of `RedisStore` (which sets these attributes)."""

    client: aioredis.Redis | RedisCluster
    _control_script: AsyncScript
    #: Ladder → its live generation as last seen.
    _live: dict[str, int]

    async def _control(
        self,
        ladder: str,
        step: str,
        owner: str,
        seconds: float,
        live: int = 0,
        staging: int = 0,
        **fields: Any,
    ) -> list[Any]:
        """Run one re-rate `step` of the control script on `ladder` whose live generation is
        `live` and staging one `staging` (its other `fields` are described in
        ``control.lua``); raise what a refusal means. A step whose reply is lost is sent
        again, `STEP_ATTEMPTS` times in all on a single Redis."""
        keys = [
            *self.named_keys(ladder, live, (n for n in CONTROL_KEYS if n not in STAGED_KEYS)),
            *self.named_keys(ladder, staging, STAGED_KEYS),
        ]
        args = [
            script_args(
                step=step, owner=owner, ms=max(1, int(seconds * 1000)), live=live, staging=staging, **fields
            )
        ]
        attempts = 1 if isinstance(self.client, RedisCluster) else STEP_ATTEMPTS
        delays = backoff(0.1, 2.0)
        for attempt in range(1, attempts + 1):
            try:
                reply: list[Any] = await self._control_script(keys=keys, args=args)
                break
            except (exceptions.ConnectionError, exceptions.TimeoutError):
                if attempt == attempts:
                    raise
                await asyncio.sleep(next(delays))
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
        self,
        ladder: str,
        owner: str,
        lease: float,
        params: Mapping[str, Any] | None,
        request: str | None = None,
    ) -> tuple[int, int | None]:
        overrides = msgpack.packb(dict(params), use_bin_type=False) if params else None
        request = request or uuid.uuid4().hex
        reply = await self._control(ladder, "begin", owner, lease, params=overrides, request=request)
        abandoned = int(reply[2])
        return int(reply[1]), abandoned if abandoned >= 0 else None

    async def restore_params(self, ladder: str, generation: int, params: Mapping[str, Any] | None) -> None:
        control, field = self._key(ladder, "control"), f"params:{generation}"
        if params:
            await self.client.hset(control, field, msgpack.packb(dict(params), use_bin_type=False))
        else:
            await self.client.hdel(control, field)

    async def renew(self, ladder: str, owner: str, lease: float) -> None:
        await self._control(ladder, "renew", owner, lease)

    async def freeze(self, ladder: str, owner: str, ttl: float) -> None:
        await self._control(ladder, "freeze", owner, ttl)

    async def stage(
        self, ladder: str, owner: str, staging: int, events: Sequence[Event], dropped: Iterable[str] = ()
    ) -> None:
        dropped = list(dropped)
        for i in range(0, max(len(events), len(dropped)), STAGE_CHUNK):
            chunk = events[i : i + STAGE_CHUNK]
            await self._control(
                ladder, "stage", owner, 0, staging=staging, put=_put(chunk), drop=dropped[i : i + STAGE_CHUNK]
            )

    async def switch(
        self,
        ladder: str,
        owner: str,
        staging: int,
        live: Generations,
        outbox: Sequence[Event] = (),
        dropped: Iterable[str] = (),
    ) -> None:
        await self._control(
            ladder,
            "switch",
            owner,
            0,
            live=live.live,
            staging=staging,
            positions=dict(live.positions),
            put=_put(outbox),
            drop=list(dropped),
        )
        self._live[ladder] = staging

    async def copy_seasons(self, ladder: str, source: int, target: int, seasons: Sequence[str]) -> None:
        old, new = self._gen_key(ladder, source, ""), self._gen_key(ladder, target, "")
        keys = []
        for season in seasons:
            keys.append(f"{old}lb:season:{season}")
            pattern = f"{old}players:season:{season}:*"
            keys += [text(k) async for k in self.client.scan_iter(match=pattern, count=1000)]
        for key in keys:
            await self.client.copy(key, new + key[len(old) :], replace=True)
        if seasons:  # the list written whole, so that a command sent again changes nothing
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.delete(f"{new}seasons")
                pipe.rpush(f"{new}seasons", *seasons)
                await pipe.execute()

    async def release(self, ladder: str, owner: str, players: Iterable[str]) -> None:
        await self._control(ladder, "release", owner, 0, held=list(players))

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
            kinds = ("players", "mk", "lb:season", "q", "qw", "m")  # m: a moded ladder's boards
            patterns = [self._key(ladder, f"{kind}:*") for kind in kinds]
            kept = ("effects", "lb", "meta", "act", "seasons", "unproduced", "unproduced:older")
            keys = [self._key(ladder, k) for k in kept]
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
        key = self._key(ladder, "outbox")
        # A string is one msgpack list of them: how releases before 2026-11-29 kept it.
        if text(await self.client.type(key)) == "string":
            return msgpack.unpackb(await self.client.get(key), raw=False)  # type: ignore[no-any-return]
        rows = await self.client.hgetall(key)
        return [msgpack.unpackb(rows[player], raw=False) for player in sorted(rows)]

    async def unproduced(
        self, ladder: str, generation: int, match_ids: Sequence[str]
    ) -> dict[str, list[Event]]:
        if not match_ids:
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for suffix in ("unproduced", "unproduced:older"):  # keys.py: the older ones aside
                pipe.hmget(self._gen_key(ladder, generation, suffix), list(match_ids))
            held, older = await pipe.execute()
        found = {
            m: events if events is not None else aside for m, events, aside in zip(match_ids, held, older)
        }
        return {
            m: [stored_event(e, ladder) for e in msgpack.unpackb(events, raw=False)]
            for m, events in found.items()
            if events is not None
        }

    async def forget_produced(self, produced: Mapping[str, tuple[int, Collection[str]]]) -> None:
        """Plain HDELs of each ladder's ids from its unproduced hash and the older one, in one
        pipeline (on a cluster, to each ladder's master: its keys share its hash tag)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for ladder, (generation, match_ids) in produced.items():
                for suffix in ("unproduced", "unproduced:older") if match_ids else ():
                    pipe.hdel(self._gen_key(ladder, generation, suffix), *match_ids)
            await pipe.execute()

    async def voids(self, ladder: str) -> dict[str, Void]:
        rows = await self.client.hgetall(self._key(ladder, "voids"))
        return {text(k): msgpack.unpackb(v, raw=False) for k, v in rows.items()}

    async def set_voids(
        self, ladder: str, add: Mapping[str, Void], remove: Iterable[str], generation: int
    ) -> None:
        key, control, remove = self._key(ladder, "voids"), self._key(ladder, "control"), list(remove)
        async with self.client.pipeline(transaction=True) as pipe:
            if add:
                pipe.hset(key, mapping={m: pack(why) for m, why in add.items()})
            if remove:
                pipe.hdel(key, *remove)
            if add or remove:
                pipe.hincrby(control, "voids", 1)
            pipe.hget(control, "voids")
            version = (await pipe.execute())[-1]
        await self.client.hset(control, f"voids:{generation}", version or 0)
