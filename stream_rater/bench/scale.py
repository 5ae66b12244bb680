"""``stream-rater bench scale``: does the work spread over workers, and what saturates next?

For each store (a single Redis, the local 3-master Redis Cluster) and each worker count, on a
fresh embedded runtime: the matches topic gets `partitions` partitions, that many ``stream-rater
worker`` processes join one consumer group, and once the group has settled (every partition
assigned to exactly one worker) `matches` 1-vs-1 TrueSkill matches spread round-robin over
`ladders` ladders are published as fast as possible. The run ends when the ladders' watermarks
in the store (matches applied) add up to `matches`; polled, never slept on.

Reported per run: aggregate matches/s (from the first publish to the last match applied),
matches per CPU-second of the workers, and the CPU the workers, Redis (every node), the broker
and this process (the publisher) used meanwhile, in cores (``/proc/<pid>/stat``); per worker
its partitions, the matches it applied and how long it took for them (its ``/api/overview``
sampled every 100 ms: a worker done early had the lighter share), its CPU, and from its
``/metrics`` its batches, store round trips per batch and the seconds they took. The workers'
consumer-lag gauge is refreshed every 5 s, too rarely for runs this short. Each run ends with a check: every ladder's states must equal a replay of its
matches read back from the topic (`offline.verify.compare`); a run that differs is marked
FAILED and the command exits 1.

Ladder names are chosen so that the ladders spread evenly over the partitions (records are
keyed by ladder): with 16 ladders on 8 partitions each partition carries two.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from prometheus_client.parser import text_string_to_metric_families

from stream_rater.bench.e2e import _cpu_seconds, _matches
from stream_rater.config.ladders import Ladders, load_ladders
from stream_rater.config.settings import Settings
from stream_rater.kafka import home_partition, ladder_history, publish, read_log
from stream_rater.local.demo import ladders_env, start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.runtime import ClusterLayout, LocalRuntime, free_port
from stream_rater.offline.verify import compare
from stream_rater.offline.verify import verdict as verify_verdict
from stream_rater.store import StateStore, open_store
from stream_rater.waiting import wait_until_async

STORES = ("single", "cluster")
#: Players per ladder in the synthetic matches (default).
PLAYERS = 1000


@dataclass
class WorkerShare:
    """What one worker of a run did: its partitions, the matches it applied, the seconds
    from the first publish until its last match was applied, and its CPU time."""

    partitions: list[int]
    applied: int
    busy_seconds: float
    cpu_seconds: float
    #: Batches processed, store round trips (read and commit scripts) and their seconds.
    batches: int = 0
    round_trips: int = 0
    store_seconds: float = 0.0

    @property
    def matches_per_s(self) -> float:
        return self.applied / self.busy_seconds if self.busy_seconds else 0.0


@dataclass
class ScaleRun:
    """One row of the scale table: a store, a worker count, and what was measured."""

    store: str
    ladders: int
    workers: int
    matches: int
    #: Players per ladder.
    players: int
    seconds: float
    worker_cpu_seconds: float
    redis_cpu_seconds: float
    broker_cpu_seconds: float
    bench_cpu_seconds: float
    shares: list[WorkerShare] = field(default_factory=list)
    differences: int = 0

    @property
    def matches_per_s(self) -> float:
        return self.matches / self.seconds

    @property
    def matches_per_cpu_s(self) -> float:
        """Matches per CPU-second of the workers (their CPU time counts in clock ticks)."""
        return self.matches / max(self.worker_cpu_seconds, 1 / os.sysconf("SC_CLK_TCK"))

    def cores(self, cpu_seconds: float) -> float:
        """`cpu_seconds` used during the run as cores kept busy on average."""
        return cpu_seconds / self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "matches_per_s": self.matches_per_s,
            "matches_per_cpu_s": self.matches_per_cpu_s,
        }


def balanced_ladders(count: int, partitions: int, prefix: str = "scale") -> list[str]:
    """`count` ladder names whose home partitions (of `partitions`) differ by at most one
    ladder per partition, so keyed records spread evenly."""
    per_partition = -(-count // partitions)
    names: list[str] = []
    used = dict.fromkeys(range(partitions), 0)
    for i in itertools.count():
        if len(names) == count:
            return names
        name = f"{prefix}-{i}"
        home = home_partition(name, partitions)
        if used[home] < per_partition:
            names.append(name)
            used[home] += 1
    raise AssertionError("unreachable")


def run(
    ladders: Sequence[int] = (16,),
    partitions: int = 8,
    workers: Sequence[int] = (1, 2, 4),
    matches: int = 60_000,
    stores: Sequence[str] = STORES,
    players: int = PLAYERS,
    as_json: bool = False,
    total_players: int | None = None,
) -> list[ScaleRun]:
    """Measure every (ladder count, store, worker count) on a fresh embedded runtime, with
    `players` players per ladder — or, with `total_players`, that many players split evenly
    over the ladders, so that the ladder counts differ only in how the same players and matches
    are split; print the table (or JSON) on stdout and return the runs. A run whose states
    differ from a replay is reported FAILED."""
    if max(workers) > partitions:
        raise ValueError(
            f"--workers {max(workers)} is more than --partitions {partitions}: "
            "a worker without a partition would sit idle"
        )
    if total_players is not None and total_players < 2 * max(ladders):
        raise ValueError(
            f"--total-players {total_players}: fewer than 2 players per ladder with {max(ladders)} ladders"
        )
    runs, out = [], sys.stdout
    if not as_json:
        _print_header(partitions, matches, out)
    for count_of_ladders in ladders:
        names = balanced_ladders(count_of_ladders, partitions)
        each = players if total_players is None else total_players // count_of_ladders
        events = _matches("scale-", matches, each, random.Random(1), time.time, names)
        for store in stores:
            for count in workers:
                result = _one_run(store, count, partitions, names, events, each)
                runs.append(result)
                if not as_json:
                    _print_row(result, out)
    if as_json:
        print(json.dumps([r.to_dict() for r in runs], indent=2), file=out)
    return runs


def _one_run(
    store: str, count: int, partitions: int, names: list[str], events: list[dict[str, Any]], players: int
) -> ScaleRun:
    """One store and worker count on its own runtime, topics and consumer group."""
    tag = uuid.uuid4().hex[:8]
    topics = {f"{t}-{tag}": partitions for t in ("matches", "updates", "dlq")}
    with LocalRuntime(topics=topics, redis=ClusterLayout(3) if store == "cluster" else True) as runtime:
        settings = tagged_settings(
            tag,
            broker=runtime.broker_url,
            redis_url=runtime.redis_url,
            partitions=partitions,
            fetch_max_wait=runtime.fetch_max_wait(),
        )
        env = ladders_env(names)
        ports = [free_port() for _ in range(count)]
        started = []
        try:
            for n, port in enumerate(ports):
                with (Path(runtime.log_dir or ".") / f"worker-{n}.log").open("w") as log:
                    started.append(start_worker(replace(settings, web_port=port), env, log, tied=True))
            for process, port in zip(started, ports):
                wait_ready(process, f"http://127.0.0.1:{port}/readyz")
            result = asyncio.run(
                _measure(
                    store,
                    settings,
                    _Processes([p.pid for p in started], ports, runtime.pids),
                    names,
                    events,
                    load_ladders(None, env),
                    players,
                )
            )
        finally:
            for process in started:
                stop_process(process)
    return result


def _get(port: int, path: str) -> dict[str, Any]:
    """A worker's JSON answer to ``GET path`` (also a 503 readiness answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as exc:
        error: dict[str, Any] = json.loads(exc.read())
        return error


