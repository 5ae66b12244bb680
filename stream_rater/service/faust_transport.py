"""faust's aiokafka transport with a fetch loop that guards each fetched batch, not each
message, delivers a chosen topic's records to a `BatchBuffer` a fetched batch at a time, and
has a configurable fetch wait.

faust-streaming's ``Consumer._drain_messages`` hands every fetched record to the conductor
inside ``wait_first(callback(message), suspend_flow.wait())``: four tasks and an
``asyncio.wait`` per message, so that a delivery blocked on a full stream buffer is abandoned
when a rebalance suspends the flow. Measured here with a consume-and-ack agent (noack_take,
no other work): about 145 µs of CPU per message with that loop, 71 µs with the guard around
the whole fetched batch instead (then the largest single cost on the worker's path).

Abandoning the rest of a batch on suspension is as safe as abandoning one message: nothing
abandoned was acknowledged, and faust's ``getmany`` seeks back to the committed offsets
before it fetches again while the flow is suspended. Everything else (read offsets, gaps,
``broker_commit_every``, periodic yields to the event loop, stop handling) is faust's loop.

Records of a topic with a `BatchBuffer` (`App.batch_buffers`) skip faust's per-message path
altogether — conductor callback, event, stream, per-event ack: 37 % of the worker's CPU
(py-spy, GIL-holding samples, on the ``stream-rater bench e2e`` load). Each fetched batch of such
a topic is put in its buffer in one step; the agent takes its batches from there, tracks and
acknowledges the records itself (`BatchBuffer.take`, `BatchBuffer.ack`) and faust commits
the acknowledged offsets as usual. The buffer is cleared with faust's stream buffers when a
rebalance suspends the flow, and records taken but not acknowledged hold the rebalance back
as faust's stream events do (``Consumer.wait_empty``).

faust reads ``read_uncommitted`` unless it runs exactly-once itself; the consumer here reads
``read_committed`` (`kafka.ISOLATION_LEVEL`). Transaction markers occupy offsets and aborted records
are skipped: both are offset jumps `_in_sequence` and `_find_dropped` take for gaps after one
re-read.

faust also fixes the consumer's ``fetch_max_wait_ms`` at 1500. A broker may hold a fetch that
found nothing that long, which set the p50 latency at 500/s to about 0.5 s; `App.fetch_max_wait`
sets it. faust runs that consumer in a thread of its own, so a fetched batch waits for the GIL
(on the fetch response, then on the hand-over to the agent's loop) whenever the agent computes:
up to Python's switch interval each time, 5 ms unless `App.switch_interval` says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, cast

import faust
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, AppT, Message
from faust.types.transports import TransportT

from stream_rater.kafka import ISOLATION_LEVEL
from stream_rater.service import metrics
from stream_rater.service.order_watch import Message as Consumed

#: Records delivered between two yields to the event loop (faust's own value).
YIELD_EVERY = 100

#: Seconds between two looks for records fetched but never delivered (`_find_dropped`).
DROPPED_CHECK_INTERVAL = 1.0

#: What aiokafka raises while unpacking a fetched record batch it cannot decode: a codec it has
#: no library for, or a batch whose CRC does not match (corrupt on disk or on the wire).
UNDECODABLE = (UnsupportedCodecError, CorruptRecordException)

#: Seconds between fetches when an undecodable batch's partition cannot be told.
UNDECODABLE_BACKOFF = 5.0

#: What `BatchGuardConsumer._in_sequence` says of a buffered record.
DELIVER, SKIP, REWOUND = "deliver", "skip", "rewound"


class BatchGuardConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer; only the fetch loop differs (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Buffered partition → offset of the next record to deliver (see `_in_sequence`).
        self._next_offset: dict[TP, int] = {}
        #: Buffered partition → the offset its last jump went to.
        self._jumped: dict[TP, int] = {}
        self._check_dropped_at = 0.0

    async def _drain_messages(self, fetcher: Any) -> None:
        try:
            while not (self._stopped.is_set() or fetcher._stopped.is_set()):
                self.diag.set_flag(CONSUMER_FETCHING)
                records = self.getmany(timeout=1.0)
                await self.sleep(0)
                if not self.should_stop:
                    try:
                        await self.wait_first(self._deliver(records), self.suspend_flow.wait())
                    except UNDECODABLE as exc:
                        await self._hold_undecodable(exc)
                if self.flow_active and time.monotonic() >= self._check_dropped_at:
                    self._check_dropped_at = time.monotonic() + DROPPED_CHECK_INTERVAL
                    await self._find_dropped()
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _hold_undecodable(self, exc: Exception) -> None:
        """Hold the partition whose fetched batch aiokafka cannot decode; the others go on.

        aiokafka raises `UNDECODABLE` errors from the fetch itself, before any record of the
        batch exists, and fetches the same batch again from the same position: raised on,
        the worker crashed and crash-looped on that offset. The partition is paused instead,
        its position left before the batch, and `App.held` names it (``/readyz`` answers 503
        with the reason) until a restart or a rebalance tries again. Records of other
        partitions fetched in the same call and dropped with it are re-read (`_find_dropped`).
        """
        tp = self._undecodable_partition()
        where = "a partition" if tp is None else f"{tp.topic}[{tp.partition}]@{await self.position(tp)}"
        reason = f"{where}: a fetched record batch cannot be decoded ({exc}); that partition is held"
        self.log.error("%s", reason)
        if tp is None:  # not found: back off, as a crash loop would, but without the crash
            await asyncio.sleep(UNDECODABLE_BACKOFF)
            return
        self.pause_partitions([tp])
        held = _our_app(self.app).held
        held[tp] = reason
        metrics.PARTITIONS_HELD.set(len(held))

    def _undecodable_partition(self) -> TP | None:
        """The partition of the fetched batch whose decoding just failed: the one whose
        buffered fetch result's record generator ended in an exception."""
        fetcher = self._thread._ensure_consumer()._fetcher
        for tp, result in list(fetcher._records.items()):
            iterator = getattr(getattr(result, "_partition_records", None), "_records_iterator", None)
            if inspect.isgenerator(iterator) and inspect.getgeneratorstate(iterator) == inspect.GEN_CLOSED:
                return TP(tp.topic, tp.partition)
        return None

    async def _in_sequence(self, tp: TP, offset: int) -> str:
        """`DELIVER` a buffered topic's record at `offset` if it is the next one of its
        partition, `SKIP` it if it was delivered already, or seek back (`REWOUND`).

        faust treats a jump in a partition's offsets as a gap and counts the offsets in it as
        acknowledged. That is right for offsets that hold no record (compaction, transaction
        markers) and loses records that were fetched but never delivered — a fetch cut short
        by a rebalance (faust's ``getmany`` stops at a generation change) followed by a fetch
        from the advanced position. Measured with two workers and kill -9 before this check:
        ~700 matches committed unapplied per incident. So a buffered partition is delivered
        strictly in sequence from the position faust last sought: an earlier offset was
        delivered already (skipped), a later one makes the partition re-read from the
        expected offset, and only a jump to the same offset twice in a row is a real gap.
        """
        expected = self._next_offset.get(tp)
        if expected is None or offset == expected:
            self._next_offset[tp] = offset + 1
            self._jumped.pop(tp, None)
            return DELIVER
        if offset < expected:
            return SKIP
        if self._jumped.get(tp) == offset:
            await self._add_gap(tp, expected, offset)
            self._next_offset[tp] = offset + 1
            return DELIVER
        self._jumped[tp] = offset
        self.log.warning(
            "offsets of %s jumped from %d to %d; re-reading from %d", tp, expected, offset, expected
        )
        await self.seek(tp, expected)
        return REWOUND

    async def _find_dropped(self) -> None:
        """Re-read a buffered partition whose position passed records never delivered.

        faust's ``getmany`` stops handing out a fetched batch when the consumer generation
        changes mid-batch, and what it fetched but did not hand out is behind the position.
        `_in_sequence` notices when a later record arrives; this notices it when none does
        (the partition went quiet). Before this check the kill -9 test stalled in 2 of 5 runs
        on this machine: a partition 704 records short, its position at the log's end, until
        the next rebalance. Finding the same offsets missing twice in a row is a real gap
        (offsets without records at the log's end), counted as faust counts gaps.
        """
        buffers = _our_app(self.app).batch_buffers
        for tp in self.assignment():
            expected = self._next_offset.get(tp)
            if tp.topic not in buffers or expected is None:
                continue
            position = await self.position(tp)
            moved = not self.flow_active or self._next_offset.get(tp) != expected  # a rebalance seeks itself
            if position is None or position <= expected or moved:
                continue
            if self._jumped.get(tp) == position:
                await self._add_gap(tp, expected, position - 1)
                self._next_offset[tp] = position
                continue
            self._jumped[tp] = position
            self.log.warning(
                "%s: offsets %d to %d were fetched but never delivered; re-reading from %d",
                tp,
                expected,
                position - 1,
                expected,
            )
            await self.seek(tp, expected)

    async def seek(self, partition: TP, offset: int) -> None:
        """faust's seek; the partition's next delivered record must be at `offset`."""
        await super().seek(partition, offset)
        self._next_offset[partition] = offset

    async def perform_seek(self) -> None:
        """faust's seek to the committed offsets (a rebalance, or records fetched while the flow
        stopped): each partition with a committed offset goes on from there, and a buffered
        topic's partition with none from its log's start (`_rewind_uncommitted`)."""
        await super().perform_seek()
        self._next_offset = {
            tp: offset for tp, offset in self._committed_offset.items() if offset is not None
        }
        self._jumped.clear()
        await self._rewind_uncommitted()

    async def _rewind_uncommitted(self) -> None:
        """Seek each assigned partition of a buffered topic that has no committed offset to the
        start of its log, as the group's ``earliest`` reset reads it.

        faust's seek leaves such a partition where it is (aiokafka's ``seek_to_committed`` skips
        a partition without a committed offset), so whatever was fetched from it and dropped
        before the seek — records cleared from the buffer by the rebalance, or handed out by
        aiokafka while faust had the partition paused or the flow stopped — lay behind its
        position, and nothing delivered since said where it should be (`_find_dropped` had no
        offset to compare with). A partition whose first fetch was dropped so was never read:
        a worker alive, the partition assigned, and its whole ladder never applied. Reading
        from the start again applies nothing twice: what was applied is found applied."""
        buffers = _our_app(self.app).batch_buffers
        uncommitted = [tp for tp in self.assignment() if tp.topic in buffers and tp not in self._next_offset]
        if uncommitted:
            for tp, start in (await self.earliest_offsets(*uncommitted)).items():
                await self.seek(tp, start)

    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _deliver(self, records: AsyncIterator[tuple[TP, Any]]) -> None:
        """Hand one fetched batch on: records of a topic with a `BatchBuffer` to the buffer in
        one step, any other record to the conductor, message by message, as faust does."""
        read_offset = self._read_offset
        buffers = _our_app(self.app).batch_buffers
        batched: dict[str, list[Message]] = {}
        rewound: set[TP] = set()
        since_yield = 0
        async for tp, message in records:
            since_yield += 1
            if since_yield > YIELD_EVERY:
                await asyncio.sleep(0)
                since_yield = 0
            offset = message.offset
            if tp.topic in buffers:
                if tp in rewound:
                    continue
                if self._next_offset.get(tp) == offset and tp not in self._jumped:
                    self._next_offset[tp] = offset + 1  # `_in_sequence`'s usual case, without a coroutine
                elif (verdict := await self._in_sequence(tp, offset)) is not DELIVER:
                    if verdict is REWOUND:
                        rewound.add(tp)
                    continue
            else:
                last_read = read_offset[tp]
                if last_read is not None and offset < last_read:
                    continue
                if last_read and offset - last_read > 1 and self.app.topics.acks_enabled_for(message.topic):
                    await self._add_gap(tp, last_read + 1, offset)
            if self._commit_every is not None and self._n_acked >= self._commit_every:
                self._n_acked = 0
                await self.commit()
            if tp.topic in buffers:
                batched.setdefault(tp.topic, []).append(message)
            else:
                await self.callback(message)
            read_offset[tp] = offset
        for topic, messages in batched.items():
            await buffers[topic].put(messages)


