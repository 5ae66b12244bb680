"""``stream-rater bench leaderboard``: the cost of every rank read on a large ladder whose rules
rank only eligible players (README "Ladder rules"), beside plain Redis reads of a leaderboard
without rules, in the same run.

A local Redis is started for the run and an Elo ladder of `players` players is loaded through
the store's own commit script (10,000 players per commit), with the rules ``leaderboard_min_games =
10`` and ``leaderboard_active_days = 7``: each player has 1–60 games, a rating drawn from
N(1500, 200²) and a last match in the 28 days before the read; the best `IDLE_TOP` players the
rules would rank have all been idle for more than 7 days (a season's stars who stopped playing).
The commits keep the eligible leaderboard (players with 10 games or more, active in the last 7
days), trimming the idle ones off as they go.

Each read is timed `repeat` times (p50 and p99) with the store round trips it took, the keys
Redis looked up for it (``keyspace_hits`` + ``keyspace_misses`` per read, lookups inside the
scripts included) and the CPU time Redis spent on it (``INFO cpu``: what the read costs the
server, network handling included, whatever the client's machine is doing), on three probes: an eligible player in the top 1 %, at the median and last:

- ``rank`` — `RedisStore.board_ranks` of one player;
- ``player`` — the player endpoint's read, `Queries.players` (state, rank and percentile);
- ``around`` — `Queries.around`, 10 rows above and below, with their states;
- ``top100`` — `Queries.leaderboard`, the best 100 eligible with their states;
- ``totals`` — the inflation monitor's totals, `RedisStore.rating_totals`;
- ``plain …`` — ``ZREVRANK``, ``ZREVRANGE 0 99 WITHSCORES`` and ZREVRANK + ZREVRANGE of 21
  rows around, straight on the leaderboard key: the floor any read of it costs.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import redis.asyncio as aioredis

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.rules import DAY
from stream_rater.local.runtime import LocalRuntime
from stream_rater.queries import Queries
from stream_rater.store.base import Commit, PlayerState, StateWrite
from stream_rater.store.redis import RedisStore, ladder_key

#: The read's clock (and the store's, so that the commits trim as of it).
NOW = 1_800_000_000.0
RULES: dict[str, Any] = {"leaderboard_min_games": 10, "leaderboard_active_days": 7}
#: Players written per commit while loading.
CHUNK = 10_000
#: Ranked players idle at the top of the ladder.
IDLE_TOP = 10_000
#: Rows above and below the player of an around-me read.
AROUND = 10
#: Rows of a top-N read.
TOP = 100
LADDER = "bench-board"


def players_of(n: int, rng: random.Random) -> list[tuple[str, PlayerState]]:
    """`n` players' states, the best `IDLE_TOP` ranked ones idle for 8–28 days."""
    states = []
    for i in range(n):
        games = rng.randint(1, 60)
        last = NOW - rng.uniform(0.0, 28.0) * DAY
        states.append((f"p{i}", PlayerState(rng.gauss(1500.0, 200.0), None, games, last, 1)))
    ranked = sorted(
        (s.mu, pid, k) for k, (pid, s) in enumerate(states) if s.games >= RULES["leaderboard_min_games"]
    )
    for _, _, k in ranked[-IDLE_TOP:]:
        pid, s = states[k]
        states[k] = (pid, s._replace(last_played=NOW - rng.uniform(8.0, 28.0) * DAY))
    return states


async def load(store: RedisStore, ladder: Ladder, states: list[tuple[str, PlayerState]]) -> None:
    """Write `states` through the commit script, as the processor would have left them."""
    rules = ladder.rules
    for start in range(0, len(states), CHUNK):
        writes = []
        for pid, s in states[start : start + CHUNK]:
            ranked = rules.qualifies(s.games, s.sigma)
            writes.append(
                StateWrite(pid, s, 0, False, s.mu if ranked else None, s.last_played if ranked else None)
            )
        commit = Commit(ladder.name, writes, {f"load-{start}": []}, active_within=rules.active_within())
        await store.commit(commit)


class Timer:
    """Times reads: milliseconds, store round trips and Redis key lookups per read."""

    def __init__(self, store: RedisStore, client: aioredis.Redis, repeat: int) -> None:
        self.store, self.client, self.repeat = store, client, repeat

    async def _counters(self) -> tuple[int, float]:
        """Redis's key lookups so far, and the CPU time it used (µs; network handling included)."""
        stats = await self.client.info("stats")
        cpu = await self.client.info("cpu")
        busy = 1e6 * (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))
        return int(stats["keyspace_hits"]) + int(stats["keyspace_misses"]), busy

    async def __call__(self, call: Callable[[], Awaitable[Any]]) -> dict[str, float]:
        await call()  # warm: scripts loaded, connections open
        seconds = []
        trips, (keys, busy) = self.store.round_trips, await self._counters()
        for _ in range(self.repeat):
            started = time.perf_counter()
            await call()
            seconds.append(time.perf_counter() - started)
        after = await self._counters()
        keys, busy = after[0] - keys, after[1] - busy
        trips = self.store.round_trips - trips
        seconds.sort()
        return {
            "p50_ms": 1000 * statistics.median(seconds),
            "p99_ms": 1000 * seconds[min(len(seconds) - 1, round(0.99 * (len(seconds) - 1)))],
            "round_trips": trips / self.repeat,
            "keys": keys / self.repeat,
            "redis_us": busy / self.repeat,
        }


