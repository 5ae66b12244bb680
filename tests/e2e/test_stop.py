"""A worker told to stop (SIGTERM) always ends within its ``stop_timeout``, whatever state it is
in: healthy and idle, mid-stream, with the broker or Redis gone, with its store lost, or while
it carries out a re-rate. What a forced exit left uncommitted is redelivered to the next
worker, and the store then equals a replay of the input."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings, env_name
from stream_rater.kafka import committed_offsets, create_topics
from stream_rater.local.demo import (
    default_data_file,
    football_events,
    start_worker,
    tagged_settings,
    wait_ready,
)
from stream_rater.local.runtime import LocalRuntime, free_port
from stream_rater.service.app import EXIT_STOP_TIMEOUT
from stream_rater.store.redis import ladder_key
from tests.e2e.e2e_support import worker_test_env
from tests.e2e.streams import Stream, exact, replay_events
from tests.helpers import cli, duel, wait_for

pytestmark = pytest.mark.e2e

#: The workers' stop timeout here: short, to keep the tests fast.
STOP_TIMEOUT = 5.0
#: What a process may take beyond it: the interpreter's own exit, a loaded machine.
SLACK = 3.0


class Worker:
    """A ``stream-rater worker`` subprocess of a `Stream` with ``stop_timeout`` `STOP_TIMEOUT`."""

    def __init__(self, stream: Stream) -> None:
        self.port = free_port()
        self.log_path = stream.tmp / f"worker-{self.port}.log"
        env = {
            **worker_test_env(stream.names, stream.tmp / "faust-data", stream.model),
            env_name("stop_timeout"): str(STOP_TIMEOUT),
        }
        self.process = start_worker(
            replace(stream.settings, web_port=self.port), env, self.log_path.open("w")
        )
        stream.workers.append(self.process)
        try:
            wait_ready(self.process, f"http://127.0.0.1:{self.port}/readyz", 90)
        except (RuntimeError, TimeoutError) as exc:
            pytest.fail(f"{exc}; worker log:\n{self.log_tail()}")

    def readiness(self) -> str:
        """The reason /readyz gives ('' when ready or not answering)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5):
                return ""
        except urllib.error.HTTPError as error:
            return str(json.loads(error.read()).get("reason", ""))
        except OSError:
            return ""

    def metric(self, line_start: str) -> float | None:
        """The value of the /metrics sample whose line starts with `line_start`."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(line_start):
                    return float(line.rsplit(" ", 1)[1])
        return None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def terminate(self) -> int:
        """SIGTERM; the exit code, which must come within `STOP_TIMEOUT` + `SLACK` seconds."""
        start = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_TIMEOUT + SLACK)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"not stopped {STOP_TIMEOUT + SLACK} s after SIGTERM; log:\n{self.log_tail()}")
        took = time.monotonic() - start
        assert code in (0, EXIT_STOP_TIMEOUT), f"exit code {code} after {took:.1f} s:\n{self.log_tail()}"
        if code == EXIT_STOP_TIMEOUT:
            assert "still waiting for" in self.log_path.read_text(), self.log_tail()
        return code


@pytest.fixture
def streams(tmp_path: Path) -> Iterator[list[Stream]]:
    """The tests' streams; their workers are killed by PID afterwards (a stop is under test)."""
    made: list[Stream] = []
    yield made
    for stream in made:
        for process in stream.workers:
            if process.poll() is None:
                process.kill()
                process.wait()


def new_stream(made: list[Stream], broker_url: str, redis_url: str, tmp_path: Path) -> Stream:
    """A one-partition stream of one TrueSkill ladder with topics and a group of its own."""
    name = uuid.uuid4().hex[:10]
    settings = tagged_settings(name, broker=broker_url, redis_url=redis_url, partitions=1, batch_size=200)
    asyncio.run(create_topics(broker_url, settings.topics()))
    stream = Stream(settings, (f"stop-{name}",), tmp_path)
    made.append(stream)
    return stream


