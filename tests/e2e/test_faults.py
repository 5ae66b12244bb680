"""Faults injected into real processes, each ending with the same oracle: every valid match
applied exactly once and the final states equal to a replay of the input."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from stream_rater.kafka import publish, read_log
from stream_rater.local.demo import start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.runtime import LocalRuntime, free_port
from tests.e2e.e2e_support import (
    VolatileRedis,
    applied,
    counted,
    equals_replay,
    one_partition_stream,
    readiness,
    worker_test_env,
)
from tests.helpers import duel, wait_for

#: On the broker users run (Apache Kafka) only: the stream suite runs on both brokers, this one
#: would add minutes to CI for a second pass over Tansu, which only `demo` and `dev` use.
pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]


def test_frozen_redis_and_broker_one_to_two_workers_and_a_poison_flood_lose_nothing(tmp_path: Path):
    """While matches and interleaved poison records stream in: Redis frozen (SIGSTOP) and the
    broker frozen, each for a few seconds — /readyz says which, and goes back to 200 after —
    a second worker joins and leaves again (1 → 2 → 1). Every valid match is applied exactly
    once, every state equals a replay, every poison record is in the dead-letter topic (again if
    redelivered: the topic is at least once), and no valid match is."""
    name = uuid.uuid4().hex[:10]
    ladder = f"g-{name}"
    topics = {f"{t}-{name}": 2 for t in ("matches", "updates", "dlq")}
    with LocalRuntime(topics=topics, workdir=tmp_path / "runtime") as runtime:
        settings = tagged_settings(
            name, broker=runtime.broker_url, redis_url=runtime.redis_url, partitions=2, batch_size=100
        )
        env = worker_test_env([ladder], tmp_path / "faust-data")
        rng = random.Random(11)
        players = [f"p{i}" for i in range(60)]
        matches = [
            duel(f"m{i}", *rng.sample(players, 2), ladder=ladder, at=1_700_000_000.0 + i) for i in range(4000)
        ]
        poison = [
            {"match_id": f"bad-{i}", "ladder": ladder, "finished_at": "not a time", "teams": []}
            for i in range(200)
        ]
        stream = [
            event for i, m in enumerate(matches) for event in ([m, poison[i // 20]] if i % 20 == 0 else [m])
        ]
        workers: list[tuple[subprocess.Popen, int]] = []

        def start() -> int:
            port = free_port()
            process = start_worker(
                replace(settings, web_port=port), env, (tmp_path / f"worker-{port}.log").open("w")
            )
            workers.append((process, port))
            wait_ready(process, f"http://127.0.0.1:{port}/readyz")
            return port

        def applied_now() -> int:
            return applied(runtime.redis_url, ladder)

        def frozen(service: str, port: int, says: str) -> None:
            os.kill(runtime.pids[service], signal.SIGSTOP)
            try:
                wait_for(
                    lambda: says in readiness(port)[1].get("reason", ""),
                    f"/readyz naming the frozen {service}",
                )
            finally:
                os.kill(runtime.pids[service], signal.SIGCONT)
            wait_for(lambda: readiness(port)[0] == 200, f"/readyz 200 after {service} thawed")

        first = start()
        publisher = threading.Thread(target=lambda: asyncio.run(publish(stream, settings, rate=800.0)))
        publisher.start()
        try:
            wait_for(lambda: applied_now() > 500, "the stream under way")
            frozen("redis", first, "the store does not answer PING")
            frozen("tansu", first, "the broker does not answer a metadata request")
            start()
            wait_for(lambda: applied_now() > 2500, "the stream going on with two workers")
            second, _ = workers[1]
            assert stop_process(second) == 0
            publisher.join()
            wait_for(lambda: applied_now() == len(matches), "every valid match applied", timeout=180)
        finally:
            publisher.join()
            for process, _ in workers:
                stop_process(process)

        assert equals_replay(runtime.redis_url, ladder, matches)
        dead = asyncio.run(read_log(settings, settings.topic_dlq))[0]
    # At least once (a record redelivered after the rebalance is dead-lettered again): each
    # poison record once per origin offset, and nothing else.
    origins = {
        (dict(r.headers)["sr-origin-partition"], dict(r.headers)["sr-origin-offset"]): r.value for r in dead
    }
    assert sorted(json.loads(v)["match_id"] for v in origins.values()) == sorted(
        p["match_id"] for p in poison
    )


def test_redis_restarted_with_its_append_only_file_loses_nothing(
    broker_url: str, aof_redis: VolatileRedis, tmp_path: Path
):
    """Redis stopped (SIGTERM) and restarted from its append-only file mid-stream: the worker
    waits, goes on, reports no loss, counts exactly 3,000 applied matches (a commit whose reply
    the restart cut off included), and every state equals a replay."""
    ladder, settings = one_partition_stream(broker_url, aof_redis.url)
    rng = random.Random(9)
    players = [f"p{i}" for i in range(40)]
    matches = [
        duel(f"m{i}", *rng.sample(players, 2), ladder=ladder, at=1_700_000_000.0 + i) for i in range(3000)
    ]
    port = free_port()
    worker = start_worker(
        replace(settings, web_port=port),
        worker_test_env([ladder], tmp_path / "fd"),
        (tmp_path / "worker.log").open("w"),
    )
    try:
        wait_ready(worker, f"http://127.0.0.1:{port}/readyz")
        asyncio.run(publish(matches[:1500], settings))
        wait_for(lambda: applied(aof_redis.url, ladder) == 1500, "1500 matches applied")
        aof_redis.kill(signal.SIGTERM)
        asyncio.run(publish(matches[1500:], settings))
        aof_redis.start()
        wait_for(lambda: applied(aof_redis.url, ladder) == 3000, "all 3000 matches applied")
        # A batch is counted after its events are produced, a moment after its commit.
        wait_for(lambda: counted(port, ladder) >= 3000, "3000 matches counted")
        status, body = readiness(port)
        assert status == 200, body
        assert counted(port, ladder) == 3000 and counted(port, ladder, "stream_rater_store_losses_total") == 0
    finally:
        stop_process(worker)
    assert equals_replay(aof_redis.url, ladder, matches)
