"""Redis refusing writes on a healthy connection (maxmemory, a demoted replica) and a network
partition to Redis, each injected mid-stream into a real worker: /readyz says so while it
lasts and is 200 after, no valid match is dead-lettered, every match is applied exactly once
(the worker's applied and prediction-quality counters equal the store's) and the final states
equal a replay of the input."""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import redis

from stream_rater.config.settings import Settings, env_name
from stream_rater.kafka import publish, read_log
from stream_rater.local.demo import start_worker, stop_process, wait_ready
from stream_rater.local.runtime import free_port
from tests.e2e.e2e_support import (
    Blackhole,
    VolatileRedis,
    applied,
    counted,
    equals_replay,
    one_partition_stream,
    readiness,
    scraped,
    worker_test_env,
)
from tests.helpers import duel, stored_quality, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

#: Matches published before the fault, during it, and after it.
BEFORE, DURING, AFTER = 600, 600, 600
#: Seconds a fault lasts at least once /readyz reports it.
HOLD = 6


@dataclass
class FaultRun:
    """A worker rating one ladder of its own (its Redis URL may be a proxy's) and the input."""

    redis: VolatileRedis
    settings: Settings
    ladder: str
    port: int
    process: subprocess.Popen
    matches: list[dict]

    def applied_now(self) -> int:
        return applied(self.redis.url, self.ladder)

    def reason(self) -> str:
        status, body = readiness(self.port)
        return str(body.get("reason", "")) if status == 503 else ""

    def publish(self, lo: int, hi: int) -> None:
        asyncio.run(publish(self.matches[lo:hi], self.settings))


@pytest.fixture
def run_on(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
) -> Iterator[Callable[..., FaultRun]]:
    """Starts a worker on a fresh one-partition stream whose store is at the given URL (the
    test's redis-server or a proxy to it), with `extra` environment; stops it by PID afterwards."""
    started: list[subprocess.Popen] = []

    def run(worker_redis_url: str, extra: dict[str, str] | None = None) -> FaultRun:
        ladder, settings = one_partition_stream(broker_url, worker_redis_url)
        port = free_port()
        env = {**worker_test_env([ladder], tmp_path / "faust-data"), **(extra or {})}
        process = start_worker(replace(settings, web_port=port), env, (tmp_path / "worker.log").open("w"))
        started.append(process)
        wait_ready(process, f"http://127.0.0.1:{port}/readyz")
        rng = random.Random(5)
        players = [f"p{i}" for i in range(40)]
        total = BEFORE + DURING + AFTER
        matches = [
            duel(f"m{i}", *rng.sample(players, 2), ladder=ladder, at=1_700_000_000.0 + i)
            for i in range(total)
        ]
        return FaultRun(volatile_redis, settings, ladder, port, process, matches)

    yield run
    for process in started:
        stop_process(process)


def through_a_fault(
    run: FaultRun, start: Callable[[], None], end: Callable[[], None], says: str, hold: int = HOLD
) -> None:
    """Publish, start the fault, publish more; once /readyz names it (`says`) for `hold`
    seconds end it, publish the rest; then the oracle: /readyz 200, nothing dead-lettered,
    the applied and quality counters exact, the states equal to a replay."""
    run.publish(0, BEFORE)
    wait_for(lambda: run.applied_now() == BEFORE, f"{BEFORE} matches applied")
    start()
    try:
        run.publish(BEFORE, BEFORE + DURING)
        wait_for(lambda: says in run.reason(), f"/readyz naming {says!r}", timeout=30)
        wait_for(lambda: _lasted(run.reason()) >= hold, f"the fault reported for {hold} s", timeout=30)
        assert run.applied_now() < BEFORE + DURING, "the fault held nothing back"
    finally:
        end()
    run.publish(BEFORE + DURING, len(run.matches))
    wait_for(lambda: run.applied_now() == len(run.matches), "every match applied", timeout=60)
    wait_for(lambda: readiness(run.port)[0] == 200, "/readyz 200 after the fault")
    dead = asyncio.run(read_log(run.settings, run.settings.topic_dlq, timeout=30))[0]
    assert [r.value for r in dead] == [], "valid matches were dead-lettered"
    assert counted(run.port, run.ladder) == len(run.matches)
    quality = stored_quality(run.redis.url, run.ladder)
    live = f'{{ladder="{run.ladder}",scorer="live"}}'
    assert (
        scraped(run.port, f"stream_rater_predicted_matches_total{live}")
        == quality["matches"]
        == len(run.matches)
    )
    assert scraped(run.port, f"stream_rater_predicted_log_loss_total{live}") == pytest.approx(
        quality["log_loss"]
    )
    assert equals_replay(run.redis.url, run.ladder, run.matches)


def _lasted(reason: str) -> int:
    """For how many seconds a /readyz reason says its fault has lasted (0 if it says not)."""
    found = re.search(r"for (\d+) s\)", reason)
    return int(found.group(1)) if found else 0


def _refusals(run: FaultRun, reason: str) -> float:
    return scraped(run.port, f'stream_rater_store_refusals_total{{reason="{reason}"}}')


def test_redis_at_maxmemory_holds_the_stream_and_dead_letters_nothing(run_on, volatile_redis: VolatileRedis):
    """Redis reaches maxmemory (noeviction) mid-stream and refuses writes with OOM for a while:
    the worker holds its batch, counts the refusals, says so in /readyz, and goes on by itself
    once memory is raised again."""
    run = run_on(volatile_redis.url)
    client = redis.Redis(port=volatile_redis.port)

    def fill_up() -> None:
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", used + 64 * 1024)

    def free() -> None:
        client.config_set("maxmemory", 0)

    try:
        through_a_fault(run, fill_up, free, says="the store refuses writes: OOM command not allowed")
        assert _refusals(run, "oom") > 0
        assert scraped(run.port, "stream_rater_store_refusing") == 0
    finally:
        client.close()


def test_a_redis_demoted_to_replica_holds_the_stream_and_dead_letters_nothing(
    run_on, volatile_redis: VolatileRedis
):
    """Redis becomes a replica (of a master nobody runs, so it keeps its data) as after a
    failover, refusing writes with READONLY; promoted again, the worker goes on by itself."""
    run = run_on(volatile_redis.url)
    client = redis.Redis(port=volatile_redis.port)
    nowhere = free_port()
    try:
        through_a_fault(
            run,
            lambda: client.execute_command("REPLICAOF", "127.0.0.1", str(nowhere)),
            lambda: client.execute_command("REPLICAOF", "NO", "ONE"),
            says="the store refuses writes: READONLY You can't write against a read only replica",
        )
        assert _refusals(run, "readonly") > 0
    finally:
        client.close()


def test_a_network_partition_to_redis_ends_in_timeouts_and_nothing_applies_twice(
    run_on, volatile_redis: VolatileRedis
):
    """The worker's connections to Redis go silent (no reset, nothing arrives; a commit in
    flight may land late): /readyz says the store does not answer within seconds, the worker's
    socket timeout (3 s here) ends its waits — its batch is retried — and after the heal every
    match is applied exactly once."""
    proxy = Blackhole(volatile_redis.port)
    try:
        run = run_on(proxy.url, {env_name("redis_socket_timeout"): "3"})
        through_a_fault(run, proxy.cut, proxy.heal, says="the store does not answer PING", hold=8)
        assert scraped(run.port, 'stream_rater_batch_retries_total{error="store"}') > 0, "no wait timed out"
    finally:
        proxy.close()