def matches(stream: Stream, n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    players = [f"p{i}" for i in range(40)]
    return [
        duel(f"m{i}", *rng.sample(players, 2), ladder=stream.ladder, at=1_700_000_000.0 + i) for i in range(n)
    ]


def offsets_committed(settings: Settings, count: int) -> bool:
    return asyncio.run(committed_offsets(settings, settings.topic_matches, [0])) == {0: count}


def test_a_healthy_idle_worker_stops_cleanly(streams, broker_url: str, redis_url: str, tmp_path: Path):
    """It exits 0 leaving no produced events stored: no next commit names its last batch's
    matches, so it drops their events itself as it stops (`forget_produced`)."""
    stream = new_stream(streams, broker_url, redis_url, tmp_path)
    worker = Worker(stream)
    stream.publish(matches(stream, 300))
    wait_for(lambda: offsets_committed(stream.settings, 300), "every match acknowledged")
    assert worker.terminate() == 0
    client = redis.Redis.from_url(redis_url)
    held = [
        field
        for suffix in ("unproduced", "unproduced:older")
        for field in client.hkeys(ladder_key(stream.ladder, suffix, stream.settings.redis_prefix))
        if field != b""  # what keeps a hash a hash table: no match
    ]
    client.close()
    assert held == []


def test_a_worker_stopped_mid_stream_loses_and_doubles_nothing(
    streams, broker_url: str, redis_url: str, tmp_path: Path
):
    """SIGTERM while matches stream in; a new worker goes on, and the store equals a replay."""
    stream = new_stream(streams, broker_url, redis_url, tmp_path)
    events = matches(stream, 4000)
    worker = Worker(stream)
    publisher = threading.Thread(target=stream.publish, args=(events, 1500.0))
    publisher.start()
    try:
        wait_for(lambda: stream.applied() > 800, "the stream under way")
        worker.terminate()
    finally:
        publisher.join()
    Worker(stream)
    wait_for(lambda: stream.applied() == len(events), "every match applied", 120)
    _, replayed = replay_events(stream, events)
    assert exact(stream.all_states()) == exact(replayed)


def test_a_worker_whose_broker_is_gone_stops(streams, redis_url: str, tmp_path: Path):
    """The broker (a runtime of this test's own) killed by PID: the stop cannot commit
    offsets or flush the producer, and ends anyway."""
    with LocalRuntime(redis=False, workdir=tmp_path / "runtime") as runtime:
        stream = new_stream(streams, runtime.broker_url, redis_url, tmp_path)
        worker = Worker(stream)
        stream.publish(matches(stream, 500))
        wait_for(lambda: stream.applied() == 500, "the matches applied")
        os.kill(runtime.pids["tansu"], signal.SIGKILL)
        wait_for(lambda: "the broker does not answer" in worker.readiness(), "the broker's loss noticed")
        worker.terminate()


def test_a_worker_whose_redis_is_gone_stops(streams, broker_url: str, tmp_path: Path):
    """Redis (a runtime of this test's own) killed by PID while a batch waits for it."""
    with LocalRuntime(broker=False, workdir=tmp_path / "runtime") as runtime:
        stream = new_stream(streams, broker_url, runtime.redis_url, tmp_path)
        events = matches(stream, 1000)
        worker = Worker(stream)
        stream.publish(events[:500])
        wait_for(lambda: stream.applied() == 500, "the first matches applied")
        os.kill(runtime.pids["redis"], signal.SIGKILL)
        stream.publish(events[500:])
        wait_for(lambda: "the store does not answer" in worker.readiness(), "Redis's loss noticed")
        worker.terminate()


def test_a_worker_whose_store_was_lost_stops(streams, broker_url: str, tmp_path: Path):
    """FLUSHALL on the worker's own Redis after it committed: it holds the batches back
    (it applies nothing onto the emptied store) and still stops."""
    with LocalRuntime(broker=False, workdir=tmp_path / "runtime") as runtime:
        stream = new_stream(streams, broker_url, runtime.redis_url, tmp_path)
        events = matches(stream, 1000)
        worker = Worker(stream)
        stream.publish(events[:500])
        wait_for(lambda: offsets_committed(stream.settings, 500), "the first matches committed")
        redis.Redis.from_url(runtime.redis_url).flushall()
        stream.publish(events[500:])
        wait_for(lambda: "not applying" in worker.readiness(), "the store's loss noticed")
        worker.terminate()


def test_a_worker_carrying_out_a_rerate_stops_and_the_next_one_finishes_it(
    streams, broker_url: str, redis_url: str, tmp_path: Path
):
    """SIGTERM while the worker re-rates the ladder for a request sent with ``--via-topic``:
    it stops in time, the request is redelivered, and the next worker's re-rate equals a
    replay with the new parameter."""
    stream = new_stream(streams, broker_url, redis_url, tmp_path)
    events = []
    for event in football_events(default_data_file(), stream.ladder):
        events.append(event)
        if len(events) == 20_000:
            break
    worker = Worker(stream)
    stream.publish(events)
    wait_for(lambda: offsets_committed(stream.settings, len(events)), "every match committed", 120)
    cli(
        "rerate",
        "--param",
        "beta=2.5",
        "--reason",
        "stop test",
        "--ladder",
        stream.ladder,
        "--via-topic",
        "--broker",
        broker_url,
        "--topic-corrections",
        stream.settings.topic_corrections,
        env=worker_test_env(stream.names, tmp_path / "cli"),
        check=True,
    )
    running = f'stream_rater_rerate_running{{ladder="{stream.ladder}"}} '
    wait_for(lambda: worker.metric(running) == 1.0, "the re-rate under way", 60)
    worker.terminate()

    Worker(stream)
    _, replayed = replay_events(stream, events, Ladders([Ladder(stream.ladder, "trueskill", {"beta": 2.5})]))
    expected = replayed[stream.ladder]

    def rerated() -> bool:  # to 1e-9, as the corrections tests compare a re-rate with a replay
        states = stream.states()
        return states.keys() == expected.keys() and all(
            abs(s.mu - expected[p].mu) <= 1e-9
            and abs(s.sigma - expected[p].sigma) <= 1e-9
            and s.games == expected[p].games
            for p, s in states.items()
        )

    wait_for(rerated, "the re-rate carried out", 120)
