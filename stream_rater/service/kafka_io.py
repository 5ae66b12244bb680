"""Plain Kafka clients: publish match events and subscribe to rating updates (users of the
service, outside the worker), create topics, and send many records as per-partition batches
(the worker's produce path). aiokafka directly, no faust."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code
from aiokafka.partitioner import DefaultPartitioner

from stream_rater.contracts import match_key
from stream_rater.contracts.codecs import encode_event
from stream_rater.config.ladders import DEFAULT_LADDER
from stream_rater.config.settings import Settings


def bootstrap_servers(url: str) -> str:
    """A faust broker URL (``kafka://h:p``, ``;``/``,``-separated) as ``h:p,h2:p2``."""
    hosts = []
    for part in url.replace(";", ",").split(","):
        part = part.strip()
        if "://" in part:
            part = part.split("://", 1)[1]
        if part:
            hosts.append(part.rstrip("/"))
    if not hosts:
        raise ValueError(f"no broker address in {url!r}")
    return ",".join(hosts)


def client_options(settings: Settings) -> dict[str, Any]:
    """aiokafka keyword arguments for the configured broker and security settings."""
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers(settings.broker),
        "security_protocol": settings.kafka_security_protocol.upper(),
    }
    if options["security_protocol"] in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl.create_default_context(cafile=settings.kafka_ssl_cafile or None)
    if options["security_protocol"].startswith("SASL"):
        options.update(
            sasl_mechanism=settings.kafka_sasl_mechanism or "PLAIN",
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=settings.kafka_sasl_password,
        )
    return options


#: One record to produce: topic, key, value, headers.
Record = tuple[str, bytes | None, bytes, list[tuple[str, bytes]]]

_partitioner = DefaultPartitioner()


@functools.lru_cache(maxsize=1 << 16)
def _keyed_partition(key: bytes, partitions: tuple[int, ...]) -> int:
    """The partition Kafka's default partitioner (murmur2) gives `key`; keys repeat (one per
    player), so each is hashed once."""
    return _partitioner(key, list(partitions), list(partitions))


def home_partition(ladder: str, partitions: int) -> int:
    """The partition of a topic with `partitions` partitions that a ladder's match records
    belong on: the default partitioner's choice for the key `match_key(ladder)`."""
    return _keyed_partition(match_key(ladder), tuple(range(partitions)))


async def send_batched(producer: AIOKafkaProducer, records: Iterable[Record]) -> None:
    """Send `records` and return when the broker has them all.

    Records are grouped by topic and partition (the default partitioner's choice for keyed
    records, a random partition otherwise) and handed to aiokafka as whole batches: a batch
    costs one delivery future where `producer.send` costs one per record. Order within a
    partition is kept; a batch that fills up is sent and a new one started.
    """
    groups: dict[tuple[str, int], list[Record]] = {}
    partitions: dict[str, tuple[int, ...]] = {}
    for record in records:
        topic, key = record[0], record[1]
        if topic not in partitions:
            partitions[topic] = tuple(sorted(await producer.partitions_for(topic)))
        partition = random.choice(partitions[topic]) if key is None else _keyed_partition(key, partitions[topic])
        groups.setdefault((topic, partition), []).append(record)
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
async def update_sender(settings: Settings) -> AsyncIterator[Callable[[Sequence[dict[str, Any]]], Awaitable[None]]]:
    """An async ``send(events)`` that produces rating-changed events to the updates topic and
    returns when the broker has them all; the producer stops on leaving the context."""
    producer = AIOKafkaProducer(**client_options(settings))
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
    await create_topics(settings.broker, {settings.topic_corrections: 1}, settings.replication_factor,
                        options=client_options(settings))
    producer = AIOKafkaProducer(**client_options(settings))
    await producer.start()
    try:
        record = (settings.topic_corrections, request["ladder"].encode(), encode_event(request), [])
        await send_batched(producer, [record])
    finally:
        await producer.stop()


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
    admin = AIOKafkaAdminClient(**{
        **(options or {}),
        "bootstrap_servers": bootstrap_servers(broker),
        "request_timeout_ms": int(timeout * 1000),
    })
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


