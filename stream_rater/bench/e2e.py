"""``stream-rater bench e2e``: end-to-end speed of one worker on the embedded runtime, beside
a naive faust pass-through agent (consume → produce, no Redis) on the same broker, same run.

Every match is on one ladder, so all of them share one partition (records are keyed by
ladder): the worker's throughput here is the ceiling of one ladder, which one worker applies
in log order.

For each pipeline: (1) throughput — N 1-vs-1 TrueSkill matches are published before the
pipeline starts; the rate is taken over the middle 90 % of its outputs by their producer
timestamps (no start-up, no tail), and so is the pipeline's CPU time, sampled every 50 ms;
(2) Redis's CPU time per match over the same window; (3) latency at each of several steady
rates — publish with ``finished_at`` = send time and measure send → output — and the
pipeline's CPU over each steady phase (cores, and µs per match: at a low rate a batch holds a
match or two, so its fixed cost is what a match pays); (4) the process's RSS. The load
generator does not run during (1).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_rater.config.settings import Settings
from stream_rater.contracts import parse_timestamp
from stream_rater.kafka import bootstrap_servers, publish
from stream_rater.local.demo import start_worker, stop_process, tagged_settings, worker_env
from stream_rater.local.processes import popen_tied

if TYPE_CHECKING:
    from stream_rater.local.runtime import BrokerKind
from stream_rater.waiting import wait_until_async


@dataclass
class PipelineResult:
    """What one pipeline measured."""

    name: str
    matches_per_s: float
    matches_per_cpu_s: float
    #: Steady rate (matches/s) → (p50, p99) latency in ms.
    latency_ms: dict[float, tuple[float, float]]
    #: Steady rate → the p50s (ms) of the latency's two parts: publish → the pipeline produces
    #: the first output (its producer timestamp), and produced → the subscriber has it.
    stages_ms: dict[float, tuple[float, float]]
    #: Steady rate → the pipeline's CPU over that phase: cores, and µs per match.
    steady_cpu: dict[float, tuple[float, float]]
    rss_mb: float
    peak_rss_mb: float
    services_cores: float
    #: Redis's CPU time per match of the backlog, in µs.
    redis_us_per_match: float


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _matches(
    prefix: str,
    n: int,
    players: int,
    rng: random.Random,
    at: Callable[[], float],
    ladders: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """`n` 1-vs-1 matches between random players of `players`; with `ladders`, the i-th match
    is on ``ladders[i % len(ladders)]`` (each ladder its own pool of players), else on the
    default ladder."""
    ids = [f"p{i}" for i in range(players)]
    out = []
    for i in range(n):
        a, b = rng.sample(ids, 2)
        match = {
            "match_id": f"{prefix}{i}",
            "finished_at": at(),
            "teams": [{"rank": 0, "players": [{"id": a}]}, {"rank": 1, "players": [{"id": b}]}],
        }
        if ladders:
            match["ladder"] = ladders[i % len(ladders)]
        out.append(match)
    return out


class _Outputs:
    """Follows an output topic: counts records with their producer timestamps and, once
    `follow_matches` is set, remembers when each match's first output arrived (`arrived`:
    arrival, ``finished_at``) and when the pipeline produced it (`produced`: its producer
    timestamp, milliseconds)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.timestamps: list[int] = []
        self.follow_matches = False
        self.arrived: dict[str, tuple[float, float]] = {}
        self.produced: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers(self.settings.broker),
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # as the seek below: an in-flight reset must not win
            fetch_max_wait_ms=5,  # a broker may hold a fetch this long (Tansu does): it adds to the latency measured
        )
        await self.consumer.start()
        partitions = [TopicPartition(self.settings.topic_updates, p) for p in range(self.settings.partitions)]
        self.consumer.assign(partitions)
        await self.consumer.seek_to_beginning(*partitions)
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            for records in (await self.consumer.getmany(timeout_ms=50)).values():
                now = time.time()
                self.timestamps += [record.timestamp for record in records]
                if not self.follow_matches:
                    continue
                for record in records:
                    event = orjson.loads(record.value)
                    if event["match_id"] not in self.arrived:
                        self.arrived[event["match_id"]] = (now, parse_timestamp(event["finished_at"]))
                        self.produced[event["match_id"]] = record.timestamp / 1000

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.consumer.stop()


def _interpolate(samples: list[tuple[float, float]], at: float) -> float:
    """The sampled value at time `at` (samples are (time, value), time ascending)."""
    times = [t for t, _ in samples]
    i = min(max(bisect.bisect_left(times, at), 1), len(samples) - 1)
    (t0, v0), (t1, v1) = samples[i - 1], samples[i]
    return v0 if t1 == t0 else v0 + (v1 - v0) * (at - t0) / (t1 - t0)


@dataclass(frozen=True)
class Load:
    """What a run sends: a backlog of `matches`, then `latency_seconds` at each of `rates`
    (matches/s), every match between two of `players` players."""

    matches: int = 30_000
    latency_seconds: float = 5.0
    rates: Sequence[float] = (100.0, 500.0, 5000.0)
    players: int = 1000


