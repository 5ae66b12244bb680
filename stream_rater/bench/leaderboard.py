"""``stream-rater bench leaderboard``: what the ladder rules' leaderboard eligibility costs on a
large ladder (README "Ladder rules").

A local Redis is started for the run and two Elo ladders of `players` players each are loaded
through the store's own commit script, with the rules ``provisional_games = 10`` and
``leaderboard_active_days = 7``: each player has 1–60 games, a rating drawn from N(1500, 200²)
and a last match in the 28 days before the read. Players with fewer than 10 games are not
ranked (the commit leaves them off the leaderboard); the others are ranked while active.

- ``spread`` — last matches uniform over the 28 days: about a quarter of the ranked players
  are active, spread evenly over the leaderboard.
- ``idle top`` — the same, but the best 10,000 ranked players have all been idle for more than
  7 days: a top-N read skips them all (a season's stars who stopped playing).

Reported per ladder: the p50 / p99 time of an eligibility-filtered top-100 read
(`Queries.leaderboard`) and of the same read with the rule off (the plain leaderboard), and
of a rank lookup of an active player in the top 1 %, at the median and at the bottom of the
active ones (`Queries.players`), of the leaderboard around each of them (`Queries.around`,
10 rows above and below; around the median also with the rule off), and of the inflation
monitor's rating totals of the ranked players, alone and with the active ones
(`RedisStore.rating_totals`), with the store round trips each took; and the activity set's
bytes per ranked player (``MEMORY USAGE``).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import redis

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.rules import DAY
from stream_rater.local.runtime import LocalRuntime
from stream_rater.queries import Queries
from stream_rater.store.base import Commit, PlayerState, StateWrite
from stream_rater.store.redis import RedisStore, ladder_key

#: The read's clock.
NOW = 1_800_000_000.0
RULES: dict[str, Any] = {"provisional_games": 10, "leaderboard_active_days": 7}
#: Players written per commit while loading.
CHUNK = 10_000
#: Ranked players idle at the top of the ``idle top`` ladder.
IDLE_TOP = 10_000
#: Rows above and below the player of an around-me read.
AROUND = 10


def _players(n: int, rng: random.Random, idle_top: bool) -> list[tuple[str, PlayerState]]:
    """`n` players' states; with `idle_top`, the best `IDLE_TOP` ranked ones idle for 8–28 days."""
    states = []
    for i in range(n):
        games = rng.randint(1, 60)
        last = NOW - rng.uniform(0.0, 28.0) * DAY
        states.append((f"p{i}", PlayerState(rng.gauss(1500.0, 200.0), None, games, last, 1)))
    if idle_top:
        ranked = sorted(
            (s.mu, pid, k) for k, (pid, s) in enumerate(states) if s.games >= RULES["provisional_games"]
        )
        for _, _, k in ranked[-IDLE_TOP:]:
            pid, s = states[k]
            states[k] = (pid, s._replace(last_played=NOW - rng.uniform(8.0, 28.0) * DAY))
    return states


async def _load(store: RedisStore, ladder: Ladder, states: list[tuple[str, PlayerState]]) -> None:
    """Write `states` through the commit script, as the processor would have left them."""
    rules = ladder.rules
    for start in range(0, len(states), CHUNK):
        writes = []
        for pid, s in states[start : start + CHUNK]:
            ranked = rules.qualifies(s.games, s.sigma)
            writes.append(
                StateWrite(pid, s, 0, False, s.mu if ranked else None, s.last_played if ranked else None)
            )
        await store.commit(Commit(ladder.name, writes, {f"load-{start}": []}))


async def _timed(
    store: RedisStore, call: Callable[[], Awaitable[Any]], repeat: int
) -> tuple[float, float, float]:
    """p50 and p99 milliseconds of `call`, and the round trips of one call."""
    seconds = []
    trips = 0
    for _ in range(repeat):
        before = store.round_trips
        started = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - started)
        trips = store.round_trips - before
    seconds.sort()
    return 1000 * statistics.median(seconds), 1000 * seconds[int(0.99 * (len(seconds) - 1))], trips


