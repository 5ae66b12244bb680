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

The load generator is a minimal keep-alive HTTP/1.1 client (`_Load`, `_Connection`: requests
made before the run, no task or future per request, on the loop ``serve`` answers on), and
reports its own CPU beside the server's: on 2 cores the server, not the generator, is what a
run measures, and where the server gets only a share of a core, ``1 core/s`` (1,000,000 / µs
per answer) is what it would answer on a core of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import deque
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
from stream_rater.service.query_api import serving_loop
from stream_rater.store import open_store

LADDER = "bench-api"
PLAYERS = [f"p{i}" for i in range(1000)]
#: Keep-alive connections of the load generator (requests beyond them wait, on the clock).
CONNECTIONS = 64
#: Distinct request bodies made per shape before a run (cycled through).
BODIES = 512
#: Seconds the load generator sleeps at least between sends (those due meanwhile go together):
#: a shorter sleep spins the loop and takes the CPU the server is measured on.
PACE = 0.001

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


class _Load:
    """The requests of one phase and the connections answering them: a request due while every
    connection is busy waits in `backlog` (on the clock) and is sent by the first connection
    its answer frees, so the generator makes no task or future per request."""

    def __init__(self) -> None:
        self.free: list[_Connection] = []
        self.backlog: deque[tuple[float, bytes]] = deque()
        self.latencies: list[float] = []
        self.errors = 0

    def offer(self, due: float, data: bytes) -> None:
        """Send a request due at `due` (perf_counter) now, or when a connection frees."""
        if self.free:
            self.free.pop().send(due, data)
        else:
            self.backlog.append((due, data))

    def answered(self, connection: _Connection, due: float, status: int) -> None:
        """A request's answer is in: count it, give the connection the next waiting request."""
        self.latencies.append(time.perf_counter() - due)
        self.errors += status not in (200, 304)
        if self.backlog:
            connection.send(*self.backlog.popleft())
        else:
            self.free.append(connection)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: sends a request, tells `_Load` its status once the whole
    response (``Content-Length`` bytes of body) is in."""

    def __init__(self, load: _Load) -> None:
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.due: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.load.free.append(self)

    def send(self, due: float, data: bytes) -> None:
        assert self.transport is not None
        self.due = due
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head, found, rest = self.buffer.partition(b"\r\n\r\n")
        if not found:
            return
        at = head.lower().find(b"content-length:")
        length = 0 if at < 0 else int(head[at + 15 :].split(b"\r\n", 1)[0])
        if len(rest) >= length and self.due is not None:
            self.buffer, due, self.due = rest[length:], self.due, None
            self.load.answered(self, due, int(head[9:12]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.due is not None:
            self.load.errors += 1
            self.due = None


async def _load(
    url: str, requests: list[bytes], rate: float, seconds: float
) -> tuple[int, list[float], int, float]:
    """Offer `rate` requests/s for `seconds` over `CONNECTIONS` connections; (answered,
    sorted latencies from when each request was due, errors, wall seconds). Requests still
    unanswered a second after the last was due are dropped (a saturated server's queue)."""
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    load = _Load()
    for _ in range(CONNECTIONS):
        await loop.create_connection(lambda: _Connection(load), parts.hostname or HOST, parts.port or 80)
    connections = list(load.free)
    total, start = int(rate * seconds), time.perf_counter()
    n = 0
    while n < total:  # every request due by now, then sleep until the next is
        now = time.perf_counter()
        while n < total and start + n / rate <= now:
            load.offer(start + n / rate, requests[n % len(requests)])
            n += 1
        await asyncio.sleep(max(PACE, start + n / rate - time.perf_counter()))
    # past the schedule, a second for the requests under way; those still waiting are dropped
    deadline = time.perf_counter() + 1.0
    while len(load.latencies) + load.errors < total and time.perf_counter() < deadline:
        await asyncio.sleep(0.005)
    wall = time.perf_counter() - start
    answered, latencies = len(load.latencies), sorted(load.latencies)
    for connection in connections:
        if connection.transport is not None:
            connection.transport.close()
    return answered, latencies, load.errors, wall


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
    """One load phase: answered/s, p50 and p99 ms, errors, the server's CPU (cores, and µs per
    answer) and the load generator's (cores), on the loop `serve` answers on (uvloop's)."""
    cpu, client = _cpu_seconds(server.process.pid), time.process_time()
    with asyncio.Runner(loop_factory=serving_loop) as runner:
        answered, latencies, errors, wall = runner.run(_load(server.url, requests, rate, seconds))
    used, client = _cpu_seconds(server.process.pid) - cpu, time.process_time() - client
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
        "client_cores": client / wall,
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
                f"{'errors':>8}{'server CPU':>12}{'µs/answer':>11}{'1 core/s':>10}{'client CPU':>12}",
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
                        f"{row['server_us']:>11,.0f}{1e6 / row['server_us']:>10,.0f}{row['client_cores']:>11.2f}c",
                        file=out,
                        flush=True,
                    )
