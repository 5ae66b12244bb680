"""``stream-rater bench api``: the read API under concurrent load against a real Redis.

A ``stream-rater serve`` process answers over HTTP from a local Redis holding 1,000 rated
players; this process sends requests at a fixed rate (open loop: a request is due on schedule
whether or not earlier ones have been answered, and its latency is counted from when it was
due, so queueing shows in the latency) for each query shape: ``/healthz`` (what the HTTP
server costs alone), batch lookups, a player's rank,
around-me, the top 100 (plain and revalidated with ``If-None-Match``), predictions and a
balance. Each shape runs twice: at the `rate` offered (its p50 and p99) and at the
`saturation` rate (what one server answers per second at most), beside the server's CPU:
in cores, and in CPU µs per answer, the figure least moved by other load on a shared machine
(one core's ceiling is 1,000,000 / µs per answer).

The load generator is a minimal keep-alive HTTP/1.1 client on asyncio (`_Connection`,
requests made before the run): lighter than aiohttp's client, so that on 2 cores the server,
not the generator, is what a run measures.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from stream_rater.bench.e2e import _cpu_seconds
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.local.demo import serving
from stream_rater.local.processes import HOST
from stream_rater.local.runtime import LocalRuntime
from stream_rater.offline.replay import replay
from stream_rater.processor import Processor
from stream_rater.store import open_store

LADDER = "bench-api"
PLAYERS = [f"p{i}" for i in range(1000)]
#: Keep-alive connections of the load generator (requests beyond them wait, on the clock).
CONNECTIONS = 64
#: Distinct request bodies made per shape before a run (cycled through).
BODIES = 512

#: A shape: (method, path under the ladder, JSON body or None, extra headers) made per request.
Request = tuple[str, str, Any, dict[str, str]]


def _shapes(rng: random.Random, etag: str) -> dict[str, Callable[[], Request]]:
    """Query name → a function making one request."""

    def teams(sizes: list[int]) -> Request:
        chosen = rng.sample(PLAYERS, sum(sizes))
        out, start = [], 0
        for size in sizes:
            out.append(chosen[start : start + size])
            start += size
        return "POST", "predict", {"teams": out}, {}

    return {
        "/healthz (HTTP alone)": lambda: ("GET", "/healthz", None, {}),
        "lookup 10 players": lambda: ("POST", "players", {"players": rng.sample(PLAYERS, 10)}, {}),
        "rank of a player": lambda: ("POST", "players", {"players": [rng.choice(PLAYERS)]}, {}),
        "around a player, n = 10": lambda: (
            "GET",
            f"leaderboard?around={rng.choice(PLAYERS)}&n=10",
            None,
            {},
        ),
        "top 100": lambda: ("GET", "leaderboard?top=100", None, {}),
        "top 100, If-None-Match": lambda: ("GET", "leaderboard?top=100", None, {"If-None-Match": etag}),
        "predict 5 v 5": lambda: teams([5, 5]),
        "predict 8-player FFA": lambda: teams([1] * 8),
        "balance 10 into 5 v 5": lambda: (
            "POST",
            "balance",
            {"players": rng.sample(PLAYERS, 10), "team_sizes": [5, 5]},
            {},
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


def _raw(host: str, ladder_path: str, request: Request) -> bytes:
    """The bytes of one HTTP/1.1 request."""
    method, path, body, headers = request
    data = b"" if body is None else json.dumps(body).encode()
    target = path if path.startswith("/") else f"{ladder_path}/{path}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(data)}"]
    lines += ["Content-Type: application/json"] if body is not None else []
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class _Connection(asyncio.Protocol):
    """One keep-alive connection: sends a request, resolves its future with the status once the
    whole response (``Content-Length`` bytes of body) is in."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.answer: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, data: bytes) -> asyncio.Future[int]:
        self.answer = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(data)
        return self.answer

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head, found, rest = self.buffer.partition(b"\r\n\r\n")
        if not found:
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        if len(rest) >= length and self.answer is not None and not self.answer.done():
            self.buffer = rest[length:]
            self.answer.set_result(int(head[9:12]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(ConnectionError("the server closed the connection"))


async def _load(
    url: str, requests: list[bytes], rate: float, seconds: float
) -> tuple[int, list[float], int, float]:
    """Offer `rate` requests/s for `seconds` over `CONNECTIONS` connections; (answered,
    sorted latencies from when each request was due, errors, wall seconds). Requests still
    unanswered a second after the last was due are dropped (a saturated server's queue)."""
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    free: asyncio.Queue[_Connection] = asyncio.Queue()
    connections = [
        (await loop.create_connection(_Connection, parts.hostname or HOST, parts.port or 80))[1]
        for _ in range(CONNECTIONS)
    ]
    for connection in connections:
        free.put_nowait(connection)
    latencies: list[float] = []
    errors = 0

    async def one(due: float, data: bytes) -> None:
        nonlocal errors
        connection = await free.get()
        try:
            status = await connection.send(data)
        except ConnectionError:
            errors += 1
            return
        latencies.append(time.perf_counter() - due)
        errors += status not in (200, 304)
        free.put_nowait(connection)

    tasks, start = [], time.perf_counter()
    for n in range(int(rate * seconds)):
        due = start + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(due, requests[n % len(requests)])))
    # past the schedule, a second for the requests under way; those still queued are dropped
    await asyncio.wait(tasks, timeout=1.0)
    wall = time.perf_counter() - start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for connection in connections:
        if connection.transport is not None:
            connection.transport.close()
    return len(latencies), sorted(latencies), errors, wall


