"""``stream-rater bench redis``: where Redis's CPU goes per match, without Kafka.

A `Processor` applies `matches` synthetic 1-vs-1 TrueSkill matches (between `players` players per
ladder, 1,000 by default; spread round-robin over `ladders` ladders) in batches of `batch_size` to a local Redis
started for the run, and marks each batch's events produced once the next batch is committed,
as a busy worker does (it produces a batch's events while it commits the next: each batch's
events are kept until the commit after the next drops them). Reported: Redis's CPU time per match
(``INFO cpu``: user + system, the server's own accounting), the part of it inside the read
and commit scripts (``INFO commandstats`` of ``EVALSHA``), and per command the scripts call
(and the commit's transaction sends besides: the ``DEL`` and ``HSET`` that stage its events),
its calls per match and µs per match; what the scripts' time does not explain of the
commands' is the Lua interpreter's own (argument decoding, tables, strings).

With ``--shadows N`` each ladder has N shadow models (TrueSkill with another β, README "Shadow
models"): the cost of a shadow is the difference to a run without (Redis CPU and memory per
match, the processor's own CPU per match).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

import redis

from stream_rater.bench.e2e import _matches
from stream_rater.config.ladders import Ladder, Ladders, shadow_name
from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_match
from stream_rater.local.runtime import LocalRuntime
from stream_rater.processor import BatchResult, Processor
from stream_rater.store.deployment import STORE_FORMAT
from stream_rater.store.redis import RedisStore

#: Players per ladder (`--players`).
PLAYERS = 1000
#: Marker TTL of the run (a worker's default), so markers are written as they are live.
MARKER_TTL = Settings.marker_ttl


@dataclass
class RedisProfile:
    """Redis's CPU per match, in µs: all of it, inside the scripts, and per command."""

    matches: int
    ladders: int
    redis_us: float
    scripts_us: float
    #: Command → (calls per match, µs per match).
    commands: dict[str, tuple[float, float]] = field(default_factory=dict)
    round_trips: int = 0
    #: The processor's own CPU per match (this process), µs.
    worker_us: float = 0.0
    #: Redis ``used_memory`` grown by the run, bytes.
    redis_bytes: int = 0


def _ladders(names: list[str], shadows: int) -> Ladders:
    """TrueSkill ladders `names`, each with `shadows` shadows (TrueSkill, β 5, 6, …)."""

    def shadowed(name: str) -> tuple[Ladder, ...]:
        return tuple(
            Ladder(shadow_name(name, f"s{i}"), "trueskill", {"beta": 5.0 + i}, shadow_of=name)
            for i in range(shadows)
        )

    return Ladders([Ladder(name, "trueskill", shadows=shadowed(name)) for name in names])


async def profile(
    redis_url: str,
    matches: int,
    ladders: int,
    batch_size: int,
    shadows: int = 0,
    lag: int = 1,
    players: int = PLAYERS,
) -> RedisProfile:
    """Apply the synthetic matches (between `players` players per ladder) to the (empty)
    Redis at `redis_url` and read its counters; each batch's events are marked produced once
    `lag` more batches are committed."""
    names = [f"bench-{i}" for i in range(ladders)]
    table = _ladders(names, shadows)
    clock = itertools.count(1_000_000).__next__  # one second apart
    events = [parse_match(e, table) for e in _matches("m", matches, players, random.Random(1), clock, names)]
    store = RedisStore.from_url(redis_url, marker_ttl=MARKER_TTL)
    processor = Processor(table, store)
    client = redis.Redis.from_url(redis_url)
    try:
        await store.deployment_record({"format": str(STORE_FORMAT)})  # new: this release's format
        client.config_resetstat()
        before, memory, cpu = client.info("cpu"), client.info("memory")["used_memory"], time.process_time()
        unproduced: list[BatchResult] = []
        for start in range(0, matches, batch_size):
            chunk = events[start : start + batch_size]
            unproduced.append(await processor.process(chunk, [(0, start + i) for i in range(len(chunk))]))
            if len(unproduced) > lag:
                processor.produced(unproduced.pop(0))
        worker = time.process_time() - cpu
        after = client.info("cpu")
        stats = client.info("commandstats")
        grown = client.info("memory")["used_memory"] - memory
    finally:
        client.close()
        await store.close()
    used = sum(after[k] - before[k] for k in ("used_cpu_user", "used_cpu_sys"))
    commands = {
        name.removeprefix("cmdstat_"): (row["calls"] / matches, row["usec"] / matches)
        for name, row in stats.items()
        if not name.startswith(("cmdstat_info", "cmdstat_config", "cmdstat_hello", "cmdstat_script"))
        and name not in ("cmdstat_multi", "cmdstat_exec")  # EXEC's time is its commands'
    }
    scripts = commands.pop("evalsha", (0.0, 0.0))[1]
    return RedisProfile(
        matches,
        ladders,
        1e6 * used / matches,
        scripts,
        commands,
        store.round_trips,
        1e6 * worker / matches,
        grown,
    )


def run(
    matches: int = 40_000,
    ladders: int = 1,
    batch_size: int = 500,
    shadows: int = 0,
    out: TextIO = sys.stdout,
    players: int = PLAYERS,
) -> RedisProfile:
    """Profile on a local Redis started (and stopped) for the run; print the table."""
    with LocalRuntime(broker=False) as runtime:
        started = time.perf_counter()
        result = asyncio.run(
            profile(runtime.redis_url, matches, ladders, batch_size, shadows, players=players)
        )
        seconds = time.perf_counter() - started
    print(
        f"redis: {matches:,} 1v1 TrueSkill matches over {ladders} ladder(s) ({players:,} players each, "
        f"{shadows} shadow(s) each), "
        f"batches of {batch_size}, events dropped after each batch; {result.round_trips} round trips in "
        f"{seconds:.1f} s",
        file=out,
    )
    inside = sum(us for _, us in result.commands.values())
    print(
        f"Redis CPU per match {result.redis_us:.1f} µs (INFO cpu); in the scripts {result.scripts_us:.1f} µs, "
        f"of which the commands they call {inside:.1f} µs and the Lua interpreter the other "
        f"{result.scripts_us - inside:.1f} µs",
        file=out,
    )
    print(
        f"processor CPU per match {result.worker_us:.1f} µs; Redis memory grown {result.redis_bytes / 1e6:.1f} MB "
        f"({result.redis_bytes / matches:.0f} bytes per match)",
        file=out,
    )
    print(f"{'command':<10}{'calls/match':>13}{'µs/match':>10}", file=out)
    for name, (calls, us) in sorted(result.commands.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:<10}{calls:>13.2f}{us:>10.2f}", file=out)
    return result