def aiokafka_producer(app: faust.App) -> AIOKafkaProducer:
    """The aiokafka producer inside faust's (started, flushed and stopped with the app).

    faust's Producer only offers per-record sends and no metadata request; the worker sends
    whole batches (`kafka.send_batched`) and readiness asks the broker for metadata."""
    return cast(faust_aiokafka.Producer, app.producer)._ensure_producer()


async def broker_answers(app: faust.App, timeout: float) -> bool:
    """True when the broker answers a metadata request within `timeout` seconds."""
    try:
        await asyncio.wait_for(aiokafka_producer(app).client.fetch_all_metadata(), timeout)
    except Exception:
        return False
    return True


class BatchBuffer:
    """One topic's fetched records on their way to the agent that takes them in batches.

    Holds at most `maxsize` records (the fetch loop waits while it is full) and is cleared
    with faust's stream buffers when a rebalance suspends the flow: records not yet taken
    were not acknowledged, and the partition's next owner reads them again. The agent may
    `pause` and `resume` fetching partitions of `topic`, and `release` records it took but
    drops unacknowledged; `on_clear` callbacks run when the buffer is cleared (a rebalance),
    before faust waits for the records taken to be acknowledged.
    """

    def __init__(self, app: faust.App, maxsize: int, topic: str = "") -> None:
        self.app = app
        self.maxsize = maxsize
        self.topic = topic
        self.on_clear: list[Callable[[], None]] = []
        self._records: deque[Message] = deque()
        self._added = asyncio.Event()
        self._removed = asyncio.Event()
        app.flow_control.manage_queue(self)  # type: ignore[arg-type]  # faust only calls clear()

    def in_flight(self) -> list[str]:
        """The records fetched and not yet taken, for the operator's dump (`wait_dump`)."""
        return [f"buffer {self.topic}: {len(self._records)} records not taken"]

    def clear(self) -> None:
        """Drop every record not taken yet (faust's flow control calls this), then tell
        `on_clear`."""
        self._records.clear()
        self._removed.set()
        for callback in self.on_clear:
            callback()

    def pause(self, partitions: Iterable[int]) -> None:
        """Fetch nothing more of `partitions` (of `topic`) until `resume` or a rebalance."""
        self.app.consumer.pause_partitions({TP(self.topic, p) for p in partitions})

    def resume(self, partitions: Iterable[int]) -> None:
        """Fetch `partitions` (of `topic`) again."""
        self.app.consumer.resume_partitions({TP(self.topic, p) for p in partitions})

    def release(self, messages: Sequence[Consumed]) -> None:
        """Stop tracking records `take` returned that are dropped unacknowledged (a rebalance:
        the partition's next owner reads them again), so that they hold no rebalance back."""
        unacked = self.app.consumer.unacked
        for message in messages:
            unacked.discard(cast(Message, message))

    async def put(self, messages: list[Message]) -> None:
        """Add fetched records, waiting while the flow is suspended or the buffer is full."""
        while True:
            await self.app.flow_control.acquire()
            if len(self._records) < self.maxsize:
                break
            self._removed.clear()
            await self._removed.wait()
        self._records.extend(messages)
        self._added.set()

    async def take(
        self, max_records: int, within: float, ready: asyncio.Future[Any] | None = None
    ) -> list[Message]:
        """Up to `max_records` records: waits for the first, then for more until there are
        `max_records`, `within` seconds have passed, or `ready` is done — at once if it is
        already done (the caller has nothing in hand: a record goes on without waiting for
        company, and batches grow only while the caller is busy). Records of an earlier
        consumer generation are dropped unacknowledged; the others are tracked until `ack`,
        like the records of faust's stream events."""
        records = self._records
        while True:
            while not records:
                self._added.clear()
                await self._added.wait()
            if ready is None or not ready.done():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(within):
                        await self._fill(max_records, ready)
            if records:  # unless a rebalance cleared the buffer meanwhile
                break
        taken = [records.popleft() for _ in range(min(max_records, len(records)))]
        self._removed.set()
        generation = self.app.consumer_generation_id
        taken = [m for m in taken if m.generation_id == generation]
        unacked = self.app.consumer.unacked
        for message in taken:
            message.tracked = True
            unacked.add(message)
        return taken

    async def _fill(self, max_records: int, ready: asyncio.Future[Any] | None) -> None:
        """Wait until the buffer holds `max_records` or `ready` is done: `ready` wakes the
        wait for records as a `put` does (one future per wait, not a task and an
        ``asyncio.wait`` per record arriving)."""
        if ready is not None:
            ready.add_done_callback(self._wake)
        try:
            while len(self._records) < max_records and not (ready is not None and ready.done()):
                self._added.clear()
                await self._added.wait()
        finally:
            if ready is not None:
                ready.remove_done_callback(self._wake)

    def _wake(self, _: object) -> None:
        self._added.set()

    def ack(self, messages: Sequence[Consumed]) -> None:
        """Acknowledge processed records (ones `take` returned); faust commits their offsets."""
        ack = self.app.consumer.ack
        for message in cast(Sequence[Message], messages):
            ack(message)


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """faust's consumer thread; its aiokafka consumer waits at most ``app.fetch_max_wait`` and
    reads committed records only (`kafka.ISOLATION_LEVEL`, as the offline readers). Creating it
    sets the process's switch interval to ``app.switch_interval`` (see `App.switch_interval`)."""

    def _create_worker_consumer(self, transport: faust_aiokafka.Transport) -> AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        app = _our_app(self.app)
        # Both read when the consumer starts; faust passes no value of its own through (its
        # isolation level is read_committed only when faust itself runs exactly-once).
        consumer._fetch_max_wait_ms = int(1000 * app.fetch_max_wait)
        consumer._isolation_level = ISOLATION_LEVEL
        sys.setswitchinterval(app.switch_interval)
        return consumer


