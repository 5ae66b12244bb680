"""Producing: records keyed and partitioned as Kafka's default partitioner does, sent as whole
per-partition batches (the worker's produce path), match events published in file order at a
pace, rating-changed events and correction requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from murmurhash2 import murmurhash2

from stream_rater.config.ladders import DEFAULT_LADDER
from stream_rater.config.settings import Settings
from stream_rater.contracts import match_key
from stream_rater.contracts.codecs import encode_event
from stream_rater.kafka.admin import create_topics
from stream_rater.kafka.security import client_options

#: One record to produce: topic, key, value, headers.
Record = tuple[str, bytes | None, bytes, list[tuple[str, bytes]]]

#: Every producer waits for all in-sync replicas, so an acknowledged record survives the loss
#: of its partition leader. No idempotence: duplicates are harmless here (consumers and the
#: store drop what they saw), and the embedded broker (Tansu) rejects idempotent producers.
PRODUCER_ACKS = "all"


def new_producer(settings: Settings, **options: Any) -> AIOKafkaProducer:
    """An (unstarted) producer for `settings`' broker with ``acks=all`` and `options`."""
    return AIOKafkaProducer(**client_options(settings), acks=PRODUCER_ACKS, **options)


#: The seed of Kafka's default partitioner's MurmurHash2 (the Java client's ``Utils.murmur2``).
_MURMUR2_SEED = 0x9747B28C


def keyed_partition(key: bytes, partitions: Sequence[int]) -> int:
    """The partition of `partitions` (sorted) Kafka's default partitioner sends a record keyed
    `key` to: MurmurHash2 of the key, made non-negative, modulo their number. Hashed by
    ``murmurhash2`` (compiled): aiokafka's own, in Python, costs 20 times as much (2.7 against
    0.13 µs a key), which a ladder of more players than a cache holds paid per event."""
    return partitions[(murmurhash2(key, _MURMUR2_SEED) & 0x7FFFFFFF) % len(partitions)]


def home_partition(ladder: str, partitions: int) -> int:
    """The partition of a topic with `partitions` partitions that a ladder's match records
    belong on: the default partitioner's choice for the key `match_key(ladder)`."""
    return keyed_partition(match_key(ladder), range(partitions))


async def send_batched(producer: AIOKafkaProducer, records: Iterable[Record]) -> None:
    """Send `records` and return when the broker has them all.

    Records are grouped by topic and partition (the default partitioner's choice for keyed
    records, a random partition otherwise) and handed to aiokafka as whole batches: a batch
    costs one delivery future where `producer.send` costs one per record. Order within a
    partition is kept; a batch that fills up is sent and a new one started.
    """
    groups: defaultdict[tuple[str, int], list[Record]] = defaultdict(list)
    partitions: dict[str, list[int]] = {}
    for record in records:
        topic, key = record[0], record[1]
        if topic not in partitions:
            partitions[topic] = sorted(await producer.partitions_for(topic))
        choices = partitions[topic]
        if len(choices) == 1:
            partition = choices[0]
        else:
            partition = random.choice(choices) if key is None else keyed_partition(key, choices)
        groups[topic, partition].append(record)
    delivered = []
    for (topic, partition), group in groups.items():
        batch = producer.create_batch()
        for _, key, value, headers in group:
            while batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                # Full; an empty batch takes any first record, so this runs at most once.
                delivered.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
        delivered.append(await producer.send_batch(batch, topic, partition=partition))
    await asyncio.gather(*delivered)


def match_record(topic: str, event: dict[str, Any]) -> Record:
    """A match-finished event as `publish` sends it: compact JSON keyed by its ladder."""
    ladder = str(event.get("ladder") or DEFAULT_LADDER)
    return topic, match_key(ladder), json.dumps(event, separators=(",", ":")).encode(), []


