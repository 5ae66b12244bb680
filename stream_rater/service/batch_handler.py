"""One batch of consumed match events → validated, applied, produced, then acknowledged.

`BatchHandler` is what the pipeline (`service.pipeline.BatchPipeline`) runs every batch
through. Its order is the correctness model's: decode + validate (invalid → dead-letter topic)
→ processor (Redis commit) → produce rating-changed events and dead letters, wait for the
broker → only then may the batch be acknowledged. A Redis or broker error is retried with
backoff until it succeeds or the worker stops; the batch is then left unacknowledged and Kafka
redelivers it, which the processor's idempotency makes harmless. Only a match the model cannot
rate is dead-lettered; a ladder the store lost is reported (`report_loss`) and, in a narrowed
commit, its partition's records are handed back to be parked.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import Limits, MatchFinished, ValidationError
from stream_rater.contracts.codecs import DecodeError, decode_match
from stream_rater.kafka import Record, update_record
from stream_rater.processor import (
    BatchResult,
    Processor,
    Skipped,
    StoreLost,
    Unratable,
    is_late,
    points_created,
    process_skipping,
    quality,
)
from stream_rater.service import metrics
from stream_rater.service.dead_letter import DeadLetter, DeadLetterLog, dead_letter
from stream_rater.service.order_watch import Message, OrderWatch
from stream_rater.service.store_faults import TRANSIENT_ERRORS, StoreRefusal
from stream_rater.store.status import server_refusal
from stream_rater.waiting import backoff

if TYPE_CHECKING:
    from stream_rater.service.store_loss import LossGuard

log = logging.getLogger(__name__)
_T = TypeVar("_T")


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
        stopped: dict[str, str] | None = None,
        guard: LossGuard | None = None,
        refusal: StoreRefusal | None = None,
        on_loss: Callable[[StoreLost], str | None] | None = None,
        dead_log: DeadLetterLog | None = None,
    ) -> None:
        """`on_batch` is called with each finished batch and its result (the dashboard's feed
        and the consumer-lag measurement use it). `stopped`
        (ladder → reason) is filled while a ladder cannot be applied because the store lost
        it; readiness reads it. `guard`, if given, checks each partition for a lost store before
        its batches are applied, and holds lost ladders (its `report` and `recovered` should be
        this handler's `report_loss` and `recovered`). `refusal` is set while Redis refuses the
        batch's writes; readiness reads it too. `on_loss`, if given, is told of each report of
        a lost ladder (the automatic rebuild, `service.auto_rebuild`) and returns what readiness
        adds to its reason. `dead_log` logs the dead letters produced (default: 10 lines a minute)."""
        self.processor = processor
        self.ladders = ladders
        self.send = send
        self.topics = topics
        self.limits = limits
        self.stopping = stopping
        self.max_backoff = max_backoff
        self.on_batch = on_batch
        self.order_watch = OrderWatch()
        #: Ladder → why it is not being applied (a lost store); readiness reports it.
        self.stopped: dict[str, str] = {} if stopped is None else stopped
        self.guard = guard
        self.refusal = StoreRefusal() if refusal is None else refusal
        self.on_loss = on_loss
        self.dead_log = DeadLetterLog() if dead_log is None else dead_log

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
                match = decode_match(
                    message.value or b"",
                    self.ladders,
                    self.limits,
                    record_time=getattr(message, "timestamp", None),
                )
            except (DecodeError, ValidationError) as exc:
                metrics.MATCHES_REJECTED.labels(_reason_label(exc)).inc()
                dead.append(DeadLetter(message, str(exc), []))
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
            dead_letter(self.topics.dlq, d.message, d.reason, d.headers, limit=self.limits.max_event_bytes)
            for d in dead
            if not d.sent
        ]
        outgoing += [update_record(self.topics.updates, e) for e in result.events]
        await self._retry("produce", lambda: self._produce(outgoing))
        self.processor.produced(result)
        self.dead_log.note(dead)

        now = time.time()
        counts: Counter[tuple[bool, str]] = Counter()
        late: Counter[str] = Counter()
        moved: dict[tuple[bool, str], float] = {}  # (created, ladder) → display-rating points
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
            if not r.duplicate:
                points = points_created(r, self.ladders[r.match.ladder].rating_model.display)
                moved[points > 0, r.match.ladder] = moved.get((points > 0, r.match.ladder), 0.0) + abs(points)
                if is_late(r):
                    late[r.match.ladder] += 1
            metrics.EVENT_LATENCY.observe(max(0.0, now - r.match.finished_at))
        for (duplicate, ladder), n in counts.items():
            (metrics.MATCHES_DUPLICATE if duplicate else metrics.MATCHES_APPLIED).labels(ladder).inc(n)
        for ladder, n in late.items():
            metrics.MATCHES_LATE.labels(ladder).inc(n)
        for (up, ladder), points in moved.items():  # one increment per ladder, not per match
            counter = metrics.RATING_POINTS_CREATED if up else metrics.RATING_POINTS_REMOVED
            counter.labels(ladder).inc(points)
        metrics.COMMIT_CONFLICTS.inc(result.conflicts)
        for ladder, scorer, sums in result.quality:
            metrics.count_quality(ladder, scorer, sums, quality.BINS)
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
        the rule the offline tools skip by) as dead letters, each already sent (`_dead_letter`),
        never stopping the partition (the worker never dies on input). `narrow`: a lost ladder
        raises `LadderHeld`."""
        matches = [match for _, match in valid]
        where = [(message.partition, message.offset) for message, _ in valid]
        records = {id(match): message for message, match in valid}
        ladders = frozenset(m.ladder for m in matches)
        dead: list[DeadLetter] = []

        async def send_now(skip: Skipped) -> None:
            """Dead-letter `skip` before a later match of its ladder commits (`process_skipping`)."""
            dead.append(self._dead_letter(skip, records[id(skip.match)]))
            letter = dead_letter(
                self.topics.dlq,
                dead[-1].message,
                dead[-1].reason,
                dead[-1].headers,
                limit=self.limits.max_event_bytes,
            )
            await self._retry("produce", lambda: self._produce([letter]))

        result, _ = await process_skipping(
            self.processor,
            matches,
            where,
            attempt=lambda action: self._retry(
                "store", lambda: self._guarded(matches, where, action), ladders=ladders, narrow=narrow
            ),
            on_skip=send_now,
        )
        return result, dead

    @staticmethod
    def _dead_letter(skip: Skipped, message: Message) -> DeadLetter:
        """The dead letter of a match the model cannot rate: its original record, the exception
        type and a short traceback (the full one is logged: `DeadLetterLog`)."""
        exc = skip.error
        metrics.MATCHES_REJECTED.labels("processing").inc()
        short = "".join(traceback.format_exception(exc, limit=-3)).strip()[-1000:]
        headers = [("sr-error-type", type(exc).__name__.encode()), ("sr-traceback", short.encode())]
        return DeadLetter(message, skip.reason, headers, skip.match.ladder, exc, sent=True)

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


def _reason_label(exc: Exception) -> str:
    """A low-cardinality metric label: the top-level field that failed, or 'decode'."""
    if isinstance(exc, ValidationError):
        return exc.path.split(".")[0].split("[")[0] or "event"
    return "decode"