def _etag(url: str) -> str:
    """The ETag the server gives the top 100 now (empty when it gives none)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/ladders/{LADDER}/leaderboard?top=100") as response:
        return str(response.headers.get("ETag") or "")


def _drained(url: str, timeout: float = 120.0) -> None:
    """Wait until the server answers ``/healthz`` within 20 ms: it has worked off the requests a
    saturated phase left queued, which would otherwise count against the next phase."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = time.perf_counter()
        with urllib.request.urlopen(f"{url}/healthz") as response:
            response.read()
        if time.perf_counter() - started < 0.02:
            return


def _measure(server: Any, name: str, requests: list[bytes], rate: float, seconds: float) -> dict[str, Any]:
    """One load phase: answered/s, p50 and p99 ms, errors and the server's CPU (cores)."""
    cpu = _cpu_seconds(server.process.pid)
    answered, latencies, errors, wall = asyncio.run(_load(server.url, requests, rate, seconds))
    used = _cpu_seconds(server.process.pid) - cpu
    _drained(server.url)
    latencies = latencies or [float("nan")]
    return {
        "query": name,
        "offered": rate,
        "answered_per_s": answered / wall,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "errors": errors,
        "server_cores": used / wall,
        "server_us": 1e6 * used / max(answered, 1),
    }


def run(
    rate: float = 2000.0,
    seconds: float = 5.0,
    saturation: float = 8000.0,
    only: str = "",
    out: TextIO = sys.stdout,
) -> None:
    """Start Redis and a read-only server, load each query shape (those whose name contains
    `only`) at `rate` and at `saturation` requests/s, print the table."""
    with LocalRuntime(broker=False) as runtime, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_seed(runtime.redis_url))
        ladders = Path(tmp) / "ladders.toml"
        ladders.write_text(f'[ladders.{LADDER}]\nmodel = "trueskill"\n')
        with serving(runtime.redis_url, ladders) as server:
            print(
                f"read API, `stream-rater serve` on local Redis (1,000 players), open loop, {seconds:g} s "
                f"per phase at {rate:,.0f} and {saturation:,.0f} requests/s offered ({os.cpu_count()} "
                "cores shared with the load generator and Redis)",
                file=out,
            )
            print(
                f"{'query':<26}{'offered/s':>10}{'answered/s':>12}{'p50 ms':>9}{'p99 ms':>9}"
                f"{'errors':>8}{'server CPU':>12}{'µs/answer':>11}",
                file=out,
            )
            host = urlsplit(server.url).netloc
            for name, make in _shapes(random.Random(2), _etag(server.url)).items():
                if only not in name:
                    continue
                requests = [_raw(host, f"/api/ladders/{LADDER}", make()) for _ in range(BODIES)]
                for offered in (rate, saturation):
                    row = _measure(server, name, requests, offered, seconds)
                    print(
                        f"{name:<26}{offered:>10,.0f}{row['answered_per_s']:>12,.0f}{row['p50_ms']:>9.2f}"
                        f"{row['p99_ms']:>9.2f}{row['errors']:>8}{row['server_cores']:>11.2f}c"
                        f"{row['server_us']:>11,.0f}",
                        file=out,
                        flush=True,
                    )
