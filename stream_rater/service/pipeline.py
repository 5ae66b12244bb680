"""One batch of consumed match events → validated, applied, produced, then acknowledged.

`BatchHandler` is what the faust agent calls for every batch it takes. Its order
is the correctness model's: decode + validate (invalid → dead-letter topic) → processor
(Redis commit) → produce rating-changed events and dead letters, wait for the broker →
only then acknowledge. A Redis or broker error is retried with backoff until it succeeds or
the worker stops; the batch is then left unacknowledged and Kafka redelivers it, which the
processor's idempotency makes harmless. `BatchPipeline` runs consecutive batches through the
handler overlapped, keeping that order per batch and between batches.
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
    """A batch after phase 1 (`BatchHandler.commit`): applied, not yet produced."""

    messages: Sequence[Message]
    result: BatchResult
    dead: list[DeadLetter]
    started: float


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

    async def commit(self, messages: Sequence[Message]) -> CommittedBatch:
        """Phase 1: decode and validate, apply to the store (durable when this returns).

        The agent may start the next batch's commit before this batch's `emit` finished:
        that batch reads the states this one committed, and acknowledgements stay in order.
        """
        started = time.perf_counter()
        metrics.MATCHES_CONSUMED.inc(len(messages))
        metrics.BATCH_SIZE.observe(len(messages))
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
        result = await self._apply(valid, dead)
        return CommittedBatch(messages, result, dead, started)

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

    async def _apply(self, valid: list[tuple[Message, MatchFinished]], dead: list[DeadLetter]) -> BatchResult:
        """The processor's result; a match the model cannot rate (`process_skipping`: the rule
        the offline tools skip by) goes to `dead` with its original record, the exception type
        and a short traceback (the full one is logged), never stopping the partition (the
        worker never dies on input)."""
        matches = [match for _, match in valid]
        where = [(message.partition, message.offset) for message, _ in valid]
        records = {id(match): message for message, match in valid}
        result, skipped = await process_skipping(
            self.processor,
            matches,
            where,
            attempt=lambda action: self._retry("store", lambda: self._guarded(matches, where, action)),
        )
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
        return result

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

    async def _retry(self, what: str, action: Callable[[], Awaitable[_T]]) -> _T:
        """Run `action` until it succeeds; errors back off (jittered, capped).

        Only a match the model cannot rate (`Unratable`, input) is raised, to be dead-lettered.
        Everything else is infrastructure, waited out and never dead-lettered: a transient
        error (a lost connection, a timeout, a broker error), Redis refusing the writes
        (`server_refusal`: OOM, READONLY, MISCONF, …; `refusal` says so meanwhile), and any
        other error (logged with its traceback at every retry). A lost store (`StoreLost`)
        too — nothing of the batch is applied or acknowledged until an operator rebuilds the
        ladder — and, meanwhile, the ladder is in `stopped` (readiness says so), counted, and
        logged once as an error."""
        retry_delays = backoff(0.05, self.max_backoff)
        lost_delays = backoff(self.max_backoff, self.max_backoff)
        while True:
            try:
                outcome = await action()
            except StoreLost as exc:
                self.report_loss(exc)
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
                self._applying()
            return outcome

    def _applying(self) -> None:
        """A store action succeeded: a refusal is over, and the stopped ladders are applied
        again, but those the guard still holds."""
        self.refusal.lift()
        held = {*self.guard.lost, *self.guard.rebuilding} if self.guard is not None else set()
        back = sorted(ladder for ladder in self.stopped if ladder not in held)
        if back:
            log.warning("ladders %s are applied again", ", ".join(back))
            for ladder in back:
                self.recovered(ladder)


class BatchPipeline:
    """Overlaps consecutive batches so the worker is not idle while Redis works.

    The caller takes batch N+1 while batch N waits for its Redis commit, and N+1 is
    committed while batch N's events travel to the broker. Commits run one at a time in
    submission order (a batch reads what the one before committed), and so do emits and
    acknowledgements: a batch is acknowledged only after its own events are with the broker
    and every earlier batch was acknowledged. If a batch fails, no later batch is committed
    or acknowledged, and the failure is raised by `submit` or `drain`.
    """

    def __init__(
        self, handler: BatchHandler, ack: Callable[[Sequence[Message]], None], depth: int = 3
    ) -> None:
        """`ack(messages)` acknowledges a finished batch; at most `depth` batches are in hand."""
        self.handler = handler
        self.ack = ack
        self.depth = depth
        self._committing: asyncio.Task[CommittedBatch] | None = None
        self._finishing: asyncio.Task[None] | None = None
        self._in_hand: deque[asyncio.Task[None]] = deque()

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
        """Wait until every submitted batch is acknowledged or failed; raises the first
        failure (every later batch fails with it)."""
        in_hand, self._in_hand = self._in_hand, deque()
        for outcome in await asyncio.gather(*in_hand, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def _commit(
        self, messages: Sequence[Message], previous: asyncio.Task[CommittedBatch] | None
    ) -> CommittedBatch:
        if previous is not None:
            await previous
        return await self.handler.commit(messages)

    async def _finish(
        self, committing: asyncio.Task[CommittedBatch], previous: asyncio.Task[None] | None
    ) -> None:
        committed = await committing
        if previous is not None:
            await previous
        await self.handler.emit(committed)
        self.ack(committed.messages)


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
