"""Records at the broker's size limit, and the topics a worker creates, on Apache Kafka: an
oversized record is dead-lettered cut to ``max_event_bytes`` (so the dead letter fits and the
worker goes on), and the matches topic, the source of truth, is created to be kept forever."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from stream_rater.kafka import bootstrap_servers, committed_offsets, match_record, read_log, send_records
from stream_rater.local.demo import ladders_env, start_worker, stop_process, tagged_settings, wait_ready
from stream_rater.local.runtime import free_port
from tests.e2e.e2e_support import applied, equals_replay, worker_test_env
from tests.helpers import cli, duel, topic_config, wait_for

#: Apache Kafka alone: a broker's size limit and topic configs are what production brokers enforce.
pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]

#: Original headers of the oversized record: the first fits the dead letter's header budget
#: (``max_event_bytes``), the second does not.
KEPT_HEADER = ("trace", b"t" * 40_000)
DROPPED_HEADER = ("blob", b"b" * 40_000)
#: How far under the topic's ``max.message.bytes`` the record's batch is: less than the
#: headers a dead letter adds (reason, origin), so that a whole copy would not fit.
SLACK = 16


def padded_value(batch_bytes: int, key: bytes | None, headers: list[tuple[str, bytes]]) -> bytes:
    """A JSON value that makes a one-record batch with `key` and `headers` at most
    `batch_bytes` long (aiokafka's upper bound of its size) and no more than a byte shorter."""
    probe = batch_bytes // 2  # a length with as many varint bytes as the result's
    framing = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, b"x" * probe, headers) - probe
    size = batch_bytes - framing
    return b'{"pad": "' + b"x" * (size - 11) + b'"}'


def test_a_record_at_the_broker_size_limit_is_dead_lettered_truncated_and_the_worker_goes_on(
    broker_url: str, redis_url: str, tmp_path: Path
):
    """A record just under the matches topic's ``max.message.bytes``, with headers, between
    valid matches: the worker dead-letters it cut to ``max_event_bytes`` with ``sr-truncated``
    and its origin (a whole copy would exceed the producer's limit and be retried forever),
    rates every valid match, and the states equal a replay."""
    name = uuid.uuid4().hex[:10]
    ladder = f"l-{name}"
    settings = tagged_settings(
        name, broker=broker_url, redis_url=redis_url, partitions=1, web_port=free_port()
    )
    rng = random.Random(3)
    players = [f"p{i}" for i in range(20)]
    matches = [duel(f"m{i}", *rng.sample(players, 2), ladder=ladder, at=1.7e9 + i) for i in range(400)]
    env = worker_test_env([ladder], tmp_path / "faust-data")
    worker = start_worker(settings, env, (tmp_path / "worker.log").open("w"))
    try:
        wait_ready(worker, f"http://127.0.0.1:{settings.web_port}/readyz")  # it created the topics
        bootstrap = bootstrap_servers(broker_url)
        limit = int(asyncio.run(topic_config(bootstrap, settings.topic_matches))["max.message.bytes"])
        valid = [match_record(settings.topic_matches, m) for m in matches]
        headers = [KEPT_HEADER, DROPPED_HEADER]
        oversized = padded_value(limit - SLACK, valid[0][1], headers)
        big = (settings.topic_matches, valid[0][1], oversized, headers)
        asyncio.run(send_records(settings, [*valid[:200], big, *valid[200:]]))
        wait_for(lambda: applied(redis_url, ladder) == len(matches), "every valid match applied", 60)
        everything = {0: len(matches) + 1}
        wait_for(
            lambda: asyncio.run(committed_offsets(settings, settings.topic_matches, [0])) == everything,
            "every record acknowledged (the worker went on)",
            30,
        )
        dead, _ = asyncio.run(read_log(settings, settings.topic_dlq, timeout=30))
    finally:
        code = stop_process(worker)
    assert code == 0
    [letter] = dead
    headers = dict(letter.headers)
    assert letter.value == oversized[: settings.max_event_bytes]
    assert headers["sr-truncated"] == str(len(oversized)).encode()
    assert headers["sr-origin-topic"] == settings.topic_matches.encode()
    assert headers["sr-origin-offset"] == b"200" and headers["sr-origin-partition"] == b"0"
    assert headers["trace"] == KEPT_HEADER[1] and "blob" not in headers
    assert headers["sr-headers-dropped"] == b"1"
    assert equals_replay(redis_url, ladder, matches)


def test_the_matches_topic_is_created_with_the_configured_retention(broker_url: str):
    """``stream-rater publish`` (which creates the topics as the worker does) creates the
    matches topic with ``STREAM_RATER_MATCHES_RETENTION_HOURS`` (here -1: forever, as a cluster
    created before checkpoints has it); the other topics keep the broker's default."""
    name = uuid.uuid4().hex[:10]
    settings = tagged_settings(name, broker=broker_url, partitions=2)
    env = {
        "STREAM_RATER_BROKER": broker_url,
        "STREAM_RATER_TOPIC_MATCHES": settings.topic_matches,
        "STREAM_RATER_TOPIC_UPDATES": settings.topic_updates,
        "STREAM_RATER_TOPIC_DLQ": settings.topic_dlq,
        "STREAM_RATER_PARTITIONS": "2",
        "STREAM_RATER_MATCHES_RETENTION_HOURS": "-1",
        **ladders_env([f"l-{name}"]),
    }
    cli("publish", stdin=json.dumps(duel("m0", "a", "b", ladder=f"l-{name}")) + "\n", env=env, check=True)
    bootstrap = bootstrap_servers(broker_url)
    configs = {
        topic: asyncio.run(topic_config(bootstrap, topic))["retention.ms"]
        for topic in (settings.topic_matches, settings.topic_updates, settings.topic_dlq)
    }
    assert configs[settings.topic_matches] == "-1"
    assert configs[settings.topic_updates] == configs[settings.topic_dlq] != "-1"
