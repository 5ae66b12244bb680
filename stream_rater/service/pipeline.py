"""One batch of consumed match events → validated, applied, produced, then acknowledged.

`BatchHandler` is what the faust agent calls for every batch it takes. Its order
is the correctness model's: decode + validate (invalid → dead-letter topic) → processor
(Redis commit) → produce rating-changed events and dead letters, wait for the broker →
only then acknowledge. A Redis or broker error is retried with backoff until it succeeds or
the worker stops; the batch is then left unacknowledged and Kafka redelivers it, which the
processor's idempotency makes harmless. `BatchPipeline` runs consecutive batches through the
handler overlapped, keeping that order per batch and between batches; a ladder the store lost
holds only the partition it is on (`BatchPipeline`, parking).
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import Limits, MatchFinished, ValidationError
from stream_rater.contracts.codecs import DecodeError, decode_match
from stream_rater.kafka import Record, update_record
from stream_rater.processor import (
    BatchResult,
    Processor,
    StoreLost,
    TooManyConflicts,
    Unratable,
    is_late,
    process_skipping,
)
from stream_rater.service import metrics
from stream_rater.service.order_watch import Message, OrderWatch
from stream_rater.store.status import server_refusal
from stream_rater.waiting import backoff

if TYPE_CHECKING:
    from stream_rater.service.store_loss import LossGuard

log = logging.getLogger(__name__)
_T = TypeVar("_T")


#: A dead letter on its way: the consumed record, the reason, extra headers.
DeadLetter = tuple[Message, str, list[tuple[str, bytes]]]


#: send(records) returns when the broker has every (topic, key, value, headers) record.
Send = Callable[[list[Record]], Awaitable[None]]


@dataclass(frozen=True)
class Topics:
    """Names of the output topics."""

    updates: str = "rating-updates"
    dlq: str = "matches-dlq"


@dataclass(frozen=True)
class CommittedBatch:
    """A batch after phase 1 (`BatchHandler.commit`): `messages` applied, not yet produced;
    `parked` the records of partitions held because a ladder on them is lost (narrowed
    commits only), neither applied nor to be acknowledged with this batch."""

    messages: Sequence[Message]
    result: BatchResult
    dead: list[DeadLetter]
    started: float
    parked: Sequence[Message] = ()


class LadderHeld(Exception):
    """A narrowed commit found `ladder` lost (`StoreLost`): its partition is to be parked."""

    def __init__(self, lost: StoreLost) -> None:
        super().__init__(str(lost))
        self.ladder = lost.ladder


class WorkerStopping(Exception):
    """The worker is stopping while a batch still fails; it stays unacknowledged."""


def _transient_errors() -> tuple[type[BaseException], ...]:
    import redis.exceptions
    from aiokafka.errors import KafkaError

    errors: list[type[BaseException]] = [
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.BusyLoadingError,
        KafkaError,
        ConnectionError,
        TimeoutError,
        TooManyConflicts,
    ]
    try:
        from faust.exceptions import ProducerSendError

        errors.append(ProducerSendError)
    except ImportError:  # pragma: no cover - faust is a runtime dependency
        pass
    return tuple(errors)


TRANSIENT_ERRORS = _transient_errors()


class StoreRefusal:
    """Whether Redis refuses the worker's writes now (`server_refusal`), what it said and
    since when: the handler notes each refusal and lifts it at the next store success;
    readiness reports `reason`. Logged once per outage (and again if the refusal changes)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.code: str | None = None
        self.message = ""
        self.since = 0.0

    def note(self, code: str, exc: BaseException) -> None:
        """Count a refusal with error code `code`; the first of an outage is logged."""
        metrics.STORE_REFUSALS.labels(code.lower()).inc()
        message = str(exc) if str(exc).startswith(code) else f"{code} {exc}"
        if self.code != code:
            log.error(
                "the store refuses writes (%s); the batch is held and retried until it accepts them", message
            )
        if self.code is None:
            self.since = self.clock()
            metrics.STORE_REFUSING.set(1)
        self.code, self.message = code, message

    def lift(self) -> None:
        """The store accepted a batch: the outage, if any, is over."""
        if self.code is None:
            return
        log.warning("the store accepts writes again after %.0f s of %s", self.clock() - self.since, self.code)
        self.code = None
        metrics.STORE_REFUSING.set(0)

    def reason(self) -> str | None:
        """Why the worker is not ready, while the store refuses; else None."""
        if self.code is None:
            return None
        return f"the store refuses writes: {self.message} (for {self.clock() - self.since:.0f} s)"


