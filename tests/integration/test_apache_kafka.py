"""A real Apache Kafka through `LocalRuntime(broker="apache-kafka")`: one KRaft node, and a
cluster of three (replication 3, ``min.insync.replicas`` 2) that keeps taking acks=all writes
with a node killed and takes the node back from its on-disk log. Needs java and mvn; without
them the tests skip (under CI=true a skip fails)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from stream_rater.config.settings import Settings
from stream_rater.kafka import Record, create_topics, read_log, send_batched
from stream_rater.local import class_archive
from stream_rater.local.apache_kafka import ApacheKafkaCluster, JavaToolMissing, java_binary, kafka_libs
from stream_rater.local.class_archive import ClassArchive
from stream_rater.local.nemesis import BrokerLinks
from stream_rater.local.runtime import Addresses, LocalRuntime, LocalRuntimeError, Supervision
from tests.helpers import assert_gone, topic_config

pytestmark = pytest.mark.integration

#: The JVM nodes start in seconds on an idle machine; the suite's neighbours slow them down.
STARTUP_TIMEOUT = 180.0


@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    """Skip the module without java or mvn (resolving Kafka's jars once, if needed, here)."""
    try:
        java_binary()
        kafka_libs()
    except JavaToolMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def links() -> Iterator[BrokerLinks]:
    """One client slot's cuttable links to each of the cluster's three nodes."""
    made = BrokerLinks(1, 3)
    yield made
    made.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, links: BrokerLinks) -> Iterator[LocalRuntime]:
    """Three KRaft nodes, their logs in a kept work dir (a killed node restarts from it), each
    with a listener advertised behind `links`."""
    runtime = LocalRuntime(
        broker="apache-kafka",
        brokers=3,
        redis=False,
        workdir=tmp_path_factory.mktemp("kafka-cluster"),
        addresses=Addresses(kafka_listeners=links.listeners()),
        supervision=Supervision(startup_timeout=STARTUP_TIMEOUT),
    )
    with runtime:
        yield runtime
    assert_gone(runtime.pids.values())


def fresh_topic() -> str:
    """A topic name no other test uses."""
    return f"ak-{uuid.uuid4().hex[:10]}"


def records(topic: str, count: int, prefix: str) -> list[Record]:
    """``count`` keyed records ``prefix-N``."""
    return [(topic, f"k{n % 7}".encode(), f"{prefix}-{n}".encode(), []) for n in range(count)]


async def produce(bootstrap: str, batch: list[Record]) -> None:
    """Send ``batch`` with ``acks=all`` (every in-sync replica has it, at least min.insync)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=30000)
    await producer.start()
    try:
        await send_batched(producer, batch)
    finally:
        await producer.stop()


def read_values(runtime: LocalRuntime, topic: str) -> list[bytes]:
    """Every value in ``topic``, read back from the earliest offset with `read_log`."""
    log, _ = asyncio.run(read_log(Settings(broker=runtime.broker_url), topic, timeout=60.0))
    return sorted(record.value for record in log)


async def describe(bootstrap: str, topic: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``topic``'s partitions (leader, replicas, isr) and its effective configuration."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        return described["partitions"], await topic_config(bootstrap, topic, admin)
    finally:
        await admin.close()


def wait_isr(bootstrap: str, topic: str, size: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Poll until every partition of ``topic`` has ``size`` in-sync replicas; its partitions.
    A request may go to a node just killed (still listed until the controller fences it)."""
    deadline = time.monotonic() + timeout
    partitions: list[dict[str, Any]] = []
    while True:
        try:
            partitions, _ = asyncio.run(describe(bootstrap, topic))
        except KafkaError:
            pass
        else:
            if all(len(p["isr"]) == size for p in partitions):
                return partitions
        assert time.monotonic() < deadline, f"ISR never reached {size}: {partitions}"
        time.sleep(0.2)


def test_one_broker_round_trip(tmp_path: Path) -> None:
    """One KRaft node: the runtime's topics exist, records go in and come back in full, and
    stop() ends the JVM by PID; its log is on disk in the work dir."""
    topic = fresh_topic()
    runtime = LocalRuntime(
        {topic: 2},
        broker="apache-kafka",
        redis=False,
        workdir=tmp_path,
        supervision=Supervision(startup_timeout=STARTUP_TIMEOUT),
    )
    with runtime:
        assert list(runtime.pids) == ["kafka-0"]
        assert runtime.broker_pids == [runtime.pids["kafka-0"]]
        assert runtime.replication_factor == 1
        assert runtime.broker_url == f"kafka://{runtime.bootstrap_servers}"
        asyncio.run(produce(runtime.bootstrap_servers, records(topic, 50, "one")))
        assert read_values(runtime, topic) == sorted(f"one-{n}".encode() for n in range(50))
        partitions, configs = asyncio.run(describe(runtime.bootstrap_servers, topic))
        assert len(partitions) == 2
        assert configs["min.insync.replicas"] == "1"
    assert_gone(runtime.pids.values())
    assert "Kafka Server started" in (tmp_path / "kafka-0.log").read_text()
    with pytest.raises(LocalRuntimeError):
        _ = runtime.bootstrap_servers


