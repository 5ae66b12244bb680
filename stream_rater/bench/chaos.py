"""``stream-rater bench chaos``: a nemesis. The embedded runtime (Apache Kafka of 3 brokers with
replication 3 by default, or Tansu; a Redis with an append-only file) and K workers rate a
stream published at a steady rate over several ladders and shapes, with invalid and oversized
records mixed in, while a seeded schedule (`chaos_schedule`) injects faults several at a time:
workers killed, frozen, restarted, added and removed; brokers killed or frozen; Redis frozen,
refusing writes, killed and restarted from its AOF; a worker cut off from Redis (a TCP proxy
per worker) or from every broker (a proxy per worker and broker, behind a listener of its own); ``void``, ``unvoid``, ``rerate`` and a season start issued mid-run. Every fault is
healed before the end; after a quiet period the verdict (`chaos_verdict`) is read from the
topics and the store, not from the workers' counters. Exit 1 on any violation, with the seed
and the schedule written to a file so that the run can be repeated.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from stream_rater.bench.chaos_checkpoints import CheckpointLoop, tagged, wait_caught_up
from stream_rater.bench.chaos_schedule import (
    CORRECTIONS,
    EXTRA_WORKER_SLOTS,
    LADDER_SHAPES,
    Fault,
    draw_schedule,
    match_id,
    match_record,
)
from stream_rater.bench.chaos_verdict import Correction, ReadinessLog, Verdict, judge
from stream_rater.config.settings import Settings
from stream_rater.kafka import publish
from stream_rater.local.demo import ladders_env, start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.nemesis import (
    BrokerLinks,
    FaultyRedis,
    TcpProxy,
    held_ladders,
    readyz_status,
    signal_process,
)
from stream_rater.local.processes import run_tied
from stream_rater.local.runtime import Addresses, BrokerKind, LocalRuntime, LocalRuntimeError, free_port
from stream_rater.waiting import wait_until

PARTITIONS = 4
#: Seconds a correction command may take before it is killed (its outcome is then unknown).
CORRECTION_TIMEOUT = 180.0
#: Times a refused correction is tried (a fault may be why), and seconds between tries.
CORRECTION_TRIES = 12
CORRECTION_RETRY_DELAY = 5.0
#: Times a killed broker is started again before the run gives up on healing it.
BROKER_RESTARTS = 3
#: Seconds between two starts of a worker that keeps exiting (its broker down).
REVIVE_BACKOFF = 5.0
#: Seconds each worker of the group may take to be ready again after the last fault.
QUIET_READY_TIMEOUT = 300.0


@dataclass
class Options:
    """What ``bench chaos`` was asked for."""

    minutes: float
    seed: int
    broker: BrokerKind = "apache-kafka"
    brokers: int = 3
    workers: int = 2
    rate: float = 300.0
    as_json: bool = False
    failure_file: str | None = None


@dataclass
class _Slot:
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    started: float = 0.0


class Workers:
    """The worker processes by slot, each reaching Redis through its own `TcpProxy`, and the
    brokers through its own `BrokerLinks` when there are some (Apache Kafka)."""

    def __init__(
        self, settings: Settings, env: dict[str, str], redis_port: int, logs: Path, links: BrokerLinks | None
    ) -> None:
        self.settings, self.env, self.redis_port, self.logs = settings, env, redis_port, logs
        self.links = links
        self.slots: dict[int, _Slot] = {}
        self.proxies: dict[int, TcpProxy] = {}
        self.wanted: set[int] = set()
        self.lock = threading.RLock()

    def start(self, slot: int) -> subprocess.Popen[bytes]:
        """Start a worker in `slot` (not waiting until it is ready); it is wanted up from now."""
        with self.lock:
            proxy = self.proxies.setdefault(slot, TcpProxy(self.redis_port))
            port = free_port()
            settings = replace(self.settings, redis_url=proxy.url, web_port=port)
            if self.links is not None:
                settings = replace(settings, broker=self.links.broker_url(slot))
            with (self.logs / f"worker-{slot}.log").open("a") as log:
                process = start_worker(settings, self.env, log, tied=True)
            self.slots[slot] = _Slot(process, port, time.monotonic())
            self.wanted.add(slot)
            return process

    def signal(self, slot: int, sig: int) -> None:
        """Send `sig` to the worker of `slot`; after SIGKILL it is not wanted up until started."""
        process = self.slots[slot].process
        if sig == signal.SIGKILL:
            self.wanted.discard(slot)
        if process is not None:
            signal_process(process, sig)
            if sig == signal.SIGKILL:
                process.wait()

    def stop(self, slot: int) -> None:
        """Stop the worker of `slot` (SIGCONT first, in case it is frozen; then SIGTERM)."""
        self.wanted.discard(slot)
        process = self.slots[slot].process
        if process is not None:
            signal_process(process, signal.SIGCONT)
            stop_process(process)
        self.slots[slot] = _Slot()

    def revive(self) -> list[str]:
        """Start again every wanted worker that exited on its own (a worker exits when it cannot
        reach the broker at start, or cannot stop in time), as a process supervisor does."""
        revived = []
        for slot in sorted(self.wanted):
            process, started = self.slots[slot].process, self.slots[slot].started
            if time.monotonic() - started < REVIVE_BACKOFF:
                continue
            if process is not None and process.poll() is not None and slot in self.wanted:
                revived.append(f"worker #{slot} exited with code {process.returncode}; started again")
                self.start(slot)
        return revived

    def ready(self, slot: int) -> bool:
        """Whether the worker of `slot` answers ``/readyz`` with 200."""
        try:
            return readyz_status(self.slots[slot].port) == 200
        except OSError:
            return False

    def restart(self, slot: int) -> None:
        """Stop the worker of `slot` gracefully and start it again."""
        self.stop(slot)
        self.start(slot)

    def ports(self) -> list[int]:
        """Web ports of the workers running now."""
        with self.lock:
            return [s.port for s in self.slots.values() if s.process is not None and s.process.poll() is None]

    def close(self) -> None:
        self.wanted.clear()
        for slot in list(self.slots):
            self.stop(slot)
        for proxy in self.proxies.values():
            proxy.close()
        if self.links is not None:
            self.links.close()


@dataclass
class Nemesis:
    """Applies a schedule of faults to the runtime, Redis and workers, each in a thread of its own."""

    runtime: LocalRuntime
    redis: FaultyRedis
    workers: Workers
    settings: Settings
    env: dict[str, str]
    out: TextIO
    checkpoints: CheckpointLoop
    corrections: list[Correction] = field(default_factory=list)
    applied: list[tuple[Fault, str]] = field(default_factory=list)
    #: A fault waits until the one before it on its resource is healed (a restart can take
    #: longer than the schedule planned).
    locks: defaultdict[str, threading.Lock] = field(default_factory=lambda: defaultdict(threading.Lock))

    def run(self, schedule: list[Fault], started: float) -> None:
        """Inject each fault at its time; return once every one is healed."""
        threads = []
        for fault in schedule:
            time.sleep(max(0.0, started + fault.at - time.monotonic()))
            thread = threading.Thread(target=self._apply, args=(fault,), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()

    def _apply(self, fault: Fault) -> None:
        inject, heal = self._actions(fault)
        with self.locks[fault.resource()]:
            try:
                outcome = inject() or "injected"
                time.sleep(fault.duration)
                heal()
            except Exception as exc:  # a fault that could not be injected or healed is reported
                outcome = f"error: {type(exc).__name__}: {exc}"
        self.applied.append((fault, outcome))
        print(f"  {fault.line()}: {outcome}", file=self.out, flush=True)

    def _actions(self, fault: Fault) -> tuple[Callable[[], str | None], Callable[[], None]]:
        """How to inject and how to heal `fault`."""
        slot, w, r = fault.target, self.workers, self.redis

        def nothing() -> None:
            return None

        if fault.kind in CORRECTIONS:
            return (lambda: self._correct(fault)), nothing
        ck = self.checkpoints
        if fault.kind == "checkpoint-tear":
            return (lambda: ck.tear(fault.ladder, r.url)), nothing
        actions: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "worker-kill": (lambda: w.signal(slot, signal.SIGKILL), lambda: w.start(slot)),
            "worker-pause": (lambda: w.signal(slot, signal.SIGSTOP), lambda: w.signal(slot, signal.SIGCONT)),
            "worker-restart": (lambda: w.restart(slot), nothing),
            "worker-remove": (lambda: w.stop(slot), lambda: w.start(slot)),
            "worker-add": (lambda: w.start(slot), lambda: w.stop(slot)),
            "redis-partition": (lambda: w.proxies[slot].cut(), lambda: w.proxies[slot].heal()),
            "broker-partition": (lambda: _links(w).cut(slot), lambda: _links(w).heal(slot)),
            "broker-kill": (
                lambda: os.kill(self.runtime.broker_pids[slot], signal.SIGKILL),
                lambda: self._restart_broker(slot),
            ),
            "broker-freeze": (
                lambda: os.kill(self.runtime.broker_pids[slot], signal.SIGSTOP),
                lambda: os.kill(self.runtime.broker_pids[slot], signal.SIGCONT),
            ),
            "redis-freeze": (lambda: r.signal(signal.SIGSTOP), lambda: r.signal(signal.SIGCONT)),
            "redis-refuse": (r.refuse_writes, r.accept_writes),
            "redis-restart": (r.kill, r.start),
            "checkpoint-kill": (lambda: ck.signal(signal.SIGKILL), ck.start),
            "checkpoint-pause": (lambda: ck.signal(signal.SIGSTOP), lambda: ck.signal(signal.SIGCONT)),
            "checkpoint-cut": (ck.proxy.cut, ck.proxy.heal),
        }
        inject, heal = actions[fault.kind]
        return (lambda: inject() and None), heal

    def _restart_broker(self, index: int) -> None:
        """Start broker `index` again from its log dir; tried again if it exits at startup."""
        for attempt in range(BROKER_RESTARTS):
            try:
                self.runtime.restart_broker(index)
                return
            except LocalRuntimeError:
                if attempt == BROKER_RESTARTS - 1:
                    raise
                print(f"  broker #{index} exited at its restart; again", file=self.out, flush=True)

    def _correct(self, fault: Fault) -> str:
        """Run the correction command of `fault` (again after a refusal, up to `CORRECTION_TRIES`
        times) and log its outcome; one at a time (the corrections' resource lock)."""
        argv, correction = self._correction_command(fault)
        correction.started = time.time()
        for attempt in range(CORRECTION_TRIES):
            time.sleep(CORRECTION_RETRY_DELAY if attempt else 0.0)
            try:
                done = run_tied(argv, CORRECTION_TIMEOUT, env=self.env)
            except subprocess.TimeoutExpired:
                correction.outcome = "unknown"
                correction.detail = f"killed after {CORRECTION_TIMEOUT:g} s"
                break
            correction.outcome = "done" if done.returncode == 0 else "refused"
            correction.detail = (done.stderr.strip().splitlines() or [""])[-1]
            if done.returncode == 0:
                break
        correction.ended = time.time()
        self.corrections.append(correction)
        return f"{correction.outcome} {correction.detail}".strip()

    def _correction_command(self, fault: Fault) -> tuple[list[str], Correction]:
        s = self.settings
        common = [
            *("--ladder", fault.ladder, "--broker", s.broker, "--store", self.redis.url),
            *("--topic-matches", s.topic_matches),
        ]
        params: dict[str, float] = {}
        if fault.kind == "season":
            args = ["season", "--via-topic", "--id", f"season-{int(fault.at * 10)}"]
            args += ["--param", "season_shrink=0.5", "--param", "season_sigma=2"]
        else:
            args = [fault.kind, "--lease", "5", "--json"]
            args += ["--topic-updates", s.topic_updates, "--topic-corrections", s.topic_corrections]
            args += ["--topic-checkpoints", s.topic_checkpoints]
            if fault.kind == "rerate":
                params = {"beta": 3.0 + (int(fault.at) % 5) * 0.5}
                args += ["--param", f"beta={params['beta']}"]
            else:
                args += [match_id(fault.match), "--reason", "chaos"]
        argv = [sys.executable, "-m", "stream_rater", *args, *common]
        return argv, Correction(
            fault.kind, fault.ladder, match_id(fault.match) if fault.match >= 0 else "", params
        )


def run(options: Options, out: TextIO = sys.stdout) -> Verdict:
    """Run the nemesis as `options` say; print (or, as JSON, write) the schedule and the verdict."""
    tag = uuid.uuid4().hex[:8]
    settings = tagged(tagged_settings(tag, partitions=PARTITIONS, session_timeout=6.0), tag)
    topics = dict.fromkeys((settings.topic_matches, settings.topic_updates, settings.topic_dlq), PARTITIONS)
    topics[settings.topic_corrections] = 1
    brokers = options.brokers if options.broker == "apache-kafka" else 1
    seconds = options.minutes * 60
    schedule = draw_schedule(
        options.seed,
        seconds,
        options.workers,
        brokers,
        apache_kafka=options.broker == "apache-kafka",
        rate=options.rate,
    )
    log = sys.stderr if options.as_json else out
    links = (
        BrokerLinks(options.workers + EXTRA_WORKER_SLOTS, brokers)
        if options.broker == "apache-kafka"
        else None
    )
    addresses = Addresses(kafka_listeners=links.listeners() if links is not None else None)
    with LocalRuntime(
        topics=topics, broker=options.broker, brokers=brokers, redis=False, addresses=addresses
    ) as runtime:
        workdir = Path(runtime.log_dir or ".")
        redis = FaultyRedis(workdir)
        redis.start()
        wait = runtime.fetch_max_wait(settings.fetch_max_wait)
        settings = replace(settings, broker=runtime.broker_url, redis_url=redis.url, fetch_max_wait=wait)
        env = _child_env(workdir)
        workers = Workers(settings, env, redis.port, workdir, links)
        checkpoints = CheckpointLoop(settings, env, redis.port, workdir)
        nemesis = Nemesis(runtime, redis, workers, settings, env, log, checkpoints)
        try:
            verdict = _run_on(options, nemesis, schedule, log)
        finally:
            checkpoints.close()
            nemesis.workers.close()
            redis.stop()
    _report(options, schedule, verdict, out)
    return verdict


def _links(workers: Workers) -> BrokerLinks:
    """The workers' links to the brokers (a broker partition is drawn on Apache Kafka only)."""
    if workers.links is None:
        raise LocalRuntimeError("a worker-broker partition needs Apache Kafka (per-worker listeners)")
    return workers.links


def _child_env(workdir: Path) -> dict[str, str]:
    """The environment of the workers and correction commands: the chaos ladders (TrueSkill)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_RATER_")}
    return {**env, **ladders_env(LADDER_SHAPES), "STREAM_RATER_APP_DATADIR": str(workdir / "faust-data")}


def _run_on(options: Options, nemesis: Nemesis, schedule: list[Fault], log: TextIO) -> Verdict:
    """Start the workers, publish while the nemesis runs, heal, wait, judge."""
    workers, settings = nemesis.workers, nemesis.settings
    for slot in range(options.workers):
        process = workers.start(slot)
        wait_ready(process, f"http://127.0.0.1:{workers.slots[slot].port}/readyz")
    print(
        f"chaos: seed {options.seed}, {options.minutes:g} min, {options.broker} x{nemesis.runtime.brokers}, "
        f"{options.workers} workers, {options.rate:g} matches/s, {len(schedule)} faults",
        file=log,
        flush=True,
    )
    nemesis.checkpoints.start()
    readiness = ReadinessLog()
    stop = threading.Event()
    sampler = threading.Thread(target=_watch, args=(nemesis, readiness, stop, log), daemon=True)
    sampler.start()
    started = time.monotonic()
    published: list[int] = []
    publisher = threading.Thread(
        target=lambda: published.append(_publish(settings, options, started)), daemon=True
    )
    publisher.start()
    try:
        nemesis.run(schedule, started)
        publisher.join()
        print(f"published {published[0]} records; every fault healed", file=log, flush=True)
        for slot in range(options.workers):  # the quiet: every worker of the group back and ready
            wait_until(
                functools.partial(_back_and_ready, workers, slot),
                f"worker #{slot} ready again",
                QUIET_READY_TIMEOUT,
                interval=1.0,
            )
        wait_caught_up(settings, list(LADDER_SHAPES), QUIET_READY_TIMEOUT)
    finally:
        stop.set()
        sampler.join()
        nemesis.checkpoints.close()
    print(f"judging ({nemesis.checkpoints.written()} checkpoints written by the loop)", file=log, flush=True)
    names, ck = list(LADDER_SHAPES), nemesis.checkpoints
    done = judge(settings, nemesis.env, names, nemesis.corrections, readiness, nemesis.applied, ck.torn)
    return asyncio.run(done)


def _back_and_ready(workers: Workers, slot: int) -> bool:
    """Start the wanted workers that exited; whether the worker of `slot` is ready."""
    workers.revive()
    return workers.ready(slot)


def _publish(settings: Settings, options: Options, started: float) -> int:
    """Publish the run's records at `options.rate` for its minutes, a second's worth at a time;
    a second whose send failed (a broker down) is sent again (duplicates are harmless)."""
    total = int(options.minutes * 60 * options.rate)
    step = int(options.rate)
    sent = 0
    while sent < total:
        chunk = [match_record(i, options.rate, options.seed) for i in range(sent, min(total, sent + step))]
        time.sleep(max(0.0, started + sent / options.rate - time.monotonic()))
        try:
            asyncio.run(publish(chunk, settings, rate=None))
        except Exception as exc:  # the broker is down or frozen: send the second again
            print(f"publish failed ({type(exc).__name__}: {exc}); sending again", file=sys.stderr)
            time.sleep(1.0)
            continue
        sent += len(chunk)
    return sent


def _watch(nemesis: Nemesis, readiness: ReadinessLog, stop: threading.Event, log: TextIO) -> None:
    """Every half second: start again the wanted workers (and checkpoint loop) that exited, and
    sample each running worker's held ladders (``/metrics``) around its ``/readyz``."""
    workers = nemesis.workers
    while not stop.wait(0.5):
        for line in workers.revive() + nemesis.checkpoints.revive():
            print(f"  supervisor: {line}", file=log, flush=True)
        for port in workers.ports():
            try:
                held_before = held_ladders(port)
                status = readyz_status(port)
                held_after = held_ladders(port)
            except OSError:  # frozen, starting or stopping: no sample
                continue
            readiness.sample(port, held_before and held_after, status)


def _report(options: Options, schedule: list[Fault], verdict: Verdict, out: TextIO) -> None:
    """Print the schedule and the verdict (or one JSON object); on a violation, write the seed
    and the schedule to the failure file."""
    document = {
        "seed": options.seed,
        "minutes": options.minutes,
        "broker": options.broker,
        "brokers": options.brokers,
        "workers": options.workers,
        "rate": options.rate,
        "faults_by_kind": dict(sorted(Counter(f.kind for f in schedule).items())),
        **verdict.to_dict(),
        "schedule": [f.to_dict() for f in schedule],
    }
    if not verdict.passed:
        path = Path(options.failure_file or f"chaos-failure-seed-{options.seed}.json")
        path.write_text(json.dumps(document, indent=1))
        print(
            f"bench chaos: a violation; seed and schedule written to {path} (repeat with --seed "
            f"{options.seed} --minutes {options.minutes:g} --workers {options.workers} --rate {options.rate:g})",
            file=sys.stderr,
        )
    if options.as_json:
        print(json.dumps(document), file=out)
        return
    print("schedule:", file=out)
    for fault in schedule:
        print(f"  {fault.line()}", file=out)
    kinds = ", ".join(f"{k} {n}" for k, n in document["faults_by_kind"].items())
    print(f"faults by kind: {kinds}", file=out)
    for line in verdict.lines():
        print(line, file=out)
