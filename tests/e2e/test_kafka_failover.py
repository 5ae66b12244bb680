"""Faults only a real Kafka cluster has, on three Apache Kafka KRaft nodes (replication 3,
``min.insync.replicas`` 2) started once for the module: the partition leader killed, a broker
frozen past every session timeout, the group coordinator killed, and the whole cluster
stopped and restarted from its logs. Each test streams matches through one worker while the
fault happens and ends with the project's oracle: every rating-changed event and final state
exactly a replay of the input, each match applied once, each player's events an unbroken
chain, and the worker's counters equal to the truth. Needs java and mvn (else skipped; under
CI=true a skip fails)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from stream_rater.kafka import create_topics
from stream_rater.local.apache_kafka import JavaToolMissing, java_binary, kafka_libs
from stream_rater.local.demo import stop_process, tagged_settings
from stream_rater.local.runtime import LocalRuntime, Supervision
from tests.e2e.e2e_support import counted, readiness
from tests.e2e.streams import Stream, assert_equals_replay, random_matches
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e

#: The JVM nodes start in seconds on an idle machine; the suite's neighbours slow them down.
STARTUP_TIMEOUT = 180.0
#: Matches per test and the pace they are published at (a fault lands mid-stream).
MATCHES = 3000
RATE = 400.0
#: How long a broker stays frozen: past the worker's session timeout (3 s) and the broker's
#: own (Kafka's ``broker.session.timeout.ms``, 9 s), after which the controller fences it.
FREEZE_SECONDS = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """Three KRaft nodes and a Redis; the logs kept in a work dir that restarts read."""
    try:
        java_binary()
        kafka_libs()
    except JavaToolMissing as exc:
        pytest.skip(str(exc))
    runtime = LocalRuntime(
        broker="apache-kafka",
        brokers=3,
        workdir=tmp_path_factory.mktemp("kafka-failover"),
        supervision=Supervision(startup_timeout=STARTUP_TIMEOUT),
    )
    with runtime:
        yield runtime


@pytest.fixture
def stream(cluster: LocalRuntime, tmp_path: Path) -> Iterator[Stream]:
    """One ladder on fresh one-partition topics replicated three ways, and one ready worker;
    the worker is stopped by PID afterwards."""
    name = uuid.uuid4().hex[:10]
    settings = tagged_settings(
        name,
        broker=cluster.broker_url,
        redis_url=cluster.redis_url,
        partitions=1,
        batch_size=100,
        replication_factor=cluster.replication_factor,
    )
    asyncio.run(create_topics(settings.broker, settings.topics(), cluster.replication_factor))
    made = Stream(settings, (f"f-{name}",), tmp_path)
    made.start_worker()
    yield made
    for process in made.workers:
        stop_process(process)


Ask = Callable[[AIOKafkaAdminClient], Awaitable[Any]]


async def _admin(bootstrap: str, ask: Ask) -> Any:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        return await ask(admin)
    finally:
        await admin.close()


def ask_cluster(cluster: LocalRuntime, ask: Ask) -> Any:
    """`ask(admin)`'s answer, retried while a node just stopped is still in the metadata."""

    def answer() -> tuple[Any] | None:
        try:
            return (asyncio.run(_admin(cluster.bootstrap_servers, ask)),)
        except (KafkaError, OSError):
            return None

    (answered,) = wait_for(answer, "an answer from the cluster's admin API", 60)
    return answered


def partition_zero(cluster: LocalRuntime, topic: str) -> dict:
    """Partition 0 of `topic` as describe_topics says: leader, replicas, isr."""
    (described,) = ask_cluster(cluster, lambda admin: admin.describe_topics([topic]))
    return next(p for p in described["partitions"] if p["partition"] == 0)


def leader_of(cluster: LocalRuntime, topic: str) -> int:
    """The node leading partition 0 of `topic`."""
    return int(partition_zero(cluster, topic)["leader"])


def wait_full_isr(cluster: LocalRuntime, topic: str) -> None:
    """Until all three replicas of `topic`'s partition are in sync again."""
    wait_for(lambda: len(partition_zero(cluster, topic)["isr"]) == 3, f"3 in-sync replicas of {topic}", 120)


class Publisher:
    """The stream's matches published at `RATE` by a thread (acks=all, like `publish`)."""

    def __init__(self, stream: Stream, matches: list[dict]) -> None:
        self.failure: BaseException | None = None

        def run() -> None:
            try:
                stream.publish(matches, rate=RATE)
            except BaseException as exc:  # reported by join()
                self.failure = exc

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self) -> None:
        """Wait until every match is sent; fail if the publisher could not send them all."""
        self.thread.join()
        assert self.failure is None, f"publishing failed: {self.failure!r}"


def progress(stream: Stream, beyond: int, what: str, timeout: float = 120.0) -> None:
    """Until the store shows `beyond` more matches applied than it does now."""
    goal = stream.applied() + beyond
    wait_for(lambda: stream.applied() >= goal, f"{goal} matches applied {what}", timeout)


def assert_oracle(stream: Stream, matches: list[dict]) -> None:
    """Every event and final state exactly replay's, chains unbroken, every match applied
    once by the one worker (its counter), no dead letter."""
    records = stream.updates(expected=2 * len(matches), timeout=180)
    assert_equals_replay(stream, matches, records)
    port = stream.web_ports[0]
    # The counter goes up a moment after a batch's events are produced.
    wait_for(lambda: counted(port, stream.ladder) >= len(matches), "every match counted", 30)
    assert counted(port, stream.ladder) == len(matches)
    assert counted(port, stream.ladder, "stream_rater_dead_letters_total") == 0