def _batches(port: int) -> tuple[int, int, float]:
    """A worker's batches, store round trips (reads and commits) and their total seconds,
    from its ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        families = text_string_to_metric_families(response.read().decode())
    samples = {(s.name, s.labels.get("operation")): s.value for family in families for s in family.samples}
    trips = [
        samples.get((f"stream_rater_store_round_trip_seconds_{kind}", op), 0.0)
        for kind in ("count", "sum")
        for op in ("read", "commit")
    ]
    return (
        int(samples.get(("stream_rater_batch_size_count", None), 0)),
        int(trips[0] + trips[1]),
        trips[2] + trips[3],
    )


async def _settled(ports: list[int], partitions: int, timeout: float = 120.0) -> list[list[int]]:
    """Each worker's partitions once every partition belongs to exactly one ready worker."""
    owned: list[list[int]] = []

    async def settled() -> list[list[int]] | None:
        ready = [await asyncio.to_thread(_get, port, "/readyz") for port in ports]
        owned[:] = [answer.get("partitions", []) for answer in ready]
        every = sorted(p for mine in owned for p in mine)
        return (
            owned
            if all(answer.get("ready") for answer in ready) and every == list(range(partitions))
            else None
        )

    return await wait_until_async(
        settled, lambda: f"the consumer group to settle: partitions {owned}", timeout, interval=0.1
    )