def update_record(topic: str, event: dict[str, Any]) -> Record:
    """A rating-changed event as a record of `topic`, keyed ``<ladder>:<player_id>`` so that
    one player's events stay in order."""
    return topic, f"{event['ladder']}:{event['player_id']}".encode(), encode_event(event), []


@contextlib.asynccontextmanager
async def update_sender(
    settings: Settings,
) -> AsyncIterator[Callable[[Sequence[dict[str, Any]]], Awaitable[None]]]:
    """An async ``send(events)`` that produces rating-changed events to the updates topic and
    returns when the broker has them all; the producer stops on leaving the context."""
    producer = new_producer(settings)
    try:
        await producer.start()

        async def send(events: Sequence[dict[str, Any]]) -> None:
            await send_batched(producer, (update_record(settings.topic_updates, e) for e in events))

        yield send
    finally:
        await producer.stop()


async def send_request(settings: Settings, request: dict[str, Any]) -> None:
    """Publish one correction request (`contracts.CorrectionRequest` wire form, keyed by its
    ladder) to the corrections topic, created first (one partition) if missing."""
    await create_topics(
        settings.broker,
        {settings.topic_corrections: 1},
        settings.replication_factor,
        options=client_options(settings),
    )
    record: Record = (settings.topic_corrections, request["ladder"].encode(), encode_event(request), [])
    await send_records(settings, [record])


async def send_records(settings: Settings, records: Iterable[Record]) -> None:
    """`send_batched` with a producer of its own, stopped when the broker has them all."""
    producer = new_producer(settings)
    try:
        await producer.start()
        await send_batched(producer, records)
    finally:
        await producer.stop()


@dataclass(slots=True)
class PublishSummary:
    """What `publish` sent."""

    sent: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        rate = self.sent / self.seconds if self.seconds > 0 else 0.0
        return f"sent {self.sent} match events in {self.seconds:.2f} s ({rate:,.0f}/s)"


#: Seconds of paced events `publish` sends as one record batch. One batch per event is what
#: the embedded broker (Tansu) reads worst: a fetch from a position followed by thousands of
#: one-record batches takes super-linear time, so a worker taking over a partition after a
#: crash could not catch up (seen in the kill -9 test: a partition stuck 460 records behind
#: for 300 s), and reading 20,000 of them from the start did not finish in 120 s.
PUBLISH_LINGER = 0.02


async def publish(
    events: Iterable[dict[str, Any]],
    settings: Settings,
    *,
    rate: float | None = None,
    linger: float = PUBLISH_LINGER,
    chunk: int = 5000,
) -> PublishSummary:
    """Send match-finished `events` (wire dicts) to the matches topic, keyed by ladder
    (`match_key`), in the given order; returns when the broker has all of them.

    Events go out as batches of up to `chunk` (`send_batched`). `rate` caps events per
    second: what has accumulated is sent whenever the pace says to wait at least `linger`
    seconds (a producer's ``linger.ms``; 0 sends each event as soon as the pace allows, one
    record batch each). Each event is taken from `events` only when the pace lets it go (a
    generator that stamps the time on its events stamps when each goes out).
    """
    producer = new_producer(settings, max_batch_size=256 * 1024)
    try:
        await producer.start()
    except BaseException:
        await producer.stop()
        raise
    summary = PublishSummary()
    start = time.perf_counter()
    records: list[Record] = []

    def ahead_of_pace() -> float:
        return summary.sent / rate - (time.perf_counter() - start) if rate else 0.0

    source = iter(events)
    try:
        while True:
            if len(records) >= chunk or (records and ahead_of_pace() > linger):
                await send_batched(producer, records)
                records.clear()
            if (ahead := ahead_of_pace()) > linger:
                await asyncio.sleep(ahead)
            event = next(source, None)  # only now: its turn has come
            if event is None:
                break
            records.append(match_record(settings.topic_matches, event))
            summary.sent += 1
        await send_batched(producer, records)
    finally:
        await producer.stop()
    summary.seconds = time.perf_counter() - start
    return summary