async def measure(redis_url: str, players: int, repeat: int, out: TextIO) -> dict[str, dict[str, Any]]:
    """Load both ladders into the Redis at `redis_url` and time the reads; print the table."""
    store = RedisStore.from_url(redis_url)
    client = redis.Redis.from_url(redis_url)
    report: dict[str, dict[str, Any]] = {}
    try:
        for name, idle_top in (("spread", False), ("idle-top", True)):
            ruled = Ladder(f"bench-{name}", "elo", RULES)
            plain = Ladder(ruled.name, "elo")
            states = _players(players, random.Random(7), idle_top)
            started = time.perf_counter()
            await _load(store, ruled, states)
            loaded = time.perf_counter() - started
            ranked = await client_zcard(client, ruled.name)
            ruled_queries = Queries(store, Ladders([ruled]))
            plain_queries = Queries(store, Ladders([plain]))
            since = NOW - RULES["leaderboard_active_days"] * DAY
            last = dict(states)
            board = [
                p for p, _ in await store.leaderboard(ruled.name, ranked) if last[p].last_played >= since
            ]
            probes = {
                "top 1 %": board[len(board) // 100],
                "median": board[len(board) // 2],
                "last": board[-1],
            }
            active = int(client.zcount(ladder_key(ruled.name, "act"), since, "+inf"))
            row: dict[str, Any] = {"players": players, "ranked": ranked, "active": active, "load_s": loaded}
            row["top100"] = await _timed(store, _top(ruled_queries, ruled.name), repeat)
            row["top100_plain"] = await _timed(store, _top(plain_queries, ruled.name), repeat)
            for label, pid in probes.items():
                row[f"rank {label}"] = await _timed(
                    store, _rank(ruled_queries, ruled.name, pid), max(3, repeat // 5)
                )
                row[f"around {label}"] = await _timed(
                    store, _around(ruled_queries, ruled.name, pid), max(3, repeat // 5)
                )
            row["around median plain"] = await _timed(
                store, _around(plain_queries, ruled.name, probes["median"]), repeat
            )
            row["totals"] = await _timed(store, _totals(store, ruled.name, None), 3)
            row["totals_active"] = await _timed(store, _totals(store, ruled.name, since), 3)
            usage = client.memory_usage(ladder_key(ruled.name, "act")) or 0
            row["act_bytes_per_ranked"] = usage / max(1, ranked)
            report[name] = row
    finally:
        client.close()
        await store.close()
    _print(report, out)
    return report


def _totals(store: RedisStore, ladder: str, since: float | None) -> Callable[[], Awaitable[Any]]:
    return lambda: store.rating_totals(ladder, since)


def _top(queries: Queries, ladder: str) -> Callable[[], Awaitable[Any]]:
    return lambda: queries.leaderboard(ladder, 100, NOW)


def _rank(queries: Queries, ladder: str, player: str) -> Callable[[], Awaitable[Any]]:
    return lambda: queries.players(ladder, [player], NOW)


def _around(queries: Queries, ladder: str, player: str) -> Callable[[], Awaitable[Any]]:
    return lambda: queries.around(ladder, player, AROUND, NOW)


async def client_zcard(client: redis.Redis, ladder: str) -> int:
    """Players on the ladder's leaderboard."""
    return int(client.zcard(ladder_key(ladder, "lb")))


def _print(report: dict[str, dict[str, Any]], out: TextIO) -> None:
    for name, row in report.items():
        print(
            f"{name}: {row['players']:,} players, {row['ranked']:,} ranked (>= 10 games), {row['active']:,} "
            f"of them active in the last 7 days; loaded in {row['load_s']:.1f} s; activity set "
            f"{row['act_bytes_per_ranked']:.0f} B per ranked player",
            file=out,
        )
        print(f"  {'read':<40}{'p50 ms':>9}{'p99 ms':>9}{'round trips':>13}", file=out)
        for key, label in [
            ("top100", "top 100, eligible only"),
            ("top100_plain", "top 100, no activity rule"),
            ("rank top 1 %", "rank of a top-1 % player"),
            ("rank median", "rank of the median player"),
            ("rank last", "rank of the last player"),
            ("around top 1 %", f"around a top-1 % player (n={AROUND})"),
            ("around median", f"around the median player (n={AROUND})"),
            ("around last", f"around the last player (n={AROUND})"),
            ("around median plain", "around the median, no activity rule"),
            ("totals", "rating totals, ranked"),
            ("totals_active", "rating totals, ranked + active"),
        ]:
            p50, p99, trips = row[key]
            print(f"  {label:<40}{p50:>9.2f}{p99:>9.2f}{trips:>13}", file=out)


def run(players: int = 1_000_000, repeat: int = 50, out: TextIO = sys.stdout) -> dict[str, dict[str, Any]]:
    """The benchmark on a local Redis started (and stopped) for the run."""
    with LocalRuntime(broker=False) as runtime:
        return asyncio.run(measure(runtime.redis_url, players, repeat, out))
