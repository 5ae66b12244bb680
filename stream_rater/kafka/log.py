"""Reading topics back: a ladder's log in (partition, offset) order up to its end (replay,
verify, re-rates, dead letters), and rating-changed events for subscribers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_rater.config.settings import Settings
from stream_rater.kafka.admin import topic_partitions
from stream_rater.kafka.security import client_options
from stream_rater.waiting import wait_until_async

#: How every reader of ours reads a topic, the worker's consumer included: a transaction's
#: records once it commits, never if it aborts. A publisher that writes matches transactionally
#: (Kafka Streams, a Java service with exactly-once) must not get matches that never happened
#: rated, and replay, verify and re-rates must read what the worker read. The end of a log is
#: then its last stable offset, and transaction markers occupy offsets that hold no record.
ISOLATION_LEVEL = "read_committed"


async def subscribe(
    settings: Settings,
    *,
    ladder: str | None = None,
    player: str | None = None,
    from_beginning: bool = False,
    idle_timeout: float | None = None,
    on_bad: Callable[[str, str], None] = lambda where, reason: None,
    on_progress: Callable[[str], None] = lambda what: None,
) -> AsyncIterator[dict[str, Any]]:
    """Rating-changed events as dicts, optionally only one ladder's or one player's.

    Reads every partition of the updates topic without a consumer group (never taking another
    subscriber's partitions nor waiting for a join), telling ``on_progress`` when it waits for
    them and when it reads them. Stops after `idle_timeout` seconds without a message; a record
    that is not a JSON object goes to ``on_bad(topic[partition]@offset, reason)``, and the
    records after it are still read.
    """
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        enable_auto_commit=False,
        group_id=None,
        isolation_level=ISOLATION_LEVEL,
        auto_offset_reset="earliest" if from_beginning else "latest",  # as the seek below: see LogReader
    )
    try:
        await consumer.start()  # a failed start is stopped too (else aiokafka warns at exit)
        topic = settings.topic_updates
        on_progress(f"connected; waiting for the partitions of {topic}")
        partitions = await topic_partitions(consumer, topic)
        consumer.assign(partitions)
        if from_beginning:
            await consumer.seek_to_beginning(*partitions)
        else:
            await consumer.seek_to_end(*partitions)
        numbers = ",".join(str(tp.partition) for tp in partitions)
        start = "the oldest retained event" if from_beginning else "now on"
        on_progress(f"reading {topic} partitions {numbers} from {start}; waiting for events")
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
                    event = _event(record, on_bad)
                    if event is None or (player and event.get("player_id") != player):
                        continue
                    yield event
    finally:
        await consumer.stop()


def _event(record: Any, on_bad: Callable[[str, str], None]) -> dict[str, Any] | None:
    """`record`'s value as a JSON object; else None, telling ``on_bad(topic[partition]@offset, why)``."""
    try:
        event = json.loads(record.value or b"")
        if not isinstance(event, dict):
            raise ValueError(f"a JSON {type(event).__name__}, not an object")
    except ValueError as exc:
        on_bad(f"{record.topic}[{record.partition}]@{record.offset}", str(exc))
        return None
    return event


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
    """Reads `topic` (only its `partitions`, if given) from `start` (default: the earliest
    retained offset; a partition `start` lacks: its earliest) with one consumer
    kept open: each `read` returns the records appended since the previous one, up to at
    least the log's end when called, in (partition, offset) order. Use as ``async with``.

    Fetched batches are kept whole: some Kafka-protocol brokers (Tansu) report the log's end
    as the last batch's base offset + 1, so "up to the end" means "through the batch that
    holds the reported end". It reads committed records only (`ISOLATION_LEVEL`): the end is
    the last stable offset (a transaction still open is not waited for), and reading a
    partition's transaction markers and aborted records moves its position without a record.

    The consumer's own offset reset is "earliest" too: aiokafka (0.14) starts a reset of each
    assigned partition by that strategy and applies its answer even when a `seek_to_beginning`
    came meanwhile, so a "latest" one could skip a whole partition (seen on a 3-node Kafka).
    """

    def __init__(
        self,
        settings: Settings,
        topic: str,
        start: Mapping[int, int] | None = None,
        partitions: Iterable[int] | None = None,
    ) -> None:
        self.topic, self._start = topic, dict(start) if start is not None else None
        self._only = None if partitions is None else set(partitions)
        self._consumer = AIOKafkaConsumer(
            **client_options(settings),
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=READ_FETCH_WAIT_MS,
            isolation_level=ISOLATION_LEVEL,
        )
        self._partitions: list[TopicPartition] = []

    async def __aenter__(self) -> LogReader:
        try:
            await self._consumer.start()
            self._partitions = [
                tp
                for tp in await topic_partitions(self._consumer, self.topic)
                if self._only is None or tp.partition in self._only
            ]
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
        consumer = self._consumer
        ends = await consumer.end_offsets(self._partitions)
        pending = {tp for tp in self._partitions if await consumer.position(tp) < ends[tp]}
        out: list[LogRecord] = []

        async def drained() -> bool:
            nonlocal pending
            if pending:
                for tp, records in (await consumer.getmany(*pending, timeout_ms=1000)).items():
                    out.extend(
                        LogRecord(
                            tp.partition, r.offset, r.timestamp, r.key, r.value or b"", tuple(r.headers or ())
                        )
                        for r in records
                    )
                pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
            return not pending

        await wait_until_async(drained, f"the end of {self.topic!r}", timeout, interval=0)
        out.sort(key=lambda r: (r.partition, r.offset))
        return out

    def partitions(self) -> list[int]:
        """The topic's partitions."""
        return [tp.partition for tp in self._partitions]

    async def reached(self) -> dict[int, int]:
        """Partition → the offset the next read starts at."""
        return {tp.partition: await self._consumer.position(tp) for tp in self._partitions}


async def read_log(
    settings: Settings,
    topic: str,
    start: Mapping[int, int] | None = None,
    timeout: float = 300.0,
    partitions: Iterable[int] | None = None,
) -> tuple[list[LogRecord], dict[int, int]]:
    """The records of `topic` (of its `partitions`, if given) from `start` (default: the
    earliest retained offset) up to at least the log's end when called (see `LogReader`), and
    the offset reached per partition (where a later read goes on). Raises `TimeoutError`
    after `timeout` seconds."""
    async with LogReader(settings, topic, start, partitions) as reader:
        return await reader.read(timeout), await reader.reached()


async def read_partition(
    settings: Settings, topic: str, partition: int, start: int, end: int, timeout: float = 60.0
) -> list[LogRecord]:
    """The records of one partition of `topic` at offsets ``start <= offset < end`` (from the
    earliest retained one if `start` is gone), in offset order; fewer if the log ends before
    `end`. Raises `TimeoutError` after `timeout` seconds."""
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=READ_FETCH_WAIT_MS,
    )
    out: list[LogRecord] = []
    try:
        await consumer.start()  # a failed start is stopped too (else aiokafka warns at exit)
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        log_end: int = (await consumer.end_offsets([tp]))[tp]
        stop = min(end, log_end)

        async def reached() -> bool:
            if await consumer.position(tp) >= stop:
                return True
            for records in (await consumer.getmany(tp, timeout_ms=1000)).values():
                out.extend(
                    LogRecord(partition, r.offset, r.timestamp, r.key, r.value or b"", tuple(r.headers or ()))
                    for r in records
                    if r.offset < end
                )
            return bool(await consumer.position(tp) >= stop)

        await wait_until_async(reached, f"offset {stop} of {topic}[{partition}]", timeout, interval=0)
    finally:
        await consumer.stop()
    return out