async def _measure(
    name: str,
    settings: Settings,
    process: Callable[[], int],
    load: Load,
    per_match: int,
    services: Mapping[str, int],
) -> PipelineResult:
    """Throughput over the backlog of `load` published before the pipeline starts, then
    latency at each of its steady rates. `process` starts the pipeline and returns its PID;
    the CPU time of the `services` (name → PID: broker, Redis) and of ``redis`` alone is
    sampled beside the pipeline's."""
    rng = random.Random(1)
    n = load.matches
    await publish(_matches("burst-", n, load.players, rng, time.time), settings)
    outputs = _Outputs(settings)
    await outputs.start()
    try:
        pid = process()
        cpu: list[tuple[float, float]] = []
        services_cpu: list[tuple[float, float]] = []
        redis_cpu: list[tuple[float, float]] = []

        def sample() -> None:
            now = time.time()
            cpu.append((now, _cpu_seconds(pid)))
            services_cpu.append((now, sum(map(_cpu_seconds, services.values()))))
            redis_cpu.append((now, _cpu_seconds(services["redis"])))

        async def backlog_rated() -> bool:
            if len(outputs.timestamps) >= n * per_match:
                return True
            sample()
            return False

        await wait_until_async(backlog_rated, "the output of the backlog", 600)
        sample()
        first, last = _middle(outputs.timestamps, n, per_match)
        matches = 0.9 * n

        def used(samples: list[tuple[float, float]]) -> float:
            return _interpolate(samples, last) - _interpolate(samples, first)

        throughput = matches / (last - first)
        per_cpu_second = matches / used(cpu)
        services_cores = used(services_cpu) / (last - first)
        redis_us = 1e6 * used(redis_cpu) / matches
        outputs.follow_matches = True
        measured, steady_cpu = await _steady_phases(outputs, settings, rng, load, pid)
    finally:
        await outputs.stop()
    rss, peak = _rss_mb(pid)
    latency = {rate: totals for rate, (totals, _) in measured.items()}
    stages = {rate: parts for rate, (_, parts) in measured.items()}
    return PipelineResult(
        name, throughput, per_cpu_second, latency, stages, steady_cpu, rss, peak, services_cores, redis_us
    )


async def _steady_phases(
    outputs: _Outputs, settings: Settings, rng: random.Random, load: Load, pid: int
) -> tuple[dict[float, tuple[tuple[float, float], tuple[float, float]]], dict[float, tuple[float, float]]]:
    """Per rate of `load`, `_latency`'s figures, and the CPU of the pipeline (process `pid`)
    over that phase: cores, and µs per match (`PipelineResult.steady_cpu`)."""
    measured = {}
    steady_cpu = {}
    for rate in load.rates:
        started, cpu_before = time.time(), _cpu_seconds(pid)
        measured[rate], count = await _latency(outputs, settings, rng, rate, load)
        used_cpu = _cpu_seconds(pid) - cpu_before
        steady_cpu[rate] = used_cpu / (time.time() - started), 1e6 * used_cpu / count
    return measured, steady_cpu