class BatchHandler:
    """Processes one consumed batch end to end; see the module docstring for the order."""

    def __init__(
        self,
        processor: Processor,
        ladders: Ladders,
        send: Send,
        *,
        topics: Topics = Topics(),
        limits: Limits = Limits(),
        stopping: Callable[[], bool] = lambda: False,
        max_backoff: float = 5.0,
        on_batch: Callable[[Sequence[Message], BatchResult], None] | None = None,
        partition_count: Callable[[str], int | None] = lambda topic: None,
        stopped: dict[str, str] | None = None,
        guard: LossGuard | None = None,
        refusal: StoreRefusal | None = None,
        on_loss: Callable[[StoreLost], str | None] | None = None,
    ) -> None:
        """`on_batch` is called with each finished batch and its result (the dashboard's feed
        and the consumer-lag measurement use it). `partition_count(topic)` is the topic's
        partition count as the consumer knows it (None: unknown), for `OrderWatch`. `stopped`
        (ladder → reason) is filled while a ladder cannot be applied because the store lost
        it; readiness reads it. `guard`, if given, checks each partition for a lost store before
        its batches are applied, and holds lost ladders (its `report` and `recovered` should be
        this handler's `report_loss` and `recovered`). `refusal` is set while Redis refuses the
        batch's writes; readiness reads it too. `on_loss`, if given, is told of each report of
        a lost ladder (the automatic rebuild, `service.auto_rebuild`) and returns what readiness
        adds to its reason."""
        self.processor = processor
        self.ladders = ladders
        self.send = send
        self.topics = topics
        self.limits = limits
        self.stopping = stopping
        self.max_backoff = max_backoff
        self.on_batch = on_batch
        self.order_watch = OrderWatch(partition_count)
        #: Ladder → why it is not being applied (a lost store); readiness reports it.
        self.stopped: dict[str, str] = {} if stopped is None else stopped
        self.guard = guard
        self.refusal = StoreRefusal() if refusal is None else refusal
        self.on_loss = on_loss

    def report_loss(self, exc: StoreLost) -> None:
        """Note a ladder not applied because the store lost it: readiness, metrics, the log
        (counted and logged once per loss)."""
        if exc.ladder not in self.stopped:
            log.error("%s", exc)
            metrics.STORE_LOSSES.labels(exc.ladder).inc()
        note = self.on_loss(exc) if self.on_loss is not None else None
        self.stopped[exc.ladder] = str(exc) if note is None else f"{exc}; {note}"
        metrics.LADDERS_STOPPED.set(len(self.stopped))

    def recovered(self, ladder: str) -> None:
        """The store has `ladder` again (rebuilt): readiness no longer names it."""
        self.stopped.pop(ladder, None)
        metrics.LADDERS_STOPPED.set(len(self.stopped))

    async def handle(self, messages: Sequence[Message]) -> BatchResult:
        """Validate, apply, produce; returns when everything is durable (then ack)."""
        return await self.emit(await self.commit(messages))

    async def commit(self, messages: Sequence[Message], *, narrow: bool = False) -> CommittedBatch:
        """Phase 1: decode and validate, apply to the store (durable when this returns).

        The agent may start the next batch's commit before this batch's `emit` finished:
        that batch reads the states this one committed, and acknowledgements stay in order.
        A lost ladder (`StoreLost`) holds the whole batch until it is rebuilt — unless
        `narrow`: then the records of its partition are left out (`CommittedBatch.parked`,
        nothing of them applied or dead-lettered) and the rest is applied. A ladder's
        records share a partition, so what is applied keeps every ladder's order.
        """
        started = time.perf_counter()
        metrics.MATCHES_CONSUMED.inc(len(messages))
        metrics.BATCH_SIZE.observe(len(messages))
        valid, dead = self._decode(messages)
        held: set[int] = set()
        while True:
            try:
                result, skipped = await self._apply(valid, narrow=narrow)
                break
            except LadderHeld as exc:
                partitions = {m.partition for m, match in valid if match.ladder == exc.ladder}
                narrow = bool(partitions)  # not a ladder of the batch: hold it all
                held |= partitions
                valid = [(m, match) for m, match in valid if m.partition not in held]
        dead = [d for d in dead if d[0].partition not in held] + skipped
        kept = [m for m in messages if m.partition not in held]
        parked = [m for m in messages if m.partition in held]
        return CommittedBatch(kept, result, dead, started, parked)

    def _decode(
        self, messages: Sequence[Message]
    ) -> tuple[list[tuple[Message, MatchFinished]], list[DeadLetter]]:
        """The valid matches of `messages` with their records, and the invalid ones as dead letters."""
        valid: list[tuple[Message, MatchFinished]] = []
        dead: list[DeadLetter] = []
        for message in messages:
            try:
                match = decode_match(message.value or b"", self.ladders, self.limits)
            except (DecodeError, ValidationError) as exc:
                metrics.MATCHES_REJECTED.labels(_reason_label(exc)).inc()
                dead.append((message, str(exc), []))
                continue
            valid.append((message, match))
            self.order_watch.check(message, match.ladder)
        return valid, dead

    async def emit(self, batch: CommittedBatch) -> BatchResult:
        """Phase 2: produce the dead letters and rating-changed events, wait until the broker
        has them all (then their markers may shrink: `Processor.produced`); the caller
        acknowledges the batch after this returns."""
        result, dead = batch.result, batch.dead
        outgoing = [
            dead_letter(self.topics.dlq, m, reason, extra, limit=self.limits.max_event_bytes)
            for m, reason, extra in dead
        ]
        outgoing += [update_record(self.topics.updates, e) for e in result.events]
        await self._retry("produce", lambda: self._produce(outgoing))
        self.processor.produced(result)

        now = time.time()
        counts: Counter[tuple[bool, str]] = Counter()
        late: Counter[str] = Counter()
        for r in result.results:
            if r.voided:
                metrics.MATCHES_VOIDED_SKIPPED.labels(r.match.ladder).inc()
                continue
            if not r.duplicate and r.unrated is not None:
                metrics.MATCHES_UNRATED.labels(r.match.ladder, r.unrated).inc()
                continue
            if r.match.season is not None:
                if not r.duplicate:
                    metrics.SEASONS_STARTED.labels(r.match.ladder).inc()
                continue
            counts[r.duplicate, r.match.ladder] += 1
            if not r.duplicate and is_late(r):
                late[r.match.ladder] += 1
            metrics.EVENT_LATENCY.observe(max(0.0, now - r.match.finished_at))
        for (duplicate, ladder), n in counts.items():
            (metrics.MATCHES_DUPLICATE if duplicate else metrics.MATCHES_APPLIED).labels(ladder).inc(n)
        for ladder, n in late.items():
            metrics.MATCHES_LATE.labels(ladder).inc(n)
        metrics.COMMIT_CONFLICTS.inc(result.conflicts)
        metrics.DEAD_LETTERS.inc(len(dead))
        metrics.RATING_CHANGES.inc(len(result.events))
        metrics.PROCESSING_LATENCY.observe(time.perf_counter() - batch.started)
        if self.on_batch is not None:
            self.on_batch(batch.messages, result)
        return result

    async def _apply(
        self, valid: list[tuple[Message, MatchFinished]], *, narrow: bool = False
    ) -> tuple[BatchResult, list[DeadLetter]]:
        """The processor's result, and the matches the model cannot rate (`process_skipping`:
        the rule the offline tools skip by) as dead letters with their original records, the
        exception type and a short traceback (the full one is logged), never stopping the
        partition (the worker never dies on input). `narrow`: a lost ladder raises `LadderHeld`."""
        matches = [match for _, match in valid]
        where = [(message.partition, message.offset) for message, _ in valid]
        records = {id(match): message for message, match in valid}
        ladders = frozenset(m.ladder for m in matches)
        result, skipped = await process_skipping(
            self.processor,
            matches,
            where,
            attempt=lambda action: self._retry(
                "store", lambda: self._guarded(matches, where, action), ladders=ladders, narrow=narrow
            ),
        )
        dead: list[DeadLetter] = []
        for skip in skipped:
            exc, message = skip.error, records[id(skip.match)]
            log.error(
                "match %r (%s[%d]@%d) failed in processing; dead-lettered",
                skip.match.match_id,
                message.topic,
                message.partition,
                message.offset,
                exc_info=exc,
            )
            metrics.MATCHES_REJECTED.labels("processing").inc()
            short = "".join(traceback.format_exception(exc, limit=-3)).strip()[-1000:]
            headers = [("sr-error-type", type(exc).__name__.encode()), ("sr-traceback", short.encode())]
            dead.append((message, skip.reason, headers))
        return result, dead

    async def _guard(self, matches: Sequence[MatchFinished], where: Sequence[tuple[int, int]]) -> None:
        """Wait until the batch's partitions are checked for a lost store (`LossGuard`);
        `StoreLost` if a ladder of the batch is lost."""
        if self.guard is not None:
            await self.guard.ready(p for p, _ in where)
            await self.guard.hold(m.ladder for m in matches)

    async def _guarded(
        self,
        matches: Sequence[MatchFinished],
        where: Sequence[tuple[int, int]],
        action: Callable[[], Awaitable[BatchResult]],
    ) -> BatchResult:
        """`action`'s result (the batch, or one match of it), once `_guard` lets the batch through."""
        await self._guard(matches, where)
        return await action()

    async def _produce(self, outgoing: list[Record]) -> None:
        if outgoing:
            await self.send(outgoing)

    async def _retry(
        self,
        what: str,
        action: Callable[[], Awaitable[_T]],
        *,
        ladders: frozenset[str] = frozenset(),
        narrow: bool = False,
    ) -> _T:
        """Run `action` until it succeeds; errors back off (jittered, capped).

        Only a match the model cannot rate (`Unratable`, input) is raised, to be dead-lettered.
        Everything else is infrastructure, waited out and never dead-lettered: a transient
        error (a lost connection, a timeout, a broker error), Redis refusing the writes
        (`server_refusal`: OOM, READONLY, MISCONF, …; `refusal` says so meanwhile), and any
        other error (logged with its traceback at every retry). A lost store (`StoreLost`)
        too — nothing of the batch is applied or acknowledged until an operator rebuilds the
        ladder — and, meanwhile, the ladder is in `stopped` (readiness says so), counted, and
        logged once as an error; with `narrow` it is raised as `LadderHeld` instead, for the
        caller to leave the ladder's partition out. `ladders`: those of a store action's batch,
        applied again once it succeeds."""
        retry_delays = backoff(0.05, self.max_backoff)
        lost_delays = backoff(self.max_backoff, self.max_backoff)
        while True:
            try:
                outcome = await action()
            except StoreLost as exc:
                self.report_loss(exc)
                if narrow:
                    raise LadderHeld(exc) from exc
                if self.stopping():
                    raise WorkerStopping(f"{what}: {exc}") from exc
                await asyncio.sleep(next(lost_delays))
                continue
            except Unratable:
                raise
            except Exception as exc:
                metrics.BATCH_RETRIES.labels(what).inc()
                if self.stopping():
                    raise WorkerStopping(f"{what} still failing at shutdown: {exc!r}") from exc
                delay = next(retry_delays)
                code = server_refusal(exc)
                if code is not None:
                    self.refusal.note(code, exc)
                elif isinstance(exc, TRANSIENT_ERRORS):
                    log.warning("%s failed (%r); retrying in %.2f s", what, exc, delay)
                else:
                    log.error("%s failed; the batch is held and retried in %.2f s", what, delay, exc_info=exc)
                await asyncio.sleep(delay)
                continue
            if what == "store":
                self._applying(ladders)
            return outcome

    def _applying(self, ladders: frozenset[str]) -> None:
        """A store action on `ladders` succeeded: a refusal is over, and those of them that
        were stopped are applied again, but those the guard still holds (a ladder held on a
        parked partition stays stopped while other partitions' batches go through)."""
        self.refusal.lift()
        held = {*self.guard.lost, *self.guard.rebuilding} if self.guard is not None else set()
        back = sorted(ladder for ladder in self.stopped if ladder in ladders and ladder not in held)
        if back:
            log.warning("ladders %s are applied again", ", ".join(back))
            for ladder in back:
                self.recovered(ladder)