def test_partition_leader_killed_then_restarted(cluster: LocalRuntime, stream: Stream) -> None:
    """SIGKILL the node leading the matches partition mid-stream: a follower takes over, the
    worker and the publisher fail over to it, /readyz explains any moment it is not ready,
    and the node restarted from its log rejoins the ISR. Nothing lost, nothing twice."""
    matches = random_matches(stream, MATCHES, players=40, seed=21)
    publisher = Publisher(stream, matches)
    progress(stream, 500, "before the kill")
    leader = leader_of(cluster, stream.settings.topic_matches)
    os.kill(cluster.broker_pids[leader], signal.SIGKILL)
    assert stream.applied() < len(matches), "the kill must land mid-stream to mean anything"
    unready: list[str] = []

    def going_on() -> bool:
        status, body = readiness(stream.web_ports[0])
        if status != 200:
            unready.append(body.get("reason", ""))
        return leader_of(cluster, stream.settings.topic_matches) not in (leader, -1)

    wait_for(going_on, "a new leader of the matches partition", 60)
    progress(stream, 300, "with the leader dead")
    assert all(unready), f"/readyz not ready without a reason: {unready}"
    cluster.restart_broker(leader)
    wait_full_isr(cluster, stream.settings.topic_matches)
    publisher.join()
    wait_for(lambda: readiness(stream.web_ports[0])[0] == 200, "/readyz 200 with every node back")
    assert_oracle(stream, matches)


def test_broker_frozen_past_every_session_timeout(cluster: LocalRuntime, stream: Stream) -> None:
    """SIGSTOP the matches partition's leader for `FREEZE_SECONDS`: the controller fences it
    and a follower leads. After SIGCONT the node finds itself fenced, catches up and rejoins
    the ISR, and the stream goes on. Nothing lost, nothing twice.

    The worker does not go on *during* the freeze: its requests in flight to the frozen node
    (a fetch, the group heartbeat when it coordinates the group) wait for the client's request
    timeout (aiokafka's 40 s; faust's ``broker_request_timeout``, 90 s, for the consumer)
    before it asks the metadata again, so a freeze shorter than that only delays it."""
    matches = random_matches(stream, MATCHES, players=40, seed=22)
    publisher = Publisher(stream, matches)
    progress(stream, 500, "before the freeze")
    topic = stream.settings.topic_matches
    leader = leader_of(cluster, topic)
    pid = cluster.broker_pids[leader]
    thaw_at = time.monotonic() + FREEZE_SECONDS
    os.kill(pid, signal.SIGSTOP)
    try:
        assert stream.applied() < len(matches), "the freeze must land mid-stream to mean anything"
        wait_for(lambda: leader_of(cluster, topic) not in (leader, -1), "the frozen leader fenced", 60)
        # The freeze itself lasts its full length: its point is to outlast every session timeout.
        wait_for(lambda: time.monotonic() >= thaw_at, "the end of the freeze", FREEZE_SECONDS + 5)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_full_isr(cluster, topic)
    publisher.join()
    assert_oracle(stream, matches)


def test_group_coordinator_killed_then_restarted(cluster: LocalRuntime, stream: Stream) -> None:
    """SIGKILL the node coordinating the worker's consumer group mid-stream: the group moves
    to another node, the worker rejoins it there without losing its committed offsets, and
    the node restarted from its log rejoins. Nothing lost, nothing twice."""
    group = stream.settings.consumer_group
    matches = random_matches(stream, MATCHES, players=40, seed=23)
    publisher = Publisher(stream, matches)
    progress(stream, 500, "before the kill")
    coordinator = ask_cluster(cluster, lambda admin: admin.find_coordinator(group))
    os.kill(cluster.broker_pids[coordinator], signal.SIGKILL)
    assert stream.applied() < len(matches), "the kill must land mid-stream to mean anything"
    wait_for(
        lambda: ask_cluster(cluster, lambda admin: admin.find_coordinator(group)) != coordinator,
        "another coordinator of the group",
        60,
    )
    progress(stream, 300, "with the coordinator dead")
    cluster.restart_broker(coordinator)
    publisher.join()
    assert_oracle(stream, matches)


def test_every_broker_stopped_and_restarted_from_its_log(cluster: LocalRuntime, stream: Stream) -> None:
    """SIGKILL all three nodes mid-stream: /readyz says the broker does not answer and for how
    long; the worker survives the outage, and once every node is back from its on-disk log it
    goes on from its committed offsets. Nothing lost, nothing twice."""
    matches = random_matches(stream, MATCHES, players=40, seed=24)
    first, rest = matches[: 2 * MATCHES // 3], matches[2 * MATCHES // 3 :]
    stream.publish(first)
    progress(stream, 300, "before the outage")
    for pid in cluster.broker_pids:
        os.kill(pid, signal.SIGKILL)
    assert stream.applied() < len(first), "the outage must land mid-stream to mean anything"
    port = stream.web_ports[0]
    wait_for(
        lambda: (
            "the broker does not answer a metadata request" in readiness(port)[1].get("reason", "")
            and "unanswered for" in readiness(port)[1]["reason"]
        ),
        "/readyz naming the broker and how long it has been away",
        60,
    )
    assert stream.workers[0].poll() is None, "the worker must outlive the outage"
    cluster.restart_broker(0, 1, 2)
    wait_for(lambda: readiness(port)[0] == 200, "/readyz 200 with the cluster back", 120)
    stream.publish(rest)
    assert_oracle(stream, matches)