async def _applied(store: StateStore, names: list[str]) -> int:
    """Matches applied over all `names`, by their watermarks in the store."""
    return sum([(await store.read(name, [], [], [])).watermark for name in names])


class _Processes(NamedTuple):
    """The processes of a run: the workers' pids and web ports, and the runtime's services."""

    pids: list[int]
    ports: list[int]
    services: dict[str, int]


async def _measure(
    store_kind: str,
    settings: Settings,
    processes: _Processes,
    names: list[str],
    events: list[dict[str, Any]],
    ladders: Ladders,
    players: int,
) -> ScaleRun:
    """Publish the backlog to the settled group and follow it until every match is applied;
    then check every ladder against a replay."""
    pids, ports, services = processes
    await _settled(ports, settings.partitions)
    store = open_store(settings.redis_url, prefix=settings.redis_prefix)
    try:
        cpu = {pid: _cpu_seconds(pid) for pid in (*pids, *services.values())}
        own_cpu = time.process_time()
        progress = _Progress(ports)
        started = time.perf_counter()
        publisher = asyncio.ensure_future(publish(events, settings))
        applied = 0

        async def all_applied() -> bool:
            nonlocal applied
            if publisher.done() and (failed := publisher.exception()):
                raise failed
            applied = await _applied(store, names)
            if applied >= len(events):
                return True
            await progress.sample(time.perf_counter() - started)
            return False

        await wait_until_async(all_applied, lambda: f"all {len(events)} matches applied, {applied} are", 600)
        seconds = time.perf_counter() - started
        used = {pid: _cpu_seconds(pid) - before for pid, before in cpu.items()}
        own = time.process_time() - own_cpu
        await publisher
        await _counted(progress, started, len(events))
        shares = await _shares(progress, used, pids, ports)
        redis = sum(used[pid] for name, pid in services.items() if name.startswith("redis"))
        result = ScaleRun(
            store_kind,
            len(names),
            len(pids),
            len(events),
            players,
            seconds,
            sum(used[pid] for pid in pids),
            redis,
            used[services["tansu"]],
            own,
            shares,
        )
        result.differences = await _verify(settings, store, ladders, names)
    finally:
        await store.close()
    return result


async def _counted(progress: _Progress, started: float, matches: int) -> None:
    """Wait until the workers' counters (which follow their commits) count `matches` applied."""

    async def all_counted() -> bool:
        await progress.sample(time.perf_counter() - started)
        return sum(progress.applied()) >= matches

    await wait_until_async(
        all_counted,
        lambda: f"the workers to count {matches} matches applied, not {sum(progress.applied())}",
        30,
    )


async def _shares(
    progress: _Progress, used: dict[int, float], pids: list[int], ports: list[int]
) -> list[WorkerShare]:
    """Each worker's partitions, matches applied, busy time, CPU (`used`) and batches."""
    return [
        WorkerShare(partitions, applied, busy, used[pid], *await asyncio.to_thread(_batches, port))
        for partitions, applied, busy, pid, port in zip(
            progress.partitions, progress.applied(), progress.busy(), pids, ports
        )
    ]


