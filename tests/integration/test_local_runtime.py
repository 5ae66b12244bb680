"""The embedded local runtime: Tansu and redis-server as child processes on loopback."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from stream_rater.config.settings import Settings
from stream_rater.kafka import TopicError, create_topics, send_batched
from stream_rater.local import runtime as local_runtime
from stream_rater.local.runtime import (
    LocalExtraMissing,
    LocalRuntime,
    LocalRuntimeError,
    Supervision,
    free_port,
    wait_for_port,
)
from tests.helpers import consume_until, topic_config, wait_for

integration = pytest.mark.integration
MATCHES = "matches"
GROUP_SESSION_MS = 3000  # Tansu delays joins by about session_timeout / 2 (more after a leave)


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    """One runtime for the module, with an 8-partition ``matches`` topic with the default retention (as
    `dev` and `demo` create it: `Settings.topic_configs`)."""
    try:
        with LocalRuntime(topics={MATCHES: 8}, topic_configs=Settings().topic_configs()) as rt:
            yield rt
    except LocalExtraMissing as exc:
        pytest.skip(str(exc))


def fresh_topic() -> str:
    """A topic name no other test uses."""
    return f"lr-{uuid.uuid4().hex[:10]}"


async def partition_count(bootstrap: str, topic: str) -> int:
    """Number of partitions the broker reports for ``topic``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        return len(described["partitions"])
    finally:
        await admin.close()


def process_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (absent, or a zombie awaiting its new parent's reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


@integration
def test_redis_answers_ping_and_persists_with_aof(runtime: LocalRuntime) -> None:
    """The local Redis answers PING and keeps an append-only file (no RDB snapshots), so a
    restart of it under `dev` loses at most the last second."""
    client = redis.Redis.from_url(runtime.redis_url, decode_responses=True)
    try:
        assert client.ping() is True
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
    finally:
        client.close()


@integration
async def test_topics_given_at_start_have_their_partition_counts(runtime: LocalRuntime) -> None:
    """A topic passed to LocalRuntime(topics=...) exists with the requested 8 partitions."""
    assert await partition_count(runtime.bootstrap_servers, MATCHES) == 8


@integration
async def test_topics_given_at_start_have_their_configs(runtime: LocalRuntime) -> None:
    """The matches topic is created with the default bounded retention (the correction window
    plus the checkpoint cadence: 174 h), as the worker creates it."""
    config = await topic_config(runtime.bootstrap_servers, MATCHES)
    assert config["retention.ms"] == str(174 * 3600 * 1000)


@integration
async def test_create_topics_is_idempotent(runtime: LocalRuntime) -> None:
    """Creating an existing topic again with the same partition count succeeds and changes nothing."""
    topic = fresh_topic()
    await create_topics(runtime.broker_url, {topic: 3})
    await create_topics(runtime.bootstrap_servers, {topic: 3, MATCHES: 8})
    assert await partition_count(runtime.bootstrap_servers, topic) == 3


@integration
async def test_create_topics_rejects_an_existing_topic_with_other_partitions(runtime: LocalRuntime) -> None:
    """Asking for an existing topic with a different partition count raises instead of passing silently."""
    with pytest.raises(TopicError, match=f"{MATCHES} has 8, wanted 4"):
        await create_topics(runtime.broker_url, {MATCHES: 4})


@integration
async def test_produce_consume_round_trip(runtime: LocalRuntime) -> None:
    """Keyed records produced to an 8-partition topic are all consumed back, each key on one partition."""
    topic = fresh_topic()
    await create_topics(runtime.broker_url, {topic: 8})
    sent = {(f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(40)}
    producer = AIOKafkaProducer(bootstrap_servers=runtime.bootstrap_servers)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in sorted(sent)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=runtime.bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(8)])
        received = await consume_until(
            consumer, lambda records: len(records) >= len(sent), f"the {len(sent)} records sent", 10
        )
    finally:
        await consumer.stop()
    assert {(r.key, r.value) for r in received} == sent
    partitions_of = {key: {r.partition for r in received if r.key == key} for key, _ in sent}
    assert all(len(partitions) == 1 for partitions in partitions_of.values())


