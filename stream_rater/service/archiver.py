"""``stream-rater archive``: the consumer that writes every record of the updates topic into the
PostgreSQL archive (`stream_rater.archive`), and the placings of every rated match of the
matches topic (what `explain` fills ``actual`` from once a match's marker expired).

Why a plain aiokafka consumer (not a faust agent): the archive needs only "fetch a batch, write
it, then commit its offsets", one loop with no tables, no repartitioning and no producer, and
it must control exactly when offsets are committed — after PostgreSQL committed. Its consumer
group (``--group``, default ``stream-rater-archive``) is its own, so it never takes partitions
from the workers and reads every event they produce, from the earliest retained one the first
time. The matches topic is read by the same consumer (one group, both topics): its records are
decoded and validated as the worker does (the ladders file and limits of the settings), and a
batch's placings are written in the same transaction as its events, before its offsets are
committed. A match record the worker dead-letters (undecodable or invalid) has no events and
no placings: it is logged, counted (``stream_rater_archive_invalid_matches_total``) and
skipped; a season start or a match declared unrated has none either.

Faults: a batch PostgreSQL does not take (down, restarting, read-only, out of disk, privileges)
is held — its offsets uncommitted, no later batch fetched — and written again with exponential
backoff (0.1 s doubling to ``max_backoff``), on a new connection each time, until PostgreSQL
takes it; nothing is lost or skipped. Held longer than the consumer's poll interval, the
consumer leaves its group; the held batch's offset commit then fails and its records come
again after the rejoin: idempotent writes make that harmless. A record that is not a
rating-changed event (undecodable, invalid, or a value PostgreSQL cannot store such as a NUL
character) is logged, counted (``stream_rater_archive_poison_records_total``) and skipped.

Metrics on ``--metrics-port`` (``/metrics``): events written and already there, write failures
by reason, poison records, the lag (records behind the topic's end, summed over the
partitions this process holds) and whether a batch is held.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import Counter, Gauge

from stream_rater.archive import (
    ArchivedEvent,
    ArchivedPlacings,
    PoisonRecord,
    archived_event,
    archived_placings,
    migrate,
    write_batch,
)
from stream_rater.archive.reader import one_line
from stream_rater.config.ladders import Ladders, load_ladders
from stream_rater.config.settings import ARCHIVE_GROUP, Settings
from stream_rater.kafka.log import ISOLATION_LEVEL
from stream_rater.kafka.security import client_options, group_options

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)


WRITTEN = Counter("stream_rater_archive_events_written", "Rating-changed events newly written to the archive")
DUPLICATES = Counter(
    "stream_rater_archive_events_duplicate", "Events read again that the archive had already (redelivery)"
)
FAILURES = Counter(
    "stream_rater_archive_write_failures",
    "Batch writes PostgreSQL did not take (the batch is held and retried), by reason (SQLSTATE class or error)",
    ["reason"],
)
POISON = Counter(
    "stream_rater_archive_poison_records",
    "Records of the updates topic that are not rating-changed events (logged and skipped)",
)
INVALID_MATCHES = Counter(
    "stream_rater_archive_invalid_matches",
    "Records of the matches topic the worker dead-letters (undecodable or invalid; skipped, no placings)",
)
LAG = Gauge(
    "stream_rater_archive_lag",
    "Records of the updates topic not yet archived, summed over the held partitions",
)
HOLDING = Gauge("stream_rater_archive_holding", "1 while a batch is held because PostgreSQL does not take it")
BATCH_SECONDS = Gauge("stream_rater_archive_last_batch_seconds", "Seconds the last batch write took")


@dataclass(frozen=True)
class ArchiveOptions:
    """How the archive consumes and retries."""

    group: str = ARCHIVE_GROUP
    batch_size: int = 2000
    fetch_wait: float = 0.2
    max_backoff: float = 5.0
    connect_timeout: float = 5.0


class Archiver:
    """The archive loop of one process; `run` until `stop` is set."""

    def __init__(
        self,
        settings: Settings,
        url: str,
        options: ArchiveOptions = ArchiveOptions(),
        ladders: Ladders | None = None,
    ) -> None:
        """`url`: the archive's ``postgresql://`` URL; the topics are ``settings.topic_updates``
        and ``settings.topic_matches``, whose records are validated with `ladders` (default: the
        settings' ladders file and environment) and ``settings.limits()``, as the worker does."""
        self.settings, self.url, self.options = settings, url, options
        self.topic = settings.topic_updates
        self.ladders = ladders or load_ladders(settings.ladders_file or None, os.environ)
        self.limits = settings.limits()
        self.stop = asyncio.Event()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lag_from: dict[TopicPartition, int] = {}

    async def run(self) -> None:
        """Migrate (waiting for PostgreSQL), then archive batch after batch until `stop`."""
        await self._with_retry(self._migrate, "migrate")
        consumer = AIOKafkaConsumer(
            **client_options(self.settings),
            group_id=self.options.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=ISOLATION_LEVEL,
            max_poll_records=self.options.batch_size,
            **group_options(self.settings),
        )
        try:
            await consumer.start()
            consumer.subscribe([self.topic, self.settings.topic_matches])
            while not self.stop.is_set():
                await self._one_batch(consumer)
        finally:
            await consumer.stop()
            await self._close()

    async def _one_batch(self, consumer: AIOKafkaConsumer) -> None:
        """Fetch, write (held until PostgreSQL takes it), then commit the batch's offsets."""
        fetched = await consumer.getmany(
            timeout_ms=int(self.options.fetch_wait * 1000), max_records=self.options.batch_size
        )
        events, placings, ends = self._decode(fetched)
        self._lag_from = {tp: records[0].offset for tp, records in fetched.items() if records}
        await self._set_lag(consumer, refresh=False)
        if not ends:
            return
        if (events or placings) and not await self._with_retry(
            lambda: self._write(events, placings), "write", consumer
        ):
            return  # told to stop while held: nothing committed, the batch comes again
        try:
            await consumer.commit(ends)
        except KafkaError as exc:  # a rebalance took the partitions: their next owner reads them again
            log.warning("archive: offset commit failed (%s); the batch will be read again, harmlessly", exc)
        self._lag_from = {}
        await self._set_lag(consumer, refresh=False)

    def _decode(
        self, fetched: dict[TopicPartition, Sequence[Any]]
    ) -> tuple[list[ArchivedEvent], list[ArchivedPlacings], dict[TopicPartition, int]]:
        """The batch's events and matches' placings (poison records and invalid matches
        counted and skipped) and, per partition, the offset to commit after it."""
        events: list[ArchivedEvent] = []
        placings: list[ArchivedPlacings] = []
        ends: dict[TopicPartition, int] = {}
        for tp, records in fetched.items():
            matches = tp.topic == self.settings.topic_matches
            for record in records:
                try:
                    if not matches:
                        events.append(archived_event(record.value, tp.topic, tp.partition, record.offset))
                    elif found := self._placings(tp, record):
                        placings.append(found)
                except PoisonRecord as exc:
                    (INVALID_MATCHES if matches else POISON).inc()
                    log.error("archive: skipping %s[%d]@%d: %s", tp.topic, tp.partition, record.offset, exc)
            if records:
                ends[tp] = records[-1].offset + 1
        return events, placings, ends

    def _placings(self, tp: TopicPartition, record: Any) -> ArchivedPlacings | None:
        """A match record's placings, validated as the worker validates it (`archived_placings`)."""
        at = None if record.timestamp is None else record.timestamp / 1000.0
        where = (tp.topic, tp.partition, record.offset, at)
        return archived_placings(record.value, self.ladders, self.limits, where)

    async def _write(self, events: list[ArchivedEvent], placings: list[ArchivedPlacings]) -> None:
        """Write `events` and `placings` in one transaction; on a value PostgreSQL cannot
        store, one by one, the refused ones counted as poison."""
        import psycopg

        conn = await self._connection()
        try:
            written = await write_batch(conn, events, placings)
        except psycopg.DataError:
            written = await self._write_one_by_one(conn, [*events, *placings])
        WRITTEN.inc(written)
        DUPLICATES.inc(len(events) - written)

    async def _write_one_by_one(
        self, conn: psycopg.AsyncConnection[Any], items: list[ArchivedEvent | ArchivedPlacings]
    ) -> int:
        """Write each event or match's placings in its own transaction; one PostgreSQL refuses
        as data is poison. The count of events newly written."""
        import psycopg

        written = 0
        for item in items:
            try:
                if isinstance(item, ArchivedEvent):
                    written += await write_batch(conn, [item])
                else:
                    await write_batch(conn, [], [item])
            except psycopg.DataError as exc:
                (POISON if isinstance(item, ArchivedEvent) else INVALID_MATCHES).inc()
                log.error("archive: skipping %s[%d]@%d: %s", item.topic, item.partition, item.offset, exc)
        return written

    async def _with_retry(self, attempt: Any, what: str, consumer: AIOKafkaConsumer | None = None) -> bool:
        """Run ``attempt()`` until it succeeds (True) or `stop` is set (False), with backoff;
        each failure is logged and counted, and drops the connection."""
        import psycopg

        delay, failed = 0.1, 0
        while not self.stop.is_set():
            try:
                await attempt()
                HOLDING.set(0)
                if failed:
                    log.warning("archive: %s succeeded after %d failed attempts", what, failed)
                return True
            except (psycopg.Error, OSError) as exc:
                failed += 1
                HOLDING.set(1)
                FAILURES.labels(_reason(exc)).inc()
                log.warning(
                    "archive: %s failed (%s), retrying in %.1f s",
                    what,
                    one_line(exc),
                    delay,
                )
                await self._close()
            if consumer is not None:
                await self._set_lag(consumer, refresh=True)
            try:
                await asyncio.wait_for(self.stop.wait(), delay * random.uniform(0.8, 1.2))
            except TimeoutError:
                pass
            delay = min(self.options.max_backoff, delay * 2)
        return False

    async def _migrate(self) -> None:
        """Apply the schema's missing migrations."""
        applied = await migrate(await self._connection())
        if applied:
            log.info("archive: applied migrations %s", applied)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        """The open connection, or a new one."""
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=max(1, int(self.options.connect_timeout))
            )
        return self._conn

    async def _close(self) -> None:
        """Close the connection (the next attempt opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    async def _set_lag(self, consumer: AIOKafkaConsumer, *, refresh: bool) -> None:
        """The lag gauge: per held partition, its end (the last fetch's high watermark, or asked
        of the broker with `refresh`) minus the first record not yet archived."""
        held = consumer.assignment()
        if not held:
            LAG.set(0)
            return
        ends: dict[TopicPartition, int | None]
        try:
            ends = (
                dict(await consumer.end_offsets(list(held)))
                if refresh
                else {tp: consumer.highwater(tp) for tp in held}
            )
            total = 0
            for tp in held:
                end = ends.get(tp)
                if end is None:
                    continue
                start = self._lag_from.get(tp)
                if start is None:
                    start = await consumer.position(tp)
                total += max(0, end - start)
        except KafkaError:
            return  # keep the last value while the broker does not answer
        LAG.set(total)


def _reason(exc: BaseException) -> str:
    """A failure's metric label: PostgreSQL's SQLSTATE class (``08`` connection, ``25``
    read-only transaction, ``53`` insufficient resources, ``42`` privileges, ``57`` shutdown),
    or the exception's type."""
    sqlstate = getattr(exc, "sqlstate", None)
    return f"sqlstate_{sqlstate[:2]}" if sqlstate else type(exc).__name__
