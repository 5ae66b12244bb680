"""``stream-rater bench api``: the read API under concurrent load against a real Redis.

A ``stream-rater serve`` process answers over HTTP from a local Redis holding 1,000 rated
players; this process sends requests at a fixed rate (open loop: a request is sent on
schedule whether or not earlier ones have been answered, so queueing shows in the latency)
for each query shape — predict 5 v 5, predict an 8-player free-for-all, balance 10 players
into 5 v 5 — and prints requests/s answered, p50 and p99 latency and the server's CPU.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from stream_rater.bench.e2e import _cpu_seconds
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.local.demo import serving
from stream_rater.local.runtime import LocalRuntime
from stream_rater.offline.replay import replay
from stream_rater.processor import Processor
from stream_rater.store import open_store

LADDER = "bench-api"
PLAYERS = [f"p{i}" for i in range(1000)]


def _shapes(rng: random.Random) -> dict[str, tuple[str, Any]]:
    """Query name → (route, a function making one request body)."""

    def teams(sizes: list[int]) -> dict[str, Any]:
        chosen = rng.sample(PLAYERS, sum(sizes))
        out, start = [], 0
        for size in sizes:
            out.append(chosen[start : start + size])
            start += size
        return {"teams": out}

    return {
        "predict 5v5": ("predict", lambda: teams([5, 5])),
        "predict 8-player FFA": ("predict", lambda: teams([1] * 8)),
        "balance 10 into 5v5": (
            "balance",
            lambda: {"players": rng.sample(PLAYERS, 10), "team_sizes": [5, 5]},
        ),
    }


async def _seed(redis_url: str) -> None:
    ladders = Ladders([Ladder(LADDER, "trueskill")])
    rng = random.Random(1)
    events = [
        {
            "match_id": f"m{i}",
            "ladder": LADDER,
            "finished_at": 1_700_000_000 + i,
            "teams": [{"rank": 0, "players": [{"id": a}]}, {"rank": 1, "players": [{"id": b}]}],
        }
        for i, (a, b) in enumerate(rng.sample(PLAYERS, 2) for _ in range(20_000))
    ]
    store = open_store(redis_url)
    try:
        await replay([parse_match(e, ladders) for e in events], Processor(ladders, store))
    finally:
        await store.close()


async def _load(url: str, body: Any, rate: float, seconds: float) -> tuple[int, list[float], int]:
    """Send `rate` requests/s for `seconds`; (answered, latencies, errors)."""
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session:

        async def one() -> None:
            nonlocal errors
            started = time.perf_counter()
            async with session.post(url, json=body()) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
            latencies.append(time.perf_counter() - started)

        tasks, start = [], time.perf_counter()
        for n in range(int(rate * seconds)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one()))
        await asyncio.gather(*tasks)
    return len(latencies), sorted(latencies), errors


def run(rate: float = 1000.0, seconds: float = 10.0, out: TextIO = sys.stdout) -> None:
    """Start Redis and a read-only server, load each query shape, print the table."""
    with LocalRuntime(broker=False) as runtime, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_seed(runtime.redis_url))
        ladders = Path(tmp) / "ladders.toml"
        ladders.write_text(f'[ladders.{LADDER}]\nmodel = "trueskill"\n')
        with serving(runtime.redis_url, ladders) as server:
            print(
                f"read API, `stream-rater serve` on local Redis (1,000 players), open loop at {rate:,.0f} "
                f"requests/s for {seconds:g} s per query ({os.cpu_count()} cores shared with the load "
                "generator and Redis)",
                file=out,
            )
            print(
                f"{'query':<24}{'answered/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}{'server CPU':>12}",
                file=out,
            )
            for name, (route, body) in _shapes(random.Random(2)).items():
                cpu = _cpu_seconds(server.process.pid)
                started = time.perf_counter()
                answered, latencies, errors = asyncio.run(
                    _load(f"{server.url}/api/ladders/{LADDER}/{route}", body, rate, seconds)
                )
                wall = time.perf_counter() - started
                cores = (_cpu_seconds(server.process.pid) - cpu) / wall
                print(
                    f"{name:<24}{answered / wall:>12,.0f}{1000 * latencies[len(latencies) // 2]:>9.2f}"
                    f"{1000 * latencies[int(len(latencies) * 0.99)]:>9.2f}{errors:>8}{cores:>11.2f}c",
                    file=out,
                )
