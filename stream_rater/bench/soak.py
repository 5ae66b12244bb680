"""``stream-rater bench soak``: one worker under sustained load for minutes, on the embedded
runtime — does its memory or latency drift?

Matches (1v1 TrueSkill, 10,000 players, ``finished_at`` = send time) are published at a fixed
rate; every `interval` seconds a row reports the matches rated in that window, the latency of
their first rating-changed event (p50, p99) and the worker's RSS. The table is printed and,
with ``--plot FILE.png`` (matplotlib), drawn.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from stream_rater.bench.e2e import _Outputs, _rss_mb
from stream_rater.config.settings import Settings
from stream_rater.kafka import publish
from stream_rater.local.demo import start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.runtime import BrokerKind, LocalRuntime, free_port


@dataclass(frozen=True, slots=True)
class Window:
    """One row of the soak table."""

    elapsed: float
    rated: int
    p50_ms: float
    p99_ms: float
    rss_mb: float


def run(
    minutes: float,
    rate: float,
    interval: float = 10.0,
    plot: str | None = None,
    out: TextIO = sys.stdout,
    broker: BrokerKind = "tansu",
) -> list[Window]:
    """Publish at `rate` for `minutes` on `broker`, sampling every `interval` seconds; print the table."""
    tag = uuid.uuid4().hex[:8]
    topics = {f"{t}-{tag}": 1 for t in ("matches", "updates", "dlq")}
    with LocalRuntime(topics=topics, broker=broker) as runtime:
        settings = tagged_settings(
            tag,
            broker=runtime.broker_url,
            redis_url=runtime.redis_url,
            web_port=free_port(),
            partitions=1,
            fetch_max_wait=runtime.fetch_max_wait(),
        )
        log = (Path(runtime.log_dir or ".") / "worker.log").open("w")
        worker = start_worker(settings, {}, log, tied=True)
        try:
            wait_ready(worker, f"http://127.0.0.1:{settings.web_port}/readyz")
            print(f"broker: {broker}", file=out)
            windows = asyncio.run(_soak(settings, worker.pid, minutes * 60, rate, interval, out))
        finally:
            stop_process(worker)
            log.close()
    if plot:
        _plot(windows, plot)
    return windows


async def _soak(
    settings: Settings, pid: int, seconds: float, rate: float, interval: float, out: TextIO
) -> list[Window]:
    outputs = _Outputs(settings)
    outputs.follow_matches = True
    await outputs.start()
    deadline = time.time() + seconds
    rng = random.Random(1)

    players = [f"p{i}" for i in range(10_000)]

    def stamped() -> Iterator[dict[str, Any]]:
        for n in itertools.count():
            now = time.time()
            if now >= deadline:
                return
            a, b = rng.sample(players, 2)
            yield {
                "match_id": f"soak-{n}",
                "finished_at": now,
                "teams": [{"rank": 0, "players": [{"id": a}]}, {"rank": 1, "players": [{"id": b}]}],
            }

    publisher = threading.Thread(  # linger 0: latency counts from each match's due time
        target=lambda: asyncio.run(publish(stamped(), settings, rate=rate, linger=0.0))
    )
    publisher.start()
    print(
        f"soak: one worker, {rate:,.0f} matches/s for {seconds / 60:g} min, a row every {interval:g} s",
        file=out,
    )
    print(f"{'minute':>7}{'rated':>9}{'p50 ms':>9}{'p99 ms':>9}{'RSS MB':>9}", file=out)
    windows: list[Window] = []
    started, seen = time.time(), 0
    try:
        while publisher.is_alive():
            await asyncio.sleep(interval)
            arrived = list(outputs.arrived.values())
            fresh, seen = arrived[seen:], len(arrived)
            latencies = sorted(at - finished for at, finished in fresh) or [float("nan")]
            window = Window(
                time.time() - started,
                len(fresh),
                1000 * latencies[len(latencies) // 2],
                1000 * latencies[int(len(latencies) * 0.99)],
                _rss_mb(pid)[0],
            )
            windows.append(window)
            print(
                f"{window.elapsed / 60:>7.1f}{window.rated:>9,}{window.p50_ms:>9.1f}{window.p99_ms:>9.1f}"
                f"{window.rss_mb:>9.0f}",
                file=out,
                flush=True,
            )
    finally:
        publisher.join()
        await outputs.stop()
    return windows


def _plot(windows: list[Window], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [w.elapsed / 60 for w in windows]
    figure, (latency, memory) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    latency.plot(minutes, [w.p50_ms for w in windows], label="p50")
    latency.plot(minutes, [w.p99_ms for w in windows], label="p99")
    latency.set(ylabel="latency (ms)", title="soak: latency and memory over time")
    latency.legend()
    memory.plot(minutes, [w.rss_mb for w in windows])
    memory.set(xlabel="minutes", ylabel="worker RSS (MB)")
    figure.savefig(path)
    plt.close(figure)
