"""A hold is as narrow as ordering allows (README, Operations, store loss): one worker owns two
partitions, each the home of one ladder; Redis loses one ladder's keys. The lost ladder's
partition is held — nothing applied on top, nothing acknowledged, /readyz names it — while
the other ladder's matches keep being applied, produced and acknowledged. After the documented
recovery (`replay --from-topic --ladder L --store URL --consumer-group G`) the held partition
catches up, and both ladders' states equal a replay of their matches."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

import pytest
import redis

from stream_rater.config.settings import Settings
from stream_rater.kafka import committed_offsets, create_topics, home_partition, publish
from stream_rater.local.demo import start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.runtime import free_port
from stream_rater.store.redis import ladder_key
from tests.e2e.e2e_support import (
    VolatileRedis,
    applied,
    equals_replay,
    missing_updates,
    readiness,
    worker_test_env,
)
from tests.helpers import cli, duel, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]


def two_homes(tag: str) -> tuple[str, str]:
    """Two ladder names whose matches land on different partitions of a two-partition topic."""
    lost = f"l-{tag}-lost"
    healthy = next(
        name for i in range(100) if home_partition(name := f"l-{tag}-ok{i}", 2) != home_partition(lost, 2)
    )
    return lost, healthy


def matches(ladder: str, first: int, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    players = [f"p{i}" for i in range(30)]
    return [
        duel(f"m{i}", *rng.sample(players, 2), ladder=ladder, at=1_700_000_000.0 + i)
        for i in range(first, first + n)
    ]


def delete_ladder(url: str, ladder: str) -> int:
    """UNLINK every key of `ladder` (``sr:{L}:*``), as a partial loss of the store would."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=ladder_key(ladder, "*"), count=1000))
        return int(client.unlink(*keys)) if keys else 0
    finally:
        client.close()


def rebuild(settings: Settings, ladder: str, env: dict[str, str], out: Path) -> None:
    """The documented recovery: ``replay --from-topic --ladder L --store URL --consumer-group G``."""
    cli(
        "replay",
        "--from-topic",
        "--ladder",
        ladder,
        "--store",
        settings.redis_url,
        "--consumer-group",
        settings.consumer_group,
        "--broker",
        settings.broker,
        "--topic-matches",
        settings.topic_matches,
        "--topic-updates",
        settings.topic_updates,
        "--out",
        str(out),
        env=env,
        check=True,
        timeout=60,
    )


def test_a_lost_ladder_holds_only_its_partition_and_catches_up_after_the_rebuild(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
):
    """300 matches of each ladder, then the lost ladder's keys are deleted and its next match
    held; the healthy ladder's 600 matches published after that are all applied and committed
    while the lost one has nothing applied and nothing committed past 300 (before: the healthy
    ladder stalled behind the held batch)."""
    tag = uuid.uuid4().hex[:10]
    lost, healthy = two_homes(tag)
    home = {lost: home_partition(lost, 2), healthy: home_partition(healthy, 2)}
    settings = tagged_settings(
        tag,
        broker=broker_url,
        redis_url=volatile_redis.url,
        partitions=2,
        batch_size=200,
        web_port=free_port(),
    )
    asyncio.run(create_topics(broker_url, settings.topics()))
    env = worker_test_env([lost, healthy], tmp_path / "faust-data")
    sent = {ladder: matches(ladder, 0, 900, seed=n) for n, ladder in enumerate((lost, healthy))}

    def publish_range(start: int, end: int, ladders: tuple[str, ...] = (lost, healthy)) -> None:
        asyncio.run(publish([m for ladder in ladders for m in sent[ladder][start:end]], settings))

    def committed(ladder: str) -> int:
        partition = home[ladder]
        return asyncio.run(committed_offsets(settings, settings.topic_matches, [partition]))[partition]

    def caught_up(ladder: str, n: int) -> bool:
        return applied(volatile_redis.url, ladder) == n and committed(ladder) == n

    worker = start_worker(settings, env, (tmp_path / "worker.log").open("w"))
    try:
        wait_ready(worker, f"http://127.0.0.1:{settings.web_port}/readyz")
        publish_range(0, 300)
        wait_for(lambda: caught_up(lost, 300) and caught_up(healthy, 300), "300 matches of each applied")

        assert delete_ladder(volatile_redis.url, lost) > 0
        publish_range(300, 400, (lost,))  # held first: the healthy ladder's matches come after
        wait_for(
            lambda: lost in readiness(settings.web_port)[1].get("reason", ""), "the lost ladder in /readyz"
        )
        publish_range(300, 900, (healthy,))
        publish_range(400, 900, (lost,))
        wait_for(lambda: caught_up(healthy, 900), "the healthy ladder applied and acknowledged meanwhile", 30)
        status, body = readiness(settings.web_port)
        assert status == 503 and healthy not in body["reason"], body
        assert (applied(volatile_redis.url, lost), committed(lost)) == (0, 300)

        rebuild(settings, lost, env, tmp_path / "rebuilt.jsonl")
        wait_for(lambda: caught_up(lost, 900), "the held ladder caught up after the rebuild", 30)
        wait_for(lambda: readiness(settings.web_port)[0] == 200, "the worker ready again", 30)
    finally:
        stop_process(worker)
    for ladder in sent:
        assert equals_replay(volatile_redis.url, ladder, sent[ladder]), ladder
        assert missing_updates(settings, ladder, sent[ladder]) == [], ladder
