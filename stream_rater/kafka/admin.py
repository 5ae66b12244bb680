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
from stream_rater.waiting import wait_until_async

#: Seconds between two tries of a topic creation that failed on a broker not ready.
RETRY_BACKOFF = 0.5


class TopicError(RuntimeError):
    """Topics could not be created, or exist with other partition counts."""


async def create_topics(
    broker: str,
    topics: Mapping[str, int],
    replication: int = 1,
    timeout: float = 30.0,
    options: Mapping[str, Any] | None = None,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Create ``topics`` (name → partitions) on any Kafka-protocol broker; existing ones are OK.

    ``broker`` is a faust URL or a bootstrap list. Waits until the metadata shows every topic
    with its partition count and raises ``TopicError`` if an existing topic has a
    different count (faust would fail later with ``PartitionsMismatch``). ``options`` are
    extra aiokafka client settings (security, see `client_options`). The worker calls it
    at start-up, so a bare broker is enough; Kafka-protocol brokers that auto-create topics
    would otherwise give them their own default partition count. ``configs`` maps a topic
    name to the topic configuration it is created with (`Settings.topic_configs`); a topic
    that exists already keeps its own. A retriable broker error (a node of the cluster down,
    so that a worker can start while one broker is) is tried again until `timeout`.
    """
    if not topics:
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            left = max(1.0, deadline - time.monotonic())
            await _create_topics_once(broker, topics, replication, left, options, configs)
            return
        except TopicError as exc:
            # A broker that is down but still in the metadata (e.g. named as the controller):
            # another try, with fresh metadata, asks a live one.
            retriable = isinstance(exc.__cause__, KafkaError) and exc.__cause__.retriable
            if not retriable or time.monotonic() + RETRY_BACKOFF >= deadline:
                raise
        await asyncio.sleep(RETRY_BACKOFF)


async def _create_topics_once(
    broker: str,
    topics: Mapping[str, int],
    replication: int,
    timeout: float,
    options: Mapping[str, Any] | None,
    configs: Mapping[str, Mapping[str, str]] | None,
) -> None:
    """One attempt of `create_topics`, with an admin client of its own."""
    admin = AIOKafkaAdminClient(
        **{
            **(options or {}),
            "bootstrap_servers": bootstrap_servers(broker),
            "request_timeout_ms": int(timeout * 1000),
        }
    )
    await admin.start()
    try:
        new = [
            NewTopic(name, partitions, replication, topic_configs=dict((configs or {}).get(name, {})))
            for name, partitions in topics.items()
        ]
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


async def create_service_topics(settings: Settings) -> None:
    """Create the service's topics as `settings` configure them (`Settings.topics`, their
    configs, the replication factor, the connection's security), as the worker does before it
    starts and `publish` before it sends: a broker that auto-creates topics never picks the
    partition count."""
    await create_topics(
        settings.broker,
        settings.topics(),
        settings.replication_factor,
        options=client_options(settings),
        configs=settings.topic_configs(),
    )


async def _await_partitions(admin: AIOKafkaAdminClient, topics: Mapping[str, int], timeout: float) -> None:
    """Poll the metadata until every topic reports its expected partition count."""
    found: dict[str, int] = {}

    async def all_visible() -> bool:
        found.clear()
        found.update({t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(list(topics))})
        wrong = {n: found[n] for n, p in topics.items() if n in found and found[n] not in (0, p)}
        if wrong:
            raise TopicError(
                "topics exist with other partition counts: "
                + ", ".join(f"{n} has {c}, wanted {topics[n]}" for n, c in wrong.items())
            )
        return all(found.get(n) == p for n, p in topics.items())

    await wait_until_async(
        all_visible, lambda: f"the topics {dict(topics)}, found {found}", timeout, error=TopicError
    )


async def topic_partitions(
    consumer: AIOKafkaConsumer, topic: str, timeout: float = 30.0
) -> list[TopicPartition]:
    """`topic`'s partitions, waiting up to `timeout` seconds for the metadata to show it.

    Reads a fresh all-topics metadata response: the consumer's own metadata knows only the
    topics it tracks (aiokafka bootstraps asking for none; Tansu answers that with every topic,
    Apache Kafka with none) and `consumer.topics()` returns names only.
    """

    async def partitions() -> set[int] | None:
        found: set[int] | None = (await consumer._client.fetch_all_metadata()).partitions_for_topic(topic)
        return found

    found = await wait_until_async(partitions, f"topic {topic!r} on the broker", timeout, interval=0.1)
    return [TopicPartition(topic, p) for p in sorted(found)]


async def committed_offsets(settings: Settings, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The consumer group's committed offsets (0 where none) of `topic`'s `partitions`."""
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, group_id=settings.consumer_group
    )
    try:
        await consumer.start()  # a failed start is stopped too (else aiokafka warns at exit)
        return {p: await consumer.committed(TopicPartition(topic, p)) or 0 for p in partitions}
    finally:
        await consumer.stop()


async def partition_count(settings: Settings, topic: str) -> int:
    """How many partitions `topic` has."""
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False, group_id=None)
    try:
        await consumer.start()  # a failed start is stopped too (else aiokafka warns at exit)
        return len(await topic_partitions(consumer, topic))
    finally:
        await consumer.stop()
