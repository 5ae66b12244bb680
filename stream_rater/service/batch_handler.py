"""One batch of consumed match events → validated, applied, produced, then acknowledged.

`BatchHandler` is what the pipeline (`service.pipeline.BatchPipeline`) runs every batch
through. Its order is the correctness model's: decode + validate (invalid → dead-letter topic)
→ processor (Redis commit) → produce rating-changed events and dead letters, wait for the
broker → only then may the batch be acknowledged. What each fault gets is one table,
`service.fault_reactions`: a Redis or broker error is retried with backoff until it succeeds
or the worker stops; the batch is then left unacknowledged and Kafka
redelivers it, which the processor's idempotency makes harmless. Only a match the model cannot
rate is dead-lettered; a ladder the store lost is reported (`LadderHealth.report_loss`) and, in a narrowed
commit, its partition's records are handed back to be parked.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from stream_rater.contracts import Limits, MatchFinished, ValidationError
from stream_rater.contracts.codecs import DecodeError, decode_match
from stream_rater.kafka import Record, update_record
from stream_rater.processor import BatchResult, Processor, Skipped, StoreLost, process_skipping
from stream_rater.service.batch_metrics import BatchMetrics
from stream_rater.service.dead_letter import DeadLetter, dead_letter
from stream_rater.service.fault_reactions import Fault, Reaction, fault
from stream_rater.service.ladder_health import LadderHealth
from stream_rater.service.order_watch import Message, OrderWatch
from stream_rater.waiting import backoff

if TYPE_CHECKING:
    from stream_rater.service.store_loss import LossGuard

log = logging.getLogger(__name__)
_T = TypeVar("_T")


#: Seconds a stopping or rebalanced worker gives the store to drop its produced events
#: (`BatchHandler.forget_produced`): a stop never waits longer on a store that does not answer.
FORGET_TIMEOUT = 2.0

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


@dataclass(frozen=True)
class Retrying:
    """How the handler waits out a failing attempt: backoff (jittered) capped at `max_backoff`
    seconds, until `stopping()` says the worker stops (`WorkerStopping`)."""

    max_backoff: float = 5.0
    stopping: Callable[[], bool] = field(default=lambda: False)


class BatchHandler:
    """Processes one consumed batch end to end; see the module docstring for the order."""

    def __init__(
        self,
        processor: Processor,
        send: Send,
        *,
        topics: Topics = Topics(),
        limits: Limits = Limits(),
        retrying: Retrying = Retrying(),
        health: LadderHealth | None = None,
        sensor: BatchMetrics | None = None,
        guard: LossGuard | None = None,
    ) -> None:
        """`health` is told of every lost ladder and refusal and of every store success (readiness
        reads it); `sensor` of every batch, rejection and retry (the metrics, the dead letters'
        log, the dashboard). `guard`, if given, checks each partition for a lost store before its
        batches are applied and holds lost ladders; it reports to the same `health`."""
        self.processor = processor
        self.ladders = processor.ladders
        self.send = send
        self.topics = topics
        self.limits = limits
        self.retrying = retrying
        self.order_watch = OrderWatch()
        self.health = LadderHealth() if health is None else health
        self.sensor = BatchMetrics(self.ladders) if sensor is None else sensor
        self.guard = guard

    async def handle(self, messages: Sequence[Message]) -> BatchResult:
        """Validate, apply, produce; returns when everything is durable (then ack)."""
        committed = await self.commit(messages)
        await self.emit(committed)
        return committed.result

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
        self.sensor.consumed(messages)
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
                self.sensor.rejected(exc)
                dead.append(DeadLetter(message, str(exc), []))
                continue
            valid.append((message, match))
            self.order_watch.check(message, match.ladder)
        return valid, dead

    async def emit(self, *batches: CommittedBatch) -> None:
        """Phase 2: produce the dead letters and rating-changed events of `batches`, in their
        order and as one send, and wait until the broker has them all (then their markers may
        shrink: `Processor.produced`); the caller acknowledges the batches after this returns."""
        outgoing: list[Record] = []
        for batch in batches:
            outgoing += [
                dead_letter(
                    self.topics.dlq, d.message, d.reason, d.headers, limit=self.limits.max_event_bytes
                )
                for d in batch.dead
                if not d.sent
            ]
            outgoing += [update_record(self.topics.updates, e) for e in batch.result.events]
        await self._retry("produce", lambda: self._produce(outgoing))
        for batch in batches:
            self.processor.produced(batch.result)
            self.sensor.finished(batch.messages, batch.result, batch.dead, batch.started)

    async def forget_produced(self) -> None:
        """Have the store drop the events of the matches produced (every batch `emit` saw
        with the broker) that no later commit named (`Processor.forget_produced`): the
        worker stops or lost partitions. Bounded by `FORGET_TIMEOUT`; a failure is logged
        and the events stay (harmless: the ladder's next commits only copy more)."""
        try:
            async with asyncio.timeout(FORGET_TIMEOUT):
                await self.processor.forget_produced()
        except Exception as exc:  # never fails a stop or a rebalance
            log.warning("the produced matches' events stay stored: dropping them failed (%r)", exc)

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
            attempt=lambda action: self._store(
                ladders, lambda: self._guarded(matches, where, action), narrow
            ),
            on_skip=send_now,
        )
        return result, dead

    def _dead_letter(self, skip: Skipped, message: Message) -> DeadLetter:
        """The dead letter of a match the model cannot rate: its original record, the exception
        type and a short traceback (the full one is logged: `DeadLetterLog`)."""
        exc = skip.error
        self.sensor.unratable()
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

    async def _store(self, ladders: frozenset[str], action: Callable[[], Awaitable[_T]], narrow: bool) -> _T:
        """`_retry` of a store `action` on `ladders`; once it succeeds, `LadderHealth.applied`:
        a refusal is over, and those of `ladders` stopped but no longer held are applied again."""
        outcome = await self._retry("store", action, narrow=narrow)
        self.health.applied(ladders, self.guard.lost if self.guard is not None else ())
        return outcome

    async def _retry(self, what: str, action: Callable[[], Awaitable[_T]], *, narrow: bool = False) -> _T:
        """Run `action` until it succeeds, doing about each exception what the table of fault
        reactions says (`fault_reactions.FAULTS`).

        `DEAD_LETTER` (a match the model cannot rate: input) and `STOP` are raised. Everything
        else is infrastructure, waited out with backoff (jittered, capped) and never
        dead-lettered: `RETRY` logs a warning (an unforeseen error: its traceback), `HOLD`
        notes the store's refusal for readiness. `PARK` (a lost store): nothing of the batch is
        applied or acknowledged until the ladder is rebuilt, and meanwhile `LadderHealth` has
        it (readiness says so, counted, logged once as an error); with `narrow` it is raised
        as `LadderHeld` instead, for the caller to leave the ladder's partition out."""
        retry_delays = backoff(0.05, self.retrying.max_backoff)
        lost_delays = backoff(self.retrying.max_backoff, self.retrying.max_backoff)
        while True:
            try:
                return await action()
            except BaseException as exc:
                row = fault(exc)
                if row.reaction in (Reaction.DEAD_LETTER, Reaction.STOP):
                    raise
                if row.reaction is Reaction.PARK:
                    delay = self._park(what, exc, narrow, lost_delays)
                else:
                    delay = self._wait_out(what, row, exc, retry_delays)
            await asyncio.sleep(delay)

    def _park(self, what: str, exc: BaseException, narrow: bool, delays: Iterator[float]) -> float:
        """`Reaction.PARK` of `exc` (a `StoreLost`): report it; `LadderHeld` if `narrow`, else
        the delay before the next attempt."""
        if not isinstance(exc, StoreLost):
            raise TypeError(f"only a StoreLost names a ladder to park, not {exc!r}") from exc
        self.health.report_loss(exc)
        if narrow:
            raise LadderHeld(exc) from exc
        if self.retrying.stopping():
            raise WorkerStopping(f"{what}: {exc}") from exc
        return next(delays)

    def _wait_out(self, what: str, row: Fault, exc: BaseException, delays: Iterator[float]) -> float:
        """`Reaction.RETRY` or `HOLD` of `exc`: counted, logged or noted as a refusal; the delay
        before the next attempt (`WorkerStopping` if the worker stops)."""
        self.sensor.retried(what)
        if self.retrying.stopping():
            raise WorkerStopping(f"{what} still failing at shutdown: {exc!r}") from exc
        delay = next(delays)
        if row.reaction is Reaction.HOLD:
            self.health.refusal.note(exc)
        elif row.traceback:
            log.error("%s failed; the batch is held and retried in %.2f s", what, delay, exc_info=exc)
        else:
            log.warning("%s failed (%r); retrying in %.2f s", what, exc, delay)
        return delay