@integration
async def test_batch_built_with_create_batch_is_read_back_in_order(runtime: LocalRuntime) -> None:
    """A record batch sent with create_batch/send_batch lands contiguously and in order."""
    topic = fresh_topic()
    await create_topics(runtime.broker_url, {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=runtime.bootstrap_servers)
    await producer.start()
    try:
        batch = producer.create_batch()
        for i in range(25):
            assert batch.append(key=None, value=f"b{i}".encode(), timestamp=None) is not None
        batch.close()
        metadata = await (await producer.send_batch(batch, topic, partition=0))
    finally:
        await producer.stop()
    assert metadata.offset == 0

    consumer = AIOKafkaConsumer(bootstrap_servers=runtime.bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        records = [await consumer.getone() for _ in range(25)]
    finally:
        await consumer.stop()
    assert [(r.offset, r.value) for r in records] == [(i, f"b{i}".encode()) for i in range(25)]


@integration
async def test_send_batched_matches_per_record_sends(runtime: LocalRuntime) -> None:
    """send_batched puts each key where a per-record send puts it, keeps each key's order
    and the headers across batches that fill up (1 KB here), and spreads unkeyed records."""
    batched, single = fresh_topic(), fresh_topic()
    await create_topics(runtime.broker_url, {batched: 8, single: 8})
    records = [
        (batched, f"k{i % 7}".encode(), f"v{i}".encode() * 20, [("h", str(i).encode())]) for i in range(300)
    ]
    records += [(batched, None, f"loose{i}".encode(), []) for i in range(40)]
    producer = AIOKafkaProducer(bootstrap_servers=runtime.bootstrap_servers, max_batch_size=1024)
    await producer.start()
    try:
        await send_batched(producer, records)
        await asyncio.gather(*[await producer.send(single, b"x", key=f"k{i}".encode()) for i in range(7)])
    finally:
        await producer.stop()

    received = await read_all(runtime, {batched: len(records), single: 7})
    partition_of = {r.key: r.partition for r in received[single]}
    keyed = [r for r in received[batched] if r.key is not None]
    assert all(r.partition == partition_of[r.key] for r in keyed)
    for key in partition_of:
        mine = sorted((r for r in keyed if r.key == key), key=lambda r: r.offset)
        assert [(r.value, r.headers) for r in mine] == [(v, tuple(h)) for _, k, v, h in records if k == key]
    assert sorted(r.value for r in received[batched] if r.key is None) == sorted(
        v for _, k, v, _ in records if k is None
    )
    assert len({r.partition for r in received[batched] if r.key is None}) > 1


async def read_all(
    runtime: LocalRuntime, expected: dict[str, int], timeout: float = 15.0
) -> dict[str, list[ConsumerRecord]]:
    """Every record of the given topics, read until each has its expected count."""
    consumer = AIOKafkaConsumer(bootstrap_servers=runtime.bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for topic in expected for p in range(8)])
        records = await consume_until(
            consumer,
            lambda records: all(sum(r.topic == t for r in records) >= n for t, n in expected.items()),
            f"records of {expected}",
            timeout,
        )
    finally:
        await consumer.stop()
    return {topic: [r for r in records if r.topic == topic] for topic in expected}


@integration
async def test_next_group_member_resumes_at_committed_offset(runtime: LocalRuntime) -> None:
    """After one group member commits offset 4 and leaves, the next member of the group starts at offset 4."""
    topic, group = fresh_topic(), fresh_topic()
    await create_topics(runtime.broker_url, {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=runtime.bootstrap_servers)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(topic, f"m{i}".encode())
    finally:
        await producer.stop()

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topic,
            bootstrap_servers=runtime.bootstrap_servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=GROUP_SESSION_MS,
            heartbeat_interval_ms=1000,
        )

    tp = TopicPartition(topic, 0)
    first = member()
    await first.start()
    try:
        head = [await first.getone() for _ in range(4)]
        await first.commit({tp: head[-1].offset + 1})
    finally:
        await first.stop()
    assert [r.value for r in head] == [b"m0", b"m1", b"m2", b"m3"]

    second = member()
    await second.start()
    try:
        resumed = await asyncio.wait_for(second.getone(), timeout=30)
        assert await second.committed(tp) == 4
    finally:
        await second.stop()
    assert (resumed.offset, resumed.value) == (4, b"m4")


@integration
def test_stop_ends_the_child_processes() -> None:
    """After stop() no child PID exists any more, the temp dir is gone, and stop() may be repeated."""
    try:
        rt = LocalRuntime().start()
    except LocalExtraMissing as exc:
        pytest.skip(str(exc))
    pids, log_dir = rt.pids, rt.log_dir
    assert set(pids) == {"tansu", "redis"}
    assert log_dir is not None and (log_dir / "tansu.log").exists()
    rt.stop()
    rt.stop()
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not log_dir.exists()
    with pytest.raises(LocalRuntimeError):
        _ = rt.redis_url


@integration
def test_children_die_when_the_parent_is_killed() -> None:
    """SIGKILLing the process that started the runtime takes the broker and Redis down with it."""
    script = (
        "import os, signal\n"
        "from stream_rater.local.runtime import LocalRuntime\n"
        "rt = LocalRuntime().start()\n"
        "print(*rt.pids.values(), rt.log_dir, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    if "LocalExtraMissing" in parent.stderr:
        pytest.skip(parent.stderr.strip().splitlines()[-1])
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    *pids, log_dir = parent.stdout.split()
    try:
        wait_for(lambda: all(process_gone(int(pid)) for pid in pids), "the children gone", 10)
    finally:
        for pid in pids:
            if not process_gone(int(pid)):
                os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(log_dir, ignore_errors=True)


@integration
def test_startup_failure_raises_with_the_log_tail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A child that keeps exiting at startup is retried on a new port, then start() raises quoting its log."""
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'fatal: cannot bind' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(local_runtime, "redis_server_binary", lambda: str(fake))
    rt = LocalRuntime(broker=False, workdir=tmp_path / "work", supervision=Supervision(port_attempts=2))
    with pytest.raises(LocalRuntimeError, match="redis failed to start") as failure:
        rt.start()
    assert "fatal: cannot bind" in str(failure.value)
    assert (tmp_path / "work" / "redis.log").read_text().count("fatal: cannot bind") == 2  # retried
    assert rt.log_dir is None


def test_wait_for_port_times_out_when_nothing_listens() -> None:
    """wait_for_port raises TimeoutError, naming the address, once its timeout passes without
    a listener."""
    port = free_port()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        wait_for_port("127.0.0.1", port, timeout=0.3)
