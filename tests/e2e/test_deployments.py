"""Several deployments on one Redis (issue #33): each with its own key prefix, the same
ladder names and its own matches topic, rates independently; a ladder recorded with another
matches topic, and a store of a newer stored format, are refused by a worker and a tool in one
line, and nothing is written."""

from __future__ import annotations

import asyncio
import random
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from stream_rater.config.settings import Settings
from stream_rater.kafka import publish
from stream_rater.local.demo import start_worker, stop_process, wait_ready
from stream_rater.local.runtime import free_port
from stream_rater.store import Commit, PlayerState, StateWrite, open_store
from stream_rater.store.deployment import STORE_FORMAT
from tests.e2e.e2e_support import VolatileRedis, equals_replay, one_partition_stream, worker_test_env
from tests.helpers import cli, duel, stored_players, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

#: Matches each deployment rates.
MATCHES = 300
#: The ladder name both deployments use.
LADDER = "ranked"


def matches_of(seed: int) -> list[dict]:
    """`MATCHES` 1v1 matches of `LADDER` among 40 players, drawn with `seed`."""
    rng = random.Random(seed)
    return [
        duel(f"m-{seed}-{i}", *(f"p{n}" for n in rng.sample(range(40), 2)), ladder=LADDER)
        for i in range(MATCHES)
    ]


@pytest.fixture
def deployment(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
) -> Iterator[Callable[[str], Settings]]:
    """Makes the settings of a deployment on the test's redis-server: its own one-partition
    topics and consumer group, and the key prefix given."""

    def make(prefix: str) -> Settings:
        _, settings = one_partition_stream(broker_url, volatile_redis.url)
        return replace(settings, redis_prefix=prefix, web_port=free_port())

    yield make


def launch(settings: Settings, log: Path) -> subprocess.Popen:
    """A worker of `settings` rating `LADDER`, its output in `log`."""
    with log.open("w") as out:
        return start_worker(
            settings, worker_test_env([LADDER], log.parent / f"faust-{settings.redis_prefix}"), out
        )


def refused_line(process: subprocess.Popen, log: Path) -> str:
    """The one line a worker that refused its store printed, once it exited 1."""
    wait_for(lambda: process.poll() is not None, "the worker to exit", 60)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert process.returncode == 1, lines
    assert len(lines) == 1, lines
    return lines[0]


def test_two_deployments_share_one_redis(deployment, volatile_redis: VolatileRedis, tmp_path: Path):
    """Two workers, two prefixes, the same ladder name, two topics: each deployment's states
    equal a replay of its own matches, and nothing is written under the default prefix."""
    runs = [(deployment("staging"), matches_of(1)), (deployment("prod"), matches_of(2))]
    workers = [launch(settings, tmp_path / f"worker-{settings.redis_prefix}.log") for settings, _ in runs]
    try:
        for (settings, _), worker in zip(runs, workers):
            wait_ready(worker, f"http://127.0.0.1:{settings.web_port}/readyz", 90)
        for settings, matches in runs:
            asyncio.run(publish(matches, settings))
        for settings, matches in runs:
            wait_for(
                lambda s=settings, m=matches: equals_replay(s.redis_url, LADDER, m, s.redis_prefix),
                f"{settings.redis_prefix}'s ladder to equal a replay of its matches",
                60,
            )
    finally:
        codes = [stop_process(worker) for worker in workers]
    assert codes == [0, 0]
    client = redis.Redis(port=volatile_redis.port)
    assert client.keys("sr:*") == []
    for settings, _ in runs:
        assert client.hget(f"{settings.redis_prefix}:deployment", "format") == str(STORE_FORMAT).encode()
    client.close()


def seed_ladder(url: str, prefix: str, topic: str) -> None:
    """A store under `prefix` holding `LADDER` (one player) bound to the matches `topic`."""

    async def seed() -> None:
        from stream_rater.store.deployment import bind

        store = open_store(url, prefix=prefix)
        state = PlayerState(30.0, 5.0, 1, 100.0, 1)
        await store.commit(Commit(LADDER, [StateWrite("p0", state, 0)], {"m0": []}, positions={0: 1}))
        await bind(store, topic, [LADDER])
        await store.close()

    asyncio.run(seed())


def test_a_ladder_of_another_topic_is_refused(deployment, volatile_redis: VolatileRedis, tmp_path: Path):
    """A store whose ladder was applied from topic A refuses a worker and a tool on topic B, in
    one line naming both topics, and keeps its data and record."""
    settings = deployment("shared")
    seed_ladder(volatile_redis.url, "shared", "matches-a")
    log = tmp_path / "worker.log"
    line = refused_line(launch(settings, log), log)
    assert f"'matches-a', not '{settings.topic_matches}'" in line and f"ladder '{LADDER}'" in line, line
    tool = cli(
        *("verify", "--ladder", LADDER, "--store", volatile_redis.url, "--redis-prefix", "shared"),
        *("--broker", settings.broker, "--topic-matches", settings.topic_matches),
        env={f"STREAM_RATER_LADDER_{LADDER.upper()}": "trueskill"},
    )
    assert tool.returncode == 1 and tool.stderr.count("\n") == 1, tool.stderr
    assert f"'matches-a', not '{settings.topic_matches}'" in tool.stderr
    assert set(stored_players(volatile_redis.url, LADDER, "shared")) == {"p0"}
    client = redis.Redis(port=volatile_redis.port)
    assert client.hget(f"shared:{{{LADDER}}}:control", "topic") == b"matches-a"
    client.close()


def test_a_store_of_a_newer_format_is_refused(deployment, volatile_redis: VolatileRedis, tmp_path: Path):
    """A store written in a newer stored format refuses a worker (exit 1 at start, one line) and
    tools (exit 1, one line), each naming both formats; nothing is written."""
    newer = STORE_FORMAT + 1
    client = redis.Redis(port=volatile_redis.port)
    client.hset("next:deployment", "format", newer)
    settings = deployment("next")
    log = tmp_path / "worker.log"
    expected = f"format {newer}, newer than format {STORE_FORMAT}"
    assert expected in refused_line(launch(settings, log), log)
    for tool in (["ratings"], ["migrate", "--to", "2"]):
        done = cli(*tool, "--store", volatile_redis.url, "--redis-prefix", "next")
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert client.keys("*") == [b"next:deployment"]
    client.close()