async def _await_partitions(
    admin: AIOKafkaAdminClient, topics: Mapping[str, int], timeout: float
) -> None:
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
    record batch each).
    """
    producer = AIOKafkaProducer(**client_options(settings), max_batch_size=256 * 1024)
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

    try:
        for event in events:
            if len(records) >= chunk or (records and ahead_of_pace() > linger):
                await send_batched(producer, records)
                records.clear()
            if (ahead := ahead_of_pace()) > linger:
                await asyncio.sleep(ahead)
            records.append(match_record(settings.topic_matches, event))
            summary.sent += 1
        await send_batched(producer, records)
    finally:
        await producer.stop()
    summary.seconds = time.perf_counter() - start
    return summary


async def subscribe(
    settings: Settings,
    *,
    ladder: str | None = None,
    player: str | None = None,
    from_beginning: bool = False,
    idle_timeout: float | None = None,
    on_bad: Callable[[str, str], None] = lambda where, reason: None,
) -> AsyncIterator[dict[str, Any]]:
    """Rating-changed events as dicts, optionally only one ladder's or one player's.

    Reads every partition of the updates topic without a consumer group (a subscriber never
    takes partitions from another). Stops after `idle_timeout` seconds without a message. A
    record that is not a JSON object goes to ``on_bad(topic[partition]@offset, reason)`` and
    the records after it are still read.
    """
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        topic = settings.topic_updates
        partitions = await _partitions(consumer, topic)
        consumer.assign(partitions)
        if from_beginning:
            await consumer.seek_to_beginning(*partitions)
        else:
            await consumer.seek_to_end(*partitions)
        prefix = f"{ladder}:".encode() if ladder else None
        wanted = f"{ladder}:{player}".encode() if ladder and player else None
        while True:
            batches = await consumer.getmany(timeout_ms=int(1000 * (idle_timeout or 1.0)))
            if not batches and idle_timeout is not None:
                return
            for records in batches.values():
                for record in records:
                    key = record.key or b""
                    if (wanted and key != wanted) or (prefix and not key.startswith(prefix)):
                        continue
                    try:
                        event = json.loads(record.value or b"")
                        if not isinstance(event, dict):
                            raise ValueError(f"a JSON {type(event).__name__}, not an object")
                    except ValueError as exc:
                        on_bad(f"{topic}[{record.partition}]@{record.offset}", str(exc))
                        continue
                    if player and event.get("player_id") != player:
                        continue
                    yield event
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str, timeout: float = 30.0) -> list[TopicPartition]:
    deadline = time.monotonic() + timeout
    while True:
        await consumer.topics()
        found = consumer.partitions_for_topic(topic)
        if found:
            return [TopicPartition(topic, p) for p in sorted(found)]
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} not found on the broker")
        await asyncio.sleep(0.1)


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record read back from a topic, with where it was."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


#: How long a `LogReader` lets the broker hold a fetch. It only fetches what exists, but some
#: brokers (Tansu) hold a fetch this long even when it has records to return: a re-rate's
#: read inside its switch measured 52 ms with 50.
READ_FETCH_WAIT_MS = 5


class LogReader:
    """Reads `topic` from `start` (default: the earliest retained offset) with one consumer
    kept open: each `read` returns the records appended since the previous one, up to at
    least the log's end when called, in (partition, offset) order. Use as ``async with``.

    Fetched batches are kept whole: some Kafka-protocol brokers (Tansu) report the log's end
    as the last batch's base offset + 1, so "up to the end" means "through the batch that
    holds the reported end".
    """

    def __init__(self, settings: Settings, topic: str, start: Mapping[int, int] | None = None) -> None:
        self.topic, self._start = topic, dict(start) if start is not None else None
        self._consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False, group_id=None,
                                          fetch_max_wait_ms=READ_FETCH_WAIT_MS)
        self._partitions: list[TopicPartition] = []

    async def __aenter__(self) -> LogReader:
        await self._consumer.start()
        try:
            self._partitions = await _partitions(self._consumer, self.topic)
            self._consumer.assign(self._partitions)
            for tp in self._partitions:
                if self._start is not None and tp.partition in self._start:
                    self._consumer.seek(tp, self._start[tp.partition])
                else:
                    await self._consumer.seek_to_beginning(tp)
        except BaseException:
            await self._consumer.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def read(self, timeout: float = 300.0) -> list[LogRecord]:
        """The records appended since the previous read (from the start the first time).
        Raises `TimeoutError` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        consumer = self._consumer
        ends = await consumer.end_offsets(self._partitions)
        pending = {tp for tp in self._partitions if await consumer.position(tp) < ends[tp]}
        out: list[LogRecord] = []
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {self.topic!r} took longer than {timeout:.0f} s")
            for tp, records in (await consumer.getmany(*pending, timeout_ms=1000)).items():
                out += [LogRecord(tp.partition, r.offset, r.timestamp, r.key, r.value or b"", tuple(r.headers or ()))
                        for r in records]
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
        out.sort(key=lambda r: (r.partition, r.offset))
        return out

    def partitions(self) -> list[int]:
        """The topic's partitions."""
        return [tp.partition for tp in self._partitions]

    async def reached(self) -> dict[int, int]:
        """Partition → the offset the next read starts at."""
        return {tp.partition: await self._consumer.position(tp) for tp in self._partitions}


async def read_log(
    settings: Settings, topic: str, start: Mapping[int, int] | None = None, timeout: float = 300.0,
) -> tuple[list[LogRecord], dict[int, int]]:
    """The records of `topic` from `start` (default: the earliest retained offset) up to at
    least the log's end when called (see `LogReader`), and the offset reached per partition
    (where a later read goes on). Raises `TimeoutError` after `timeout` seconds."""
    async with LogReader(settings, topic, start) as reader:
        return await reader.read(timeout), await reader.reached()


async def committed_offsets(settings: Settings, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The consumer group's committed offsets (0 where none) of `topic`'s `partitions`."""
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False,
                                group_id=settings.consumer_group)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) or 0 for p in partitions}
    finally:
        await consumer.stop()