def test_a_broker_writes_its_class_archive_at_exit_and_a_jvm_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no class archive, a broker's JVM writes one when it stops, and the JVM maps it
    (with ``-Xshare:on`` a JVM that cannot map it fails); later brokers are started with it
    (`ClassArchive.options`, tests/unit/local/test_class_archive.py). Its stop timeout, 1 s, is
    shorter than the dump (5 s on an idle machine): the JVM writing it is given
    `class_archive.WRITE_SECONDS` more. The archive goes to a cache of this test's own (the jars
    stay where they are)."""
    monkeypatch.setattr(class_archive, "cache_root", lambda: tmp_path / "cache")
    archive = ClassArchive(java_binary(), kafka_libs())
    cluster = ApacheKafkaCluster(tmp_path, startup_timeout=STARTUP_TIMEOUT, stop_timeout=1.0).start()
    try:
        pid = cluster.children[0].process.pid
        argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        assert any(a.startswith("-XX:ArchiveClassesAtExit=") for a in argv), argv
    finally:
        cluster.stop()
    assert_gone([pid])
    assert archive.path.is_file() and not list(tmp_path.glob("*.jsa"))
    mapped = subprocess.run(
        [java_binary(), "-Xshare:on", *archive.mapped(), "-cp", f"{kafka_libs()}/*", "-version"],
        capture_output=True,
        text=True,
    )
    assert mapped.returncode == 0 and "sharing" in mapped.stderr, mapped.stderr


def test_cluster_replicates_three_ways(cluster: LocalRuntime) -> None:
    """A topic created with replication 3 has every partition on all three nodes, all in sync,
    and ``min.insync.replicas`` 2; records produced with acks=all read back in full."""
    topic = fresh_topic()
    assert len(cluster.broker_pids) == 3 and cluster.replication_factor == 3
    assert len(cluster.bootstrap_servers.split(",")) == 3
    asyncio.run(create_topics(cluster.broker_url, {topic: 3}, replication=3))
    partitions = wait_isr(cluster.bootstrap_servers, topic, 3)
    assert sorted(sorted(p["replicas"]) for p in partitions) == [[0, 1, 2]] * 3
    _, configs = asyncio.run(describe(cluster.bootstrap_servers, topic))
    assert configs["min.insync.replicas"] == "2"
    asyncio.run(produce(cluster.bootstrap_servers, records(topic, 200, "rf3")))
    assert read_values(cluster, topic) == sorted(f"rf3-{n}".encode() for n in range(200))


def test_killed_node_rejoins_from_its_log(cluster: LocalRuntime) -> None:
    """SIGKILL one node: acks=all writes still succeed on the two left (ISR 2 = min ISR); the
    node restarted from its log dir (new PID) catches up and is back in every ISR."""
    topic = fresh_topic()
    asyncio.run(create_topics(cluster.broker_url, {topic: 3}, replication=3))
    wait_isr(cluster.bootstrap_servers, topic, 3)
    asyncio.run(produce(cluster.bootstrap_servers, records(topic, 100, "before")))
    victim = cluster.broker_pids[2]
    os.kill(victim, signal.SIGKILL)
    wait_isr(cluster.bootstrap_servers, topic, 2)
    asyncio.run(produce(cluster.bootstrap_servers, records(topic, 100, "during")))
    cluster.restart_broker(2)
    assert cluster.broker_pids[2] != victim
    assert_gone([victim])
    partitions = wait_isr(cluster.bootstrap_servers, topic, 3)
    assert all(2 in p["isr"] for p in partitions)
    expected = sorted(f"{phase}-{n}".encode() for phase in ("before", "during") for n in range(100))
    assert read_values(cluster, topic) == expected


def test_a_client_behind_broker_links_is_partitioned_from_every_node_by_a_cut(
    cluster: LocalRuntime, links: BrokerLinks
) -> None:
    """A producer bootstrapped through the links learns the proxies' addresses for every node
    (its metadata names no direct port), so cutting the links stops its sends to every
    partition leader while the direct listeners go on; healed, the same producer sends again."""
    topic = fresh_topic()
    asyncio.run(create_topics(cluster.broker_url, {topic: 3}, replication=3))
    wait_isr(cluster.bootstrap_servers, topic, 3)
    behind = ",".join(address.removeprefix("kafka://") for address in links.broker_url(0).split(";"))

    async def cut_then_healed() -> tuple[bool, set[int]]:
        producer = AIOKafkaProducer(bootstrap_servers=behind, acks="all", request_timeout_ms=3000)
        await producer.start()
        try:
            await send_batched(producer, records(topic, 30, "linked"))
            links.cut(0)
            try:
                await asyncio.wait_for(send_batched(producer, records(topic, 30, "cut")), timeout=8)
                blocked = False
            except (TimeoutError, KafkaError):
                blocked = True
            finally:
                links.heal(0)
            await send_batched(producer, records(topic, 30, "healed"))
            return blocked, {node.port for node in producer.client.cluster.brokers()}
        finally:
            await producer.stop()

    blocked, ports = asyncio.run(cut_then_healed())
    assert blocked and ports == {proxy.port for proxy in links.proxies[0]}
    got = read_values(cluster, topic)
    assert {f"linked-{n}".encode() for n in range(30)} | {f"healed-{n}".encode() for n in range(30)} <= set(
        got
    )
