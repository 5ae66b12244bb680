"""``stream-rater bench e2e``: end-to-end speed of one worker on the embedded runtime, beside
a naive faust pass-through agent (consume → produce, no Redis) on the same broker, same run.

For each pipeline: warm up, then (1) throughput — publish N 1-vs-1 TrueSkill matches as fast
as possible and time until the last output arrived; (2) latency — publish at a steady rate
with ``finished_at`` = send time and measure send → output; (3) the process's RSS.
"""

from __future__ import annotations

import asyncio
import orjson
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_rater.demo import start_worker, stop_process, worker_env
from stream_rater.events import parse_timestamp
from stream_rater.kafka_io import bootstrap_servers, publish
from stream_rater.settings import Settings, env_name


@dataclass
class PipelineResult:
    """What one pipeline measured."""

    name: str
    matches_per_s: float
    matches_per_cpu_s: float
    p50_ms: float
    p99_ms: float
    rss_mb: float
    peak_rss_mb: float


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _matches(prefix: str, n: int, players: int, rng: random.Random, at: Callable[[], float]) -> list[dict]:
    ids = [f"p{i}" for i in range(players)]
    out = []
    for i in range(n):
        a, b = rng.sample(ids, 2)
        out.append({"match_id": f"{prefix}{i}", "finished_at": at(),
                    "teams": [{"rank": 0, "players": [{"id": a}]}, {"rank": 1, "players": [{"id": b}]}]})
    return out


class _Outputs:
    """Follows an output topic and remembers when each match's first output arrived."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.arrived: dict[str, tuple[float, float]] = {}
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self.consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(self.settings.broker),
                                         enable_auto_commit=False, fetch_max_wait_ms=10)
        await self.consumer.start()
        partitions = [TopicPartition(self.settings.topic_updates, p) for p in range(self.settings.partitions)]
        self.consumer.assign(partitions)
        await self.consumer.seek_to_beginning(*partitions)
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            for records in (await self.consumer.getmany(timeout_ms=50)).values():
                now = time.time()
                for record in records:
                    event = orjson.loads(record.value)
                    if event["match_id"] not in self.arrived:
                        self.arrived[event["match_id"]] = (now, parse_timestamp(event["finished_at"]))

    async def wait_for(self, match_ids: list[str], timeout: float) -> float:
        """Wall-clock time at which the last of `match_ids` had arrived."""
        deadline = time.monotonic() + timeout
        while any(m not in self.arrived for m in match_ids):
            if time.monotonic() > deadline:
                missing = sum(m not in self.arrived for m in match_ids)
                raise TimeoutError(f"{missing} of {len(match_ids)} matches produced no output in {timeout:.0f} s")
            await asyncio.sleep(0.02)
        return max(self.arrived[m][0] for m in match_ids)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.consumer.stop()


async def _measure(name: str, settings: Settings, pid: int, n: int, latency_n: int, rate: float) -> PipelineResult:
    rng = random.Random(1)
    outputs = _Outputs(settings)
    await outputs.start()
    try:
        warm = _matches("warm-", 500, 1000, rng, time.time)
        await publish(warm, settings)
        await outputs.wait_for([m["match_id"] for m in warm], timeout=180)

        burst = _matches("burst-", n, 1000, rng, time.time)
        cpu_before = _cpu_seconds(pid)
        started = time.time()
        await publish(burst, settings)
        finished = await outputs.wait_for([m["match_id"] for m in burst], timeout=600)
        throughput = n / (finished - started)
        per_cpu_second = n / (_cpu_seconds(pid) - cpu_before)

        steady = _matches("steady-", latency_n, 1000, rng, lambda: 0.0)

        def stamped() -> Iterator[dict]:
            for match in steady:
                yield {**match, "finished_at": time.time()}

        await publish(stamped(), settings, rate=rate)
        await outputs.wait_for([m["match_id"] for m in steady], timeout=300)
        latencies = sorted(outputs.arrived[m["match_id"]][0] - outputs.arrived[m["match_id"]][1] for m in steady)
    finally:
        await outputs.stop()
    rss, peak = _rss_mb(pid)
    return PipelineResult(name, throughput, per_cpu_second, 1000 * latencies[len(latencies) // 2],
                          1000 * latencies[int(len(latencies) * 0.99)], rss, peak)


def run(matches: int = 30_000, latency_matches: int = 3_000, rate: float = 500.0,
        partitions: int = 8, out: TextIO = sys.stdout) -> list[PipelineResult]:
    """Measure the worker and the pass-through in one run and print them side by side."""
    from stream_rater.local_runtime import LocalRuntime, free_port

    pipelines = {"stream-rater worker": "worker", "naive faust pass-through": "passthrough"}
    names = {kind: uuid.uuid4().hex[:8] for kind in pipelines.values()}
    topics = {f"{t}-{names[k]}": partitions for k in names for t in ("matches", "updates", "dlq")}
    results = []
    with LocalRuntime(topics=topics) as runtime:
        for label, kind in pipelines.items():
            tag = names[kind]
            settings = Settings(
                broker=runtime.broker_url, redis_url=runtime.redis_url, web_port=free_port(),
                partitions=partitions, topic_matches=f"matches-{tag}", topic_updates=f"updates-{tag}",
                topic_dlq=f"dlq-{tag}", consumer_group=f"bench-{tag}", session_timeout=3.0,
            )
            extra = {env_name(f): getattr(settings, f) for f in ("topic_matches", "topic_updates", "topic_dlq")}
            log = (Path(runtime.log_dir or ".") / f"{kind}.log").open("w")
            if kind == "worker":
                process = start_worker(settings, extra, log)
            else:
                process = subprocess.Popen([sys.executable, "-m", "stream_rater.bench.passthrough"],
                                           env=worker_env(settings, extra), stdout=log, stderr=subprocess.STDOUT)
            try:
                results.append(asyncio.run(_measure(label, settings, process.pid, matches, latency_matches, rate)))
            finally:
                stop_process(process)
                log.close()
    _print(results, matches, latency_matches, rate, out)
    return results


def _print(results: list[PipelineResult], n: int, latency_n: int, rate: float, out: TextIO) -> None:
    print(f"end to end, embedded runtime, 1v1 TrueSkill; throughput over {n:,} matches, "
          f"latency over {latency_n:,} at {rate:,.0f}/s", file=out)
    print("(the broker, Redis, the load generator and the pipeline share the machine's cores; "
          "matches per CPU-second of the pipeline process is what one dedicated core would do)", file=out)
    print(f"{'pipeline':<28}{'matches/s':>11}{'per CPU-s':>11}{'p50 ms':>9}{'p99 ms':>9}{'RSS MB':>9}"
          f"{'peak MB':>9}", file=out)
    for r in results:
        print(f"{r.name:<28}{r.matches_per_s:>11,.0f}{r.matches_per_cpu_s:>11,.0f}{r.p50_ms:>9.1f}"
              f"{r.p99_ms:>9.1f}{r.rss_mb:>9.0f}{r.peak_rss_mb:>9.0f}", file=out)
    worker, passthrough = results
    print(f"worker / pass-through: throughput {worker.matches_per_s / passthrough.matches_per_s:.2f}x, "
          f"per CPU-second {worker.matches_per_cpu_s / passthrough.matches_per_cpu_s:.2f}x", file=out)
