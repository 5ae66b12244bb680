"""Topic administration and group offsets: create topics (and check their partition counts),
list a topic's partitions, read a consumer group's committed offsets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from stream_rater.config.settings import Settings
from stream_rater.kafka.security import bootstrap_servers, client_options


class TopicError(RuntimeError):
    """Topics could not be created, or exist with other partition counts."""


async def create_topics(
    broker: str,
    topics: Mapping[str, int],
    replication: int = 1,
    timeout: float = 30.0,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Create ``topics`` (name → partitions) on any Kafka-protocol broker; existing ones are OK.

    ``broker`` is a faust URL or a bootstrap list. Waits until the metadata shows every topic
    with its partition count and raises ``TopicError`` if an existing topic has a
    different count (faust would fail later with ``PartitionsMismatch``). ``options`` are
    extra aiokafka client settings (security, see `client_options`). The worker calls it
    at start-up, so a bare broker is enough; Kafka-protocol brokers that auto-create topics
    would otherwise give them their own default partition count.
    """
    if not topics:
        return
    admin = AIOKafkaAdminClient(
        **{
            **(options or {}),
            "bootstrap_servers": bootstrap_servers(broker),
            "request_timeout_ms": int(timeout * 1000),
        }
    )
    await admin.start()
    try:
        new = [NewTopic(name, partitions, replication) for name, partitions in topics.items()]
        try:
            response = await admin.create_topics(new, timeout_ms=int(timeout * 1000))
        except TopicAlreadyExistsError:
            pass
        else:
            for name, code, message in (e[:3] for e in response.topic_errors):
                if code not in (0, TopicAlreadyExistsError.errno):
                    raise TopicError(
                        f"creating topic {name!r} failed: {for_code(code).__name__} {message or ''}"
                    )
        await _await_partitions(admin, topics, timeout)
    except KafkaError as exc:
        raise TopicError(f"topic creation on {broker} failed: {exc!r}") from exc
    finally:
        await admin.close()


async def _await_partitions(admin: AIOKafkaAdminClient, topics: Mapping[str, int], timeout: float) -> None:
    """Poll the metadata until every topic reports its expected partition count."""
    deadline = time.monotonic() + timeout
    while True:
        found = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(list(topics))}
        wrong = {n: found[n] for n, p in topics.items() if n in found and found[n] not in (0, p)}
        if wrong:
            raise TopicError(
                "topics exist with other partition counts: "
                + ", ".join(f"{n} has {c}, wanted {topics[n]}" for n, c in wrong.items())
            )
        if all(found.get(n) == p for n, p in topics.items()):
            return
        if time.monotonic() >= deadline:
            raise TopicError(f"topics not visible after {timeout}s: {found}")
        await asyncio.sleep(0.05)


async def topic_partitions(
    consumer: AIOKafkaConsumer, topic: str, timeout: float = 30.0
) -> list[TopicPartition]:
    """`topic`'s partitions, waiting up to `timeout` seconds for the metadata to show it.

    Reads a fresh all-topics metadata response: the consumer's own metadata knows only the
    topics it tracks (aiokafka bootstraps asking for none; Tansu answers that with every topic,
    Apache Kafka with none) and `consumer.topics()` returns names only.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = (await consumer._client.fetch_all_metadata()).partitions_for_topic(topic)
        if found:
            return [TopicPartition(topic, p) for p in sorted(found)]
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} not found on the broker")
        await asyncio.sleep(0.1)


async def committed_offsets(settings: Settings, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The consumer group's committed offsets (0 where none) of `topic`'s `partitions`."""
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, group_id=settings.consumer_group
    )
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) or 0 for p in partitions}
    finally:
        await consumer.stop()