def _middle(timestamps: Sequence[float], n: int, per_match: int) -> tuple[float, float]:
    """When the middle 90 % of the backlog's outputs were produced (seconds): no start-up
    (group join, first fetch) and no tail."""
    stamps = sorted(timestamps)[: n * per_match]
    first, last = stamps[len(stamps) // 20] / 1000, stamps[len(stamps) * 19 // 20] / 1000
    if last - first < 0.05:
        raise ValueError(
            f"the backlog of {n:,} matches was rated in {last - first:.3f} s, too short to "
            "measure: give a larger --matches"
        )
    return first, last


async def _latency(
    outputs: _Outputs, settings: Settings, rng: random.Random, rate: float, load: Load
) -> tuple[tuple[tuple[float, float], tuple[float, float]], int]:
    """p50 and p99 (ms) from publishing to the first output of each match, publishing
    `load`'s seconds of matches at a steady `rate`, and the p50s of its two parts
    (`PipelineResult.stages_ms`); and how many matches that was."""
    count = max(20, int(rate * load.latency_seconds))
    steady = _matches(f"steady-{rate:g}-", count, load.players, rng, lambda: 0.0)

    def stamped() -> Iterator[dict[str, Any]]:
        for match in steady:
            yield {**match, "finished_at": time.time()}

    await publish(stamped(), settings, rate=rate, linger=0.0)  # latency counts from each match's due time

    async def steady_rated() -> bool:
        return all(m["match_id"] in outputs.arrived for m in steady)

    await wait_until_async(steady_rated, "the output of the steady phase", 300)
    ids = [m["match_id"] for m in steady]
    latencies = sorted(outputs.arrived[i][0] - outputs.arrived[i][1] for i in ids)
    producing = sorted(outputs.produced[i] - outputs.arrived[i][1] for i in ids)
    delivering = sorted(outputs.arrived[i][0] - outputs.produced[i] for i in ids)
    totals = 1000 * latencies[len(latencies) // 2], 1000 * latencies[int(len(latencies) * 0.99)]
    return (totals, (1000 * producing[len(ids) // 2], 1000 * delivering[len(ids) // 2])), count


def run(
    load: Load = Load(),
    partitions: int = 8,
    out: TextIO = sys.stdout,
    broker: BrokerKind = "tansu",
) -> list[PipelineResult]:
    """Measure the worker and the pass-through under `load` in one run on `broker` and print
    them side by side."""
    from stream_rater.local.runtime import LocalRuntime, free_port

    pipelines = {"stream-rater worker": "worker", "naive faust pass-through": "passthrough"}
    outputs_per_match = {"worker": 2, "passthrough": 1}  # a rating change per player; a copy
    names = {kind: uuid.uuid4().hex[:8] for kind in pipelines.values()}
    topics = {f"{t}-{names[k]}": partitions for k in names for t in ("matches", "updates", "dlq")}
    results = []
    with LocalRuntime(topics=topics, broker=broker) as runtime:
        for label, kind in pipelines.items():
            settings = tagged_settings(
                names[kind],
                broker=runtime.broker_url,
                redis_url=runtime.redis_url,
                web_port=free_port(),
                partitions=partitions,
                fetch_max_wait=runtime.fetch_max_wait(),
            )
            started: list[subprocess.Popen[bytes]] = []
            start = functools.partial(_start_pipeline, kind, settings, Path(runtime.log_dir or "."), started)
            try:
                results.append(
                    asyncio.run(
                        _measure(
                            label,
                            settings,
                            start,
                            load,
                            outputs_per_match[kind],
                            runtime.pids,
                        )
                    )
                )
            finally:
                for process in started:
                    stop_process(process)
    _print(results, load, broker, out)
    return results


def _start_pipeline(
    kind: str, settings: Settings, log_dir: Path, started: list[subprocess.Popen[bytes]]
) -> int:
    """Start the worker or the faust pass-through (`kind`) with its log in `log_dir`, add it to
    `started` and return its PID."""
    log = (log_dir / f"{kind}.log").open("w")
    if kind == "worker":
        started.append(start_worker(settings, {}, log, tied=True))
    else:
        started.append(
            popen_tied(
                [sys.executable, "-m", "stream_rater.bench.passthrough"],
                env=worker_env(settings, {}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    log.close()
    return started[-1].pid


def _print(results: list[PipelineResult], load: Load, broker: str, out: TextIO) -> None:
    rates = list(results[0].latency_ms)
    print(
        f"end to end, embedded runtime on {broker}, 1v1 TrueSkill on one ladder (one partition) of {load.players:,} "
        f"players; throughput over a backlog of {load.matches:,} matches (middle 90 % of the outputs), latency "
        f"over {load.latency_seconds:g} s at each of {', '.join(f'{r:,.0f}' for r in rates)} matches/s",
        file=out,
    )
    print(
        f"(the broker and Redis share the machine's {os.cpu_count()} cores with the pipeline: 'svc cores' is "
        "what they used meanwhile, 'Redis µs' Redis's CPU per match; matches per CPU-second of the pipeline "
        "process is what one dedicated core would do)",
        file=out,
    )
    latency_heads = "".join(f"{f'p50@{r:g}':>10}{f'p99@{r:g}':>10}" for r in rates)
    print(
        f"{'pipeline':<28}{'matches/s':>11}{'per CPU-s':>11}{'svc cores':>11}{'Redis µs':>10}{latency_heads}"
        f"{'RSS MB':>9}{'peak MB':>9}",
        file=out,
    )
    for r in results:
        latencies = "".join(f"{p50:>10.1f}{p99:>10.1f}" for p50, p99 in r.latency_ms.values())
        print(
            f"{r.name:<28}{r.matches_per_s:>11,.0f}{r.matches_per_cpu_s:>11,.0f}{r.services_cores:>11.2f}"
            f"{r.redis_us_per_match:>10.1f}{latencies}{r.rss_mb:>9.0f}{r.peak_rss_mb:>9.0f}",
            file=out,
        )
    split = "; ".join(
        f"{r.name} " + ", ".join(f"@{rate:g} {a:.1f} + {b:.1f}" for rate, (a, b) in r.stages_ms.items())
        for r in results
    )
    print(
        f"p50 split, ms, publish → produced + produced → subscriber (by producer timestamps): {split}",
        file=out,
    )
    steady = "; ".join(
        f"{r.name} "
        + ", ".join(f"@{rate:g} {cores:.2f} ({us:,.0f} µs)" for rate, (cores, us) in r.steady_cpu.items())
        for r in results
    )
    print(f"pipeline CPU at each steady rate, cores (µs per match): {steady}", file=out)
    worker, passthrough = results
    print(
        f"worker / pass-through: throughput {worker.matches_per_s / passthrough.matches_per_s:.2f}x, "
        f"per CPU-second {worker.matches_per_cpu_s / passthrough.matches_per_cpu_s:.2f}x",
        file=out,
    )