class _Progress:
    """Each worker's partitions and matches applied over time, from its ``/api/overview``
    (sampled at most every `every` seconds)."""

    def __init__(self, ports: list[int], every: float = 0.1) -> None:
        self.ports = ports
        self.every = every
        self.partitions: list[list[int]] = [[] for _ in ports]
        self.samples: list[list[tuple[float, int]]] = [[(0.0, 0)] for _ in ports]

    async def sample(self, at: float) -> None:
        """Take a sample of every worker unless the last one is younger than `every`."""
        if at - self.samples[0][-1][0] < self.every:
            return
        for n, port in enumerate(self.ports):
            overview = await asyncio.to_thread(_get, port, "/api/overview")
            self.partitions[n] = overview["worker"]["partitions"]
            self.samples[n].append((at, int(overview["totals"]["applied"])))

    def applied(self) -> list[int]:
        """Matches each worker has applied so far."""
        return [samples[-1][1] for samples in self.samples]

    def busy(self) -> list[float]:
        """Seconds from the start until each worker's count first reached its last value."""
        return [next(at for at, count in samples if count == samples[-1][1]) for samples in self.samples]


async def _verify(settings: Settings, store: StateStore, ladders: Ladders, names: list[str]) -> int:
    """Players (over all `names`) whose state differs from a replay of the ladder's matches
    read back from the topic; the topic is read once, each ladder from its home partition."""
    records, _ = await read_log(settings, settings.topic_matches)
    differ = 0
    for name in names:
        home = home_partition(name, settings.partitions)
        history = ladder_history([r for r in records if r.partition == home], ladders, name)
        live = await store.players(name), await store.players(name, effects=True)
        differ += len((await compare(store, ladders, history, live)).differences)
    return differ


def _print_header(partitions: int, matches: int, out: TextIO) -> None:
    print(
        f"scale: {matches:,} 1v1 TrueSkill matches round-robin over the ladders ('players': per ladder) on "
        f"{partitions} partitions, published once the consumer group has settled; a fresh embedded runtime "
        "(Tansu, Redis) per row",
        file=out,
    )
    print(
        f"(all on this machine's {os.cpu_count()} cores: 'cores' is CPU-seconds used during the run per second "
        "of it; per CPU-s is matches per CPU-second of the workers)",
        file=out,
    )
    print(
        f"{'store':<9}{'ladders':>8}{'workers':>8}{'players':>9}{'seconds':>9}{'matches/s':>11}{'per CPU-s':>11}{'workers':>9}{'Redis':>7}"
        f"{'broker':>8}{'bench':>7}{'total':>7}  verify",
        file=out,
    )
    print(f"{'':<65}{'cores':>9}{'cores':>7}{'cores':>8}{'cores':>7}{'cores':>7}", file=out)


def _print_row(r: ScaleRun, out: TextIO) -> None:
    total = r.worker_cpu_seconds + r.redis_cpu_seconds + r.broker_cpu_seconds + r.bench_cpu_seconds
    verdict = "ok" if not r.differences else f"FAILED: {verify_verdict(r.players, r.differences)}"
    print(
        f"{r.store:<9}{r.ladders:>8}{r.workers:>8}{r.players:>9,}{r.seconds:>9.2f}{r.matches_per_s:>11,.0f}{r.matches_per_cpu_s:>11,.0f}"
        f"{r.cores(r.worker_cpu_seconds):>9.2f}{r.cores(r.redis_cpu_seconds):>7.2f}"
        f"{r.cores(r.broker_cpu_seconds):>8.2f}{r.cores(r.bench_cpu_seconds):>7.2f}{r.cores(total):>7.2f}"
        f"  {verdict}",
        file=out,
    )
    for n, share in enumerate(r.shares):
        print(
            f"{'':<9}worker {n}: partitions {','.join(map(str, share.partitions))}: {share.applied:,} matches "
            f"in {share.busy_seconds:.2f} s ({share.matches_per_s:,.0f}/s), {r.cores(share.cpu_seconds):.2f} cores; "
            f"{share.batches:,} batches of {share.applied / max(share.batches, 1):,.0f} matches, "
            f"{share.round_trips / max(share.batches, 1):.1f} store round trips each "
            f"({share.store_seconds:.1f} s in all)",
            file=out,
            flush=True,
        )
