"""A match that claims to have finished hours after it reached the broker: dead-lettered by the
worker against the record's (broker's) timestamp, and skipped alike by `verify`."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiokafka import AIOKafkaProducer

from stream_rater.kafka import bootstrap_servers
from stream_rater.local.demo import ladders_env
from tests.e2e.e2e_support import equals_replay
from tests.e2e.streams import random_matches, read_topic
from tests.helpers import cli

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

SEVEN_HOURS = 7 * 3600.0


def test_a_match_seven_hours_in_the_future_is_dead_lettered_and_the_stream_still_equals_a_replay(
    stream_factory,
):
    """The worker creates `matches` with LogAppendTime, so a producer whose clock runs 7 h
    ahead (its record timestamp and the match's finished_at both 7 h in the future) is judged
    by the broker's clock: the match goes to the DLQ with a reason naming both times and
    max_clock_skew; the others are rated, their states equal a replay of them, and `verify`
    (which skips the match by the same rule) finds no difference."""
    stream = stream_factory(partitions=1, create=False)  # the worker creates the topics
    stream.start_worker()
    s = stream.settings
    valid = random_matches(stream, 60, players=8, seed=3)
    future_at = time.time() + SEVEN_HOURS
    future = stream.match("future", "p0", "p1", at=future_at)
    stream.publish(valid[:30])

    async def send_from_a_fast_clock() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(s.broker))
        await producer.start()
        try:
            value = json.dumps(future).encode()
            await producer.send_and_wait(
                s.topic_matches, value, key=stream.ladder.encode(), timestamp_ms=int(future_at * 1000)
            )
        finally:
            await producer.stop()

    asyncio.run(send_from_a_fast_clock())
    stream.publish(valid[30:])
    rated = stream.updates(expected=2 * len(valid))
    assert "future" not in {json.loads(r.value)["match_id"] for r in rated}
    [dead] = asyncio.run(read_topic(s, s.topic_dlq, 1, 60, key=lambda r: r.offset))
    headers = {name: value.decode() for name, value in dead.headers}
    appended = float(headers["sr-origin-timestamp"])
    assert appended < time.time() + 60, "the record's timestamp is the broker's, not the producer's"
    assert json.loads(dead.value)["match_id"] == "future"
    assert (
        headers["sr-reason"].startswith("finished_at: ")
        and "s after its record's timestamp " in (headers["sr-reason"])
    )
    assert headers["sr-reason"].endswith("more than max_clock_skew (300 s, STREAM_RATER_MAX_CLOCK_SKEW)")
    assert equals_replay(s.redis_url, stream.ladder, valid, s.redis_prefix)
    verified = cli(
        *("verify", "--ladder", stream.ladder, "--store", s.redis_url, "--broker", s.broker),
        *("--topic-matches", s.topic_matches, "--consumer-group", s.consumer_group),
        env={**ladders_env(stream.names), "STREAM_RATER_REDIS_PREFIX": s.redis_prefix},
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "(1 invalid records skipped" in verified.stdout
    assert verified.stdout.strip().endswith(" players, none differ from the replay")
