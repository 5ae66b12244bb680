"""Redis losing acknowledged data (deploy/README.md, "Failure model"): a running or a restarted worker
notices, holds the ladder, says so in /readyz and counts it; after the documented recovery
(`replay --from-topic --store`) the states equal a replay and every match's rating-changed
events are on the updates topic, as a replay computes them (subscribers dedupe by event_id)."""

from __future__ import annotations

import asyncio
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from stream_rater.config.settings import Settings
from stream_rater.kafka import committed_offsets, publish
from stream_rater.local.demo import start_worker, stop_process, wait_ready
from stream_rater.local.runtime import free_port
from stream_rater.service.app import store_looks_lost
from tests.e2e.e2e_support import (
    VolatileRedis,
    applied,
    counted,
    delete_head,
    equals_replay,
    missing_updates,
    one_partition_stream,
    readiness,
    scraped,
    worker_test_env,
)
from tests.helpers import cli, duel, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]


def _matches(ladder: str, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    players = [f"p{i}" for i in range(40)]
    return [duel(f"m{i}", *rng.sample(players, 2), ladder=ladder, at=1_700_000_000.0 + i) for i in range(n)]


class Stream:
    """One test's ladder, its one-partition topics and group, and its workers (by PID)."""

    def __init__(self, broker_url: str, redis: VolatileRedis, tmp_path: Path) -> None:
        self.ladder, self.settings = one_partition_stream(broker_url, redis.url)
        self.redis, self.tmp_path, self.broker_url = redis, tmp_path, broker_url
        self.env = worker_test_env([self.ladder], tmp_path / "faust-data")
        self.worker: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> None:
        """Start a worker (without waiting until it is ready)."""
        self.port = free_port()
        self.log = self.tmp_path / f"worker-{self.port}.log"
        log = self.log.open("w")
        self.worker = start_worker(replace(self.settings, web_port=self.port), self.env, log)

    def kill(self) -> None:
        """kill -9 the worker."""
        assert self.worker is not None
        self.worker.kill()
        self.worker.wait()

    def stop(self) -> None:
        if self.worker is not None:
            stop_process(self.worker)

    def applied(self) -> int:
        return applied(self.redis.url, self.ladder)

    def rebuilt_by_itself(self, n: int) -> None:
        """Wait until `n` matches are applied and committed and the worker is ready again, with
        one loss counted and one automatic rebuild, which succeeded."""
        self.caught_up(n)
        wait_for(lambda: readiness(self.port)[0] == 200, "the worker ready again")
        assert (self.rebuilds("rebuilt"), self.rebuilds("failed")) == (1, 0)
        assert counted(self.port, self.ladder, "stream_rater_store_losses_total") == 1

    def delivered_as_a_replay(self, matches: list[dict]) -> None:
        """Every state equals a replay of `matches`, and every match's events are on the
        updates topic as a replay computes them."""
        assert equals_replay(self.redis.url, self.ladder, matches)
        assert missing_updates(self.settings, self.ladder, matches) == []

    def empty_after(self, matches: list[dict]) -> None:
        """Once the worker is ready, rate `matches`, then restart Redis empty (no persistence)."""
        assert self.worker is not None
        wait_ready(self.worker, f"http://127.0.0.1:{self.port}/readyz")
        self.publish(matches)
        self.caught_up(len(matches))
        assert self.recorded_format() == b"3", "a new store is recorded in this release's format"
        self.redis.kill()
        self.redis.start()

    def recorded_format(self) -> bytes | None:
        """The store's deployment record's ``format`` (`store.deployment`)."""
        client = redis.Redis.from_url(self.redis.url)
        try:
            return client.hget(f"{self.settings.redis_prefix}:deployment", "format")
        finally:
            client.close()

    def lose_the_tail(self, matches: list[dict]) -> None:
        """Once the worker is ready, rate ``matches[:600]``, snapshot Redis, rate
        ``matches[600:1200]``; then kill the worker and bring Redis back from the snapshot: a
        partial loss, 600 matches behind the group's committed offset."""
        assert self.worker is not None
        wait_ready(self.worker, f"http://127.0.0.1:{self.port}/readyz")
        snapshot = self.tmp_path / "older.rdb"
        self.publish(matches[:600])
        self.caught_up(600)
        self.redis.save(snapshot)
        self.publish(matches[600:1200])
        self.caught_up(1200)
        self.kill()
        self.redis.kill()
        self.redis.start(dump=snapshot)

    def rebuilds(self, outcome: str) -> float:
        """The worker's automatic rebuilds of the ladder that ended with `outcome`."""
        sample = f'stream_rater_store_rebuilds_total{{ladder="{self.ladder}",outcome="{outcome}"}}'
        return scraped(self.port, sample)

    def committed(self) -> int:
        return asyncio.run(committed_offsets(self.settings, self.settings.topic_matches, [0]))[0]

    def publish(self, matches: list[dict]) -> None:
        asyncio.run(publish(matches, self.settings))

    def caught_up(self, n: int) -> None:
        """Wait until `n` matches are applied and the group has committed all of them."""
        wait_for(lambda: self.applied() == n and self.committed() == n, f"{n} matches applied and committed")

    def rebuild(self) -> None:
        """The documented recovery: ``replay --from-topic --ladder L --store URL``."""
        s: Settings = self.settings
        cli(
            "replay",
            "--from-topic",
            "--ladder",
            self.ladder,
            "--store",
            self.redis.url,
            "--broker",
            self.broker_url,
            "--topic-matches",
            s.topic_matches,
            "--topic-updates",
            s.topic_updates,
            "--consumer-group",
            s.consumer_group,
            "--batch-size",
            "500",
            "--out",
            str(self.tmp_path / "rebuilt.jsonl"),
            env=self.env,
            check=True,
            timeout=120,
        )


def test_redis_restarted_empty_is_held_and_the_recovery_delivers_every_matchs_events(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
):
    """Redis restarted empty (no persistence) while 800 matches (four batches) arrive: the
    running worker applies nothing on top, says why in /readyz and counts it; a worker restarted
    on the empty store refuses too. After `replay --from-topic --store`, every state equals a
    replay and every match's events are on the updates topic, as a replay computes them: none
    of the matches that arrived meanwhile is missing (on the code before: 500 were)."""
    stream = Stream(broker_url, volatile_redis, tmp_path)
    matches = _matches(stream.ladder, 1800, seed=7)
    stream.start()
    try:
        stream.empty_after(matches[:1000])
        stream.publish(matches[1000:])
        wait_for(lambda: "not applying" in readiness(stream.port)[1].get("reason", ""), "loss in /readyz")
        status, body = readiness(stream.port)
        assert status == 503
        assert f"ladder {stream.ladder!r}: the store shows 0 matches applied, 1000 were" in body["reason"]
        assert counted(stream.port, stream.ladder, "stream_rater_store_losses_total") == 1
        assert stream.applied() == 0, "nothing may be rated onto the emptied store"

        stream.kill()
        assert asyncio.run(store_looks_lost(stream.settings, [stream.ladder]))
        # Not format 3: workers of the release before may still run on the emptied store.
        assert stream.recorded_format() == b"2"
        stream.start()
        wait_for(lambda: stream.ladder in readiness(stream.port)[1].get("reason", ""), "the restart refusing")
        assert stream.applied() == 0

        stream.rebuild()
        wait_for(lambda: readiness(stream.port)[0] == 200, "the worker ready again")
        stream.caught_up(1800)
    finally:
        stream.stop()
    stream.delivered_as_a_replay(matches)


def test_redis_restarted_from_an_older_snapshot_is_noticed_by_a_restarted_worker(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
):
    """Redis comes back from a snapshot taken 600 matches before the group's committed offset
    (a partial loss) and the worker is restarted, so no worker remembers what it applied: the
    new worker compares the store's positions with the group's committed offset, holds the
    ladder (/readyz names it and both offsets, counted once) and applies nothing on top of the
    older states, also of matches that arrive meanwhile. After `replay --from-topic --store`,
    every state equals a replay and every match's events are on the updates topic."""
    stream = Stream(broker_url, volatile_redis, tmp_path)
    matches = _matches(stream.ladder, 1500, seed=13)
    stream.start()
    try:
        stream.lose_the_tail(matches)
        assert stream.applied() == 600
        stream.start()
        reason = "partition 0: the consumer group committed offset 1200, the store's positions reach 600"
        wait_for(lambda: reason in readiness(stream.port)[1].get("reason", ""), "the loss in /readyz")
        status, body = readiness(stream.port)
        assert status == 503 and f"ladder {stream.ladder!r}" in body["reason"], body
        stream.publish(matches[1200:])
        wait_for(
            lambda: counted(stream.port, None, "stream_rater_matches_consumed_total") >= 200, "a batch taken"
        )
        assert stream.applied() == 600, "nothing may be rated onto the older states"
        assert stream.committed() == 1200
        assert counted(stream.port, stream.ladder, "stream_rater_store_losses_total") == 1

        stream.rebuild()
        wait_for(lambda: readiness(stream.port)[0] == 200, "the worker ready again")
        stream.caught_up(1500)
    finally:
        stream.stop()
    stream.delivered_as_a_replay(matches)


def test_with_on_store_loss_rebuild_the_worker_rebuilds_an_emptied_store_by_itself(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
):
    """``STREAM_RATER_ON_STORE_LOSS=rebuild``: Redis restarted empty while 800 matches (four
    batches) arrive. Without any operator command the worker rebuilds the ladder from the topic
    (once, counted, logged) and goes on with the held and later batches: every state equals a
    replay, and every match's events are on the updates topic."""
    stream = Stream(broker_url, volatile_redis, tmp_path)
    stream.env["STREAM_RATER_ON_STORE_LOSS"] = "rebuild"
    matches = _matches(stream.ladder, 1800, seed=21)
    stream.start()
    try:
        stream.empty_after(matches[:1000])
        stream.publish(matches[1000:1400])
        stream.publish(matches[1400:])
        stream.rebuilt_by_itself(1800)
    finally:
        stream.stop()
    log = stream.log.read_text()
    assert f"rebuilding it from topic {stream.settings.topic_matches!r}" in log
    assert f"ladder {stream.ladder!r} rebuilt from topic" in log
    stream.delivered_as_a_replay(matches)


def test_with_on_store_loss_rebuild_a_topic_without_its_head_keeps_the_ladder_held(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
):
    """The same with the first 120 records of the matches topic deleted (as retention does):
    the worker does not rebuild the ladder from the tail; it stays held, applying nothing, and
    /readyz and the log name the first offset left and the manual command with --history."""
    stream = Stream(broker_url, volatile_redis, tmp_path)
    stream.env["STREAM_RATER_ON_STORE_LOSS"] = "rebuild"
    matches = _matches(stream.ladder, 500, seed=22)
    stream.start()
    try:
        wait_ready(stream.worker, f"http://127.0.0.1:{stream.port}/readyz")
        stream.publish(matches[:300])
        stream.caught_up(300)
        asyncio.run(delete_head(stream.settings, stream.ladder, 120))

        volatile_redis.kill()
        volatile_redis.start()
        stream.publish(matches[300:])
        why = (
            f"not rebuilt automatically: partition 0 of topic {stream.settings.topic_matches!r} starts "
            "at offset 120; offsets 0..119 were deleted"
        )
        wait_for(lambda: why in readiness(stream.port)[1].get("reason", ""), "the refusal in /readyz")
        status, body = readiness(stream.port)
        assert status == 503 and f"ladder {stream.ladder!r}" in body["reason"], body
        command = (
            f"stream-rater replay --from-topic --ladder {stream.ladder} --store URL "
            f"--consumer-group {stream.settings.consumer_group} --history FILE"
        )
        assert command in body["reason"]
        assert (stream.rebuilds("refused"), stream.rebuilds("rebuilt")) == (1, 0)
        assert stream.applied() == 0 and stream.committed() == 300
        stream.kill()  # a stop would wait stop_timeout for the held batch's acknowledgement
    finally:
        stream.stop()
    assert why in stream.log.read_text() and command in stream.log.read_text()


def test_with_on_store_loss_rebuild_a_restarted_worker_rebuilds_a_partial_loss_by_itself(
    broker_url: str, volatile_redis: VolatileRedis, tmp_path: Path
):
    """Redis back from a snapshot 600 matches behind the group, and the worker restarted: the
    loss is found when the partition is assigned (`LossGuard`), and the worker rebuilds the
    ladder by itself while 300 more matches arrive; then every state equals a replay and every
    match's events are on the updates topic."""
    stream = Stream(broker_url, volatile_redis, tmp_path)
    stream.env["STREAM_RATER_ON_STORE_LOSS"] = "rebuild"
    matches = _matches(stream.ladder, 1500, seed=23)
    stream.start()
    try:
        stream.lose_the_tail(matches)
        stream.start()
        stream.publish(matches[1200:])
        stream.rebuilt_by_itself(1500)
    finally:
        stream.stop()
    assert "committed offset 1200, the store's positions reach 600" in stream.log.read_text()
    stream.delivered_as_a_replay(matches)