class Transport(faust_aiokafka.Transport):
    """faust's aiokafka transport with `BatchGuardConsumer`."""

    Consumer = BatchGuardConsumer


class App(faust.App):
    """A faust app whose consumer uses `Transport` and delivers the topics in `batch_buffers`
    to their buffers; everything else is faust's."""

    #: Longest time, in seconds, the broker may hold a fetch that found no new records.
    fetch_max_wait: float = 1.5
    #: Longest time, in seconds, a thread keeps the GIL while another waits for it
    #: (`sys.setswitchinterval`). This consumer's fetches run in a thread of their own: a
    #: fetched batch waits up to this long for the GIL, twice (the fetch response, then the
    #: hand-over to the agent's loop), whenever the agent is computing.
    switch_interval: float = 0.005

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Topic name → the buffer its records are delivered to, a fetched batch at a time.
        self.batch_buffers: dict[str, BatchBuffer] = {}
        #: Partition → why it is held (a fetched batch that cannot be decoded; `held_partitions`).
        self.held: dict[TP, str] = {}
        #: What the worker's SIGUSR1 dump lists besides the tasks (`service.wait_dump`).
        self.in_flight: list[Callable[[], Iterable[str]]] = []
        #: Why partitions assigned here are stalled (`service.stall_watch`; readiness says so).
        self.stalled: Callable[[], list[str]] = list

    def _new_transport(self) -> TransportT:
        return Transport(self.conf.broker_consumer, self)


def held_partitions(app: faust.App) -> list[str]:
    """Why each partition still assigned here is held, in partition order (readiness says so)."""
    held = _our_app(app).held
    assigned = app.consumer.assignment() if held else set()
    return [reason for tp, reason in sorted(held.items()) if tp in assigned]


def stalled_partitions(app: faust.App) -> list[str]:
    """Why each partition assigned here is stalled (`App.stalled`; readiness says so)."""
    return _our_app(app).stalled()


def _our_app(app: AppT) -> App:
    """`app` as the `App` it is (faust's types say any app)."""
    return cast(App, app)
