"""Consecutive batches through the `BatchHandler`, overlapped, in order; a ladder the store
lost holds only the partition it is on (parking). See `BatchPipeline`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from stream_rater.service.batch_handler import BatchHandler, CommittedBatch
from stream_rater.service.order_watch import Message
from stream_rater.service.wait_dump import spans

log = logging.getLogger(__name__)


#: Parked records applied at most at once when their partition is unparked.
UNPARK_BATCH = 1000

#: Event-loop turns a commit lets pass before it starts while a batch waits to be emitted:
#: the emit hands its records to aiokafka's producer, whose sender task wakes, drains them
#: and writes the produce request — one turn each. Without them the next batch's decoding,
#: rating and Redis replies ran first, and the produce request waited for them.
EMIT_FIRST_TURNS = 4


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
    and every earlier batch was acknowledged. Every batch committed while an emit is on its
    way goes out in the next emit, together and in order (`_emit`): one produce request
    rather than one after another each waiting for the one before. If a batch fails, no later
    batch is committed, emitted or acknowledged, and the failure is raised by `submit` or
    `drain`.

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
        #: Each batch in hand (its finishing task) → its commit task, records and when it came.
        self._flight: dict[
            asyncio.Task[None], tuple[asyncio.Task[CommittedBatch], Sequence[Message], float]
        ] = {}
        #: Batches committed and not yet emitted, each with its future done once it is.
        self._to_emit: list[tuple[CommittedBatch, asyncio.Future[None]]] = []
        self._emitting: asyncio.Task[None] | None = None
        #: Why an emit failed: no later batch is emitted.
        self._emit_failed: BaseException | None = None
        #: After a rebalance: dropping the produced events once the batches then in hand are done.
        self._forgetting: asyncio.Task[None] | None = None

    async def submit(self, messages: Sequence[Message]) -> None:
        """Start on a batch; returns once fewer than `depth` batches are in hand. Cancelling
        the caller leaves the batches be."""
        self._committing = asyncio.ensure_future(self._commit(messages, self._committing))
        self._finishing = asyncio.ensure_future(self._finish(self._committing, self._finishing))
        self._in_hand.append(self._finishing)
        self._flight[self._finishing] = (self._committing, messages, time.monotonic())
        self._finishing.add_done_callback(self._flight.pop)
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

    def in_flight(self) -> list[str]:
        """One line per batch in hand (where it is, its records, its age) and per parked
        partition, for the operator's dump (`wait_dump`)."""
        now = time.monotonic()
        lines = [
            f"pipeline batch {spans(messages)} for {now - since:.1f} s: "
            f"{'emitting' if committing.done() else 'committing'}"
            + (
                f", commit failed {committing.exception()!r}"
                if committing.done() and not committing.cancelled() and committing.exception() is not None
                else ""
            )
            for committing, messages, since in self._flight.values()
        ]
        lines += [
            f"pipeline parked p{p}: {spans(records)}, "
            f"{'unparking' if p in self._unparking else 'waiting for earlier batches'}"
            for p, records in self.parked.items()
        ]
        lines.append(
            f"pipeline: {len(self._flight)} batches in hand (depth {self.depth}), abandoned "
            f"{sorted(self._abandoned)} up to generation {self._stale}, newest generation {self._newest}"
        )
        return lines

    async def drain(self) -> None:
        """Wait until every submitted batch is acknowledged, parked or failed; raises the first
        failure (every later batch fails with it)."""
        in_hand, self._in_hand = self._in_hand, deque()
        for outcome in await asyncio.gather(*in_hand, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def stop(self) -> None:
        """`drain`, then give up the parked records, unacknowledged (the worker stops), and
        have the store drop the events produced that no commit named (`forget_produced`)."""
        try:
            await self.drain()
        finally:
            pending = [*self._unparking.values(), *([self._forgetting] if self._forgetting else [])]
            for task in pending:  # this stop's own `forget_produced` covers a rebalance's
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self.handler.forget_produced()

    def abandon(self) -> None:
        """A rebalance: drop the parked records unacknowledged, and those of their partitions
        that batches in hand still carry (records of the same consumer generation); once the
        batches in hand are done, drop the produced events no commit named (`_forget_after`)."""
        self._stale = self._newest
        self._abandoned.update(self.parked)
        for records in self.parked.values():
            self.release(records)
        for task in self._unparking.values():
            task.cancel()
        partitions = set(self.parked)
        self.parked.clear()
        self._unparking.clear()
        self._forgetting = asyncio.ensure_future(self._forget_after(list(self._flight)))
        if partitions:
            log.warning("partitions %s: parked records dropped in a rebalance", sorted(partitions))
            self.resume(partitions)

    async def _forget_after(self, in_hand: list[asyncio.Task[None]]) -> None:
        """Once the batches `in_hand` at a rebalance are acknowledged (or failed), have the
        store drop the events produced that no commit named: the revoked partitions' ladders
        get no next commit here. All ladders' (the pipeline knows no ladder's partition): one
        call per rebalance, and a kept ladder's next commit just names fewer."""
        if in_hand:
            await asyncio.wait(in_hand)
        await self.handler.forget_produced()

    async def _commit(
        self, messages: Sequence[Message], previous: asyncio.Task[CommittedBatch] | None
    ) -> CommittedBatch:
        if previous is not None:
            await previous
        if self._to_emit:
            for _ in range(EMIT_FIRST_TURNS):
                await asyncio.sleep(0)
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
        await self._emitted(committed)
        if previous is not None:
            await previous
        self.ack(committed.messages)
        for partition in {m.partition for m in committed.parked}:
            if partition in self.parked and partition not in self._unparking:
                self._unparking[partition] = asyncio.ensure_future(self._unpark(partition))

    def _emitted(self, committed: CommittedBatch) -> asyncio.Future[None]:
        """Done once `committed`'s events are with the broker, after every batch handed here
        before it; failed, and nothing of it produced, once an earlier emit failed."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._emit_failed is not None:
            done.set_exception(self._emit_failed)
            return done
        self._to_emit.append((committed, done))
        if self._emitting is None or self._emitting.done():
            self._emitting = asyncio.ensure_future(self._emit())
        return done

    async def _emit(self) -> None:
        """Emit the batches handed to `_emitted`, all that are waiting at once, until none is.
        A failure fails the batches being emitted and every later one."""
        while self._to_emit:
            group, self._to_emit = self._to_emit, []
            try:
                await self.handler.emit(*(committed for committed, _ in group))
            except asyncio.CancelledError:
                self._fail(group, asyncio.CancelledError("the emit was cancelled"))
                raise
            except BaseException as exc:  # the batches' own tasks raise it
                self._fail(group, exc)
                return
            for _, done in group:
                done.set_result(None)

    def _fail(self, group: list[tuple[CommittedBatch, asyncio.Future[None]]], exc: BaseException) -> None:
        """Fail the batches of `group` and every batch waiting to be emitted with `exc`, and
        every batch handed to `_emitted` from now on."""
        self._emit_failed = exc
        for _, done in group + self._to_emit:
            done.set_exception(exc)
        self._to_emit = []

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