#: Parked records applied at most at once when their partition is unparked.
UNPARK_BATCH = 1000


def _generation(message: Message) -> int:
    """The consumer generation `message` was fetched in (faust's; 0 where there is none)."""
    return int(getattr(message, "generation_id", 0) or 0)


class BatchPipeline:
    """Overlaps consecutive batches so the worker is not idle while Redis works, and holds a
    lost ladder's partition alone.

    The caller takes batch N+1 while batch N waits for its Redis commit, and N+1 is
    committed while batch N's events travel to the broker. Commits run one at a time in
    submission order (a batch reads what the one before committed), and so do emits and
    acknowledgements: a batch is acknowledged only after its own events are with the broker
    and every earlier batch was acknowledged. If a batch fails, no later batch is committed
    or acknowledged, and the failure is raised by `submit` or `drain`.

    Parking: when a batch finds a ladder lost (`StoreLost`), the records of the ladder's
    partition are parked (`CommittedBatch.parked`) and the rest of the batch goes on. The
    partition is paused (`pause`), and its records in later batches join its parked ones, in
    offset order. Once every earlier batch is acknowledged, a task of the partition's own
    retries the parked records (held in place, with the handler's backoff) until the ladder is
    back, produces and acknowledges them, then resumes the partition. So per partition nothing
    is applied after a later record of it, and nothing is acknowledged before an earlier one;
    other partitions flow meanwhile. A rebalance (`abandon`) drops the parked records
    unacknowledged (`release`: the partition's next owner reads them again) with whatever of
    those partitions the batches in hand still carry; `stop` leaves them unacknowledged.
    Errors that hit every ladder alike (Redis down or refusing, the broker) still hold the
    batch in place, everything waiting on it.
    """

    def __init__(
        self,
        handler: BatchHandler,
        ack: Callable[[Sequence[Message]], None],
        depth: int = 3,
        *,
        pause: Callable[[set[int]], None] = lambda partitions: None,
        resume: Callable[[set[int]], None] = lambda partitions: None,
        release: Callable[[Sequence[Message]], None] = lambda messages: None,
    ) -> None:
        """`ack(messages)` acknowledges a finished batch; at most `depth` batches are in hand.
        `pause`/`resume` stop and restart fetching partitions of the matches topic; `release`
        forgets records taken but dropped unacknowledged."""
        self.handler = handler
        self.ack = ack
        self.depth = depth
        self.pause, self.resume, self.release = pause, resume, release
        self._committing: asyncio.Task[CommittedBatch] | None = None
        self._finishing: asyncio.Task[None] | None = None
        self._in_hand: deque[asyncio.Task[None]] = deque()
        #: Parked partition → its records not yet acknowledged, in offset order.
        self.parked: dict[int, list[Message]] = {}
        self._unparking: dict[int, asyncio.Task[None]] = {}
        #: Partitions whose records of consumer generations up to `_stale` are dropped (a rebalance).
        self._abandoned: set[int] = set()
        self._stale = -1
        self._newest = 0

    async def submit(self, messages: Sequence[Message]) -> None:
        """Start on a batch; returns once fewer than `depth` batches are in hand. Cancelling
        the caller leaves the batches be."""
        self._committing = asyncio.ensure_future(self._commit(messages, self._committing))
        self._finishing = asyncio.ensure_future(self._finish(self._committing, self._finishing))
        self._in_hand.append(self._finishing)
        while len(self._in_hand) >= self.depth:
            oldest = self._in_hand[0]
            await asyncio.wait([oldest])  # unlike awaiting it, cancelling the caller leaves it be
            if oldest.cancelled() or oldest.exception() is not None:
                await self.drain()
            self._in_hand.popleft()

    def committed(self) -> asyncio.Future[Any]:
        """Done once the batch being committed is (at once if none is): the caller takes the
        next batch then, so that it fills while Redis works and a lone record on an idle
        worker goes on at once."""
        if self._committing is not None and not self._committing.done():
            return self._committing
        idle: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        idle.set_result(None)
        return idle

    async def drain(self) -> None:
        """Wait until every submitted batch is acknowledged, parked or failed; raises the first
        failure (every later batch fails with it)."""
        in_hand, self._in_hand = self._in_hand, deque()
        for outcome in await asyncio.gather(*in_hand, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def stop(self) -> None:
        """`drain`, then give up the parked records, unacknowledged (the worker stops)."""
        try:
            await self.drain()
        finally:
            unparking = list(self._unparking.values())
            for task in unparking:
                task.cancel()
            await asyncio.gather(*unparking, return_exceptions=True)

    def abandon(self) -> None:
        """A rebalance: drop the parked records unacknowledged, and those of their partitions
        that batches in hand still carry (records of the same consumer generation)."""
        self._stale = self._newest
        self._abandoned.update(self.parked)
        for records in self.parked.values():
            self.release(records)
        for task in self._unparking.values():
            task.cancel()
        partitions = set(self.parked)
        self.parked.clear()
        self._unparking.clear()
        if partitions:
            log.warning("partitions %s: parked records dropped in a rebalance", sorted(partitions))
            self.resume(partitions)

    async def _commit(
        self, messages: Sequence[Message], previous: asyncio.Task[CommittedBatch] | None
    ) -> CommittedBatch:
        if previous is not None:
            await previous
        committed = await self.handler.commit(self._sort_out(messages), narrow=True)
        # Held by a batch taken before a rebalance that came meanwhile: dropped with the others.
        self._abandoned.update(m.partition for m in committed.parked if _generation(m) <= self._stale)
        parked = self._sort_out(committed.parked, park=False)
        held = {m.partition for m in parked} - set(self.parked)
        for message in parked:
            self.parked.setdefault(message.partition, []).append(message)
        if held:
            log.warning("partitions %s held (a ladder on them is lost); the others go on", sorted(held))
            self.pause(held)
        return committed

    def _sort_out(self, messages: Sequence[Message], *, park: bool = True) -> list[Message]:
        """`messages` but those of partitions abandoned in a rebalance (released) and, with
        `park`, those of parked partitions (they join the parked records)."""
        going: list[Message] = []
        dropped: list[Message] = []
        for message in messages:
            self._newest = max(self._newest, _generation(message))
            if message.partition in self._abandoned and _generation(message) <= self._stale:
                dropped.append(message)
            elif park and message.partition in self.parked:
                self.parked[message.partition].append(message)
            else:
                going.append(message)
        self.release(dropped)
        return going

    async def _finish(
        self, committing: asyncio.Task[CommittedBatch], previous: asyncio.Task[None] | None
    ) -> None:
        committed = await committing
        if previous is not None:
            await previous
        await self.handler.emit(committed)
        self.ack(committed.messages)
        for partition in {m.partition for m in committed.parked}:
            if partition in self.parked and partition not in self._unparking:
                self._unparking[partition] = asyncio.ensure_future(self._unpark(partition))

    async def _unpark(self, partition: int) -> None:
        """Apply, produce and acknowledge `partition`'s parked records (held in place until
        their ladder is back), then resume it."""
        records = self.parked[partition]
        while records:
            batch = records[:UNPARK_BATCH]
            committed = await self.handler.commit(batch)
            await self.handler.emit(committed)
            self.ack(committed.messages)
            del records[: len(batch)]
        del self.parked[partition], self._unparking[partition]
        log.warning("partition %d: its parked records are applied; fetching it again", partition)
        self.resume({partition})


def dead_letter(
    topic: str,
    message: Message,
    reason: str,
    extra: Sequence[tuple[str, bytes]] = (),
    *,
    limit: int = Limits().max_event_bytes,
) -> Record:
    """The original record with its key, value and headers, plus where it came from and why.

    The key, the value and the original headers (together) are each cut to `limit` bytes
    (``max_event_bytes``), so that a record near the broker's size limit still fits as a dead
    letter (a ``MessageSizeTooLargeError`` would be retried forever and wedge the worker).
    ``sr-truncated`` then gives the original value's length, ``sr-key-truncated`` the key's,
    and ``sr-headers-dropped`` how many original headers were left out.
    """
    value, key = message.value or b"", message.key
    original = list(getattr(message, "headers", None) or [])
    kept = _headers_within(original, limit)
    headers = [
        *kept,
        ("sr-reason", reason.encode()[:limit]),
        ("sr-origin-topic", str(message.topic).encode()),
        ("sr-origin-partition", str(message.partition).encode()),
        ("sr-origin-offset", str(message.offset).encode()),
        *extra,
    ]
    timestamp = getattr(message, "timestamp", None)
    if timestamp is not None:
        headers.append(("sr-origin-timestamp", repr(timestamp).encode()))
    if len(value) > limit:
        headers.append(("sr-truncated", str(len(value)).encode()))
    if key is not None and len(key) > limit:
        headers.append(("sr-key-truncated", str(len(key)).encode()))
    if len(kept) < len(original):
        headers.append(("sr-headers-dropped", str(len(original) - len(kept)).encode()))
    return topic, None if key is None else key[:limit], value[:limit], headers


def _headers_within(headers: Sequence[tuple[str, bytes]], limit: int) -> list[tuple[str, bytes]]:
    """The leading `headers` whose names and values add up to at most `limit` bytes."""
    kept, size = [], 0
    for name, data in headers:
        size += len(name.encode()) + len(data or b"")
        if size > limit:
            break
        kept.append((name, data))
    return kept


def _reason_label(exc: Exception) -> str:
    """A low-cardinality metric label: the top-level field that failed, or 'decode'."""
    if isinstance(exc, ValidationError):
        return exc.path.split(".")[0].split("[")[0] or "event"
    return "decode"