async def measure(redis_url: str, players: int, repeat: int) -> dict[str, Any]:
    """Load the ladder into the Redis at `redis_url` and time the reads."""
    store = RedisStore.from_url(redis_url, clock=lambda: NOW)
    client = aioredis.Redis.from_url(redis_url)
    ladder = Ladder(LADDER, "elo", RULES)
    queries = Queries(store, Ladders([ladder]))
    since = NOW - RULES["leaderboard_active_days"] * DAY
    try:
        states = players_of(players, random.Random(7))
        started = time.perf_counter()
        await load(store, ladder, states)
        report: dict[str, Any] = {"players": players, "load_s": time.perf_counter() - started}
        board_key = ladder_key(LADDER, "lb")
        eligible = (await store.rating_totals(LADDER, since)).ranked
        report["eligible"] = eligible
        report["ranked_idle"] = sum(
            s.games >= RULES["leaderboard_min_games"] and (s.last_played or NOW) < since for _, s in states
        )
        report["bytes_per_eligible"] = (
            (await client.memory_usage(board_key) or 0)
            + (await client.memory_usage(ladder_key(LADDER, "act")) or 0)
        ) / max(1, eligible)
        timer = Timer(store, client, repeat)
        reads: dict[str, dict[str, float]] = {}
        probes = {
            label: await _eligible_at(client, store, board_key, place, since)
            for label, place in (
                ("top 1 %", eligible // 100),
                ("median", eligible // 2),
                ("last", eligible - 1),
            )
        }
        for label, player in probes.items():
            reads |= await _player_reads(timer, queries, label, player, since)
        reads["top 100"] = await timer(lambda: queries.leaderboard(LADDER, TOP, NOW))
        reads["totals"] = await timer(lambda: store.rating_totals(LADDER, since))
        median = probes["median"]
        reads["plain ZREVRANK, median"] = await timer(lambda: client.zrevrank(board_key, median))
        reads["plain ZREVRANGE top 100"] = await timer(
            lambda: client.zrevrange(board_key, 0, TOP - 1, withscores=True)
        )
        reads["plain around, median"] = await timer(lambda: _plain_around(client, board_key, median))
        report["reads"] = reads
    finally:
        await client.aclose()
        await store.close()
    return report


async def _eligible_at(client: aioredis.Redis, store: RedisStore, key: str, place: int, since: float) -> str:
    """The eligible player at or just above the leaderboard's 0-based `place` (one idle since
    the last trim, still on it, is passed over)."""
    while True:
        found: list[bytes] = await client.zrevrange(key, place, place)  # type: ignore[assignment]
        player = found[0].decode()
        if (await store.board_ranks(LADDER, [player], since)).ranks:
            return player
        place -= 1


async def _player_reads(
    timer: Timer, queries: Queries, label: str, player: str, since: float
) -> dict[str, dict[str, float]]:
    """The rank, player-endpoint and around reads of `player` (the probe `label`)."""
    store = queries.store
    return {
        f"rank, {label}": await timer(lambda: store.board_ranks(LADDER, [player], since)),
        f"player, {label}": await timer(lambda: queries.players(LADDER, [player], NOW)),
        f"around, {label}": await timer(lambda: queries.around(LADDER, player, AROUND, NOW)),
    }


async def _plain_around(client: aioredis.Redis, key: str, player: str) -> Any:
    """ZREVRANK of `player`, then ZREVRANGE of the `AROUND` rows above and below it."""
    place = int(await client.zrevrank(key, player))  # type: ignore[arg-type]
    return await client.zrevrange(key, max(0, place - AROUND), place + AROUND, withscores=True)


def show(report: dict[str, Any], out: TextIO) -> None:
    """The report as a table."""
    print(
        f"{report['players']:,} players, {report['eligible']:,} eligible (>= 10 games, active in the last "
        f"7 days; {report['ranked_idle']:,} with 10 games idle, the best {IDLE_TOP:,} among them); loaded "
        f"in {report['load_s']:.1f} s; leaderboard + activity index {report['bytes_per_eligible']:.0f} B "
        "per eligible player",
        file=out,
    )
    print(f"  {'read':<32}{'p50 ms':>9}{'p99 ms':>9}{'round trips':>13}{'keys':>7}{'Redis µs':>10}", file=out)
    for name, row in report["reads"].items():
        print(
            f"  {name:<32}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['round_trips']:>13.0f}"
            f"{row['keys']:>7.0f}{row['redis_us']:>10.0f}",
            file=out,
        )


def run(
    players: int = 1_000_000, repeat: int = 200, as_json: bool = False, out: TextIO = sys.stdout
) -> dict[str, Any]:
    """The benchmark on a local Redis started (and stopped) for the run."""
    with LocalRuntime(broker=False) as runtime:
        report = asyncio.run(measure(runtime.redis_url, players, repeat))
    if as_json:
        print(json.dumps(report, indent=2), file=out)
    else:
        show(report, out)
    return report
