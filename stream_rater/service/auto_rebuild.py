"""A worker rebuilding a lost ladder from the matches topic by itself
(``STREAM_RATER_ON_STORE_LOSS=rebuild``; with the default, ``halt``, an operator does it).

When the worker finds a ladder lost (`LadderHealth.report_loss`: the processor's watermark
check, or `LossGuard` when a partition is assigned), `AutoRebuild.lost` starts a background
task, one per ladder, that does what ``stream-rater replay --from-topic --store`` does:

1. Lock: it takes the ladder's re-rate lock (the store's mutual exclusion of re-rates, voids
   and rebuilds; a lease renewed while it runs, so a crashed worker's expires). If another
   worker or a re-rate holds it, this attempt ends ("busy"): when the other one rebuilt the
   ladder, its held batch goes through and nothing reports the loss again; else a later
   report tries again.
2. Start: the latest usable checkpoint (`offline.recovery`: written into the store first if
   the store has nothing of the ladder), else the topic's start. If the topic no longer
   holds the offsets that start needs (`deleted_heads`), the ladder stays held for good
   ("refused"): /readyz and the log name the first offset left and the manual command with
   ``--history``.
3. Rebuild: `offline.rebuild` applies the ladder's matches from there, read from its
   partitions only, a worker batch at a time (the event loop is blocked no longer than by
   one of the worker's own batches; decoding runs in a thread) and produces the events of
   the matches the consumer group had not acknowledged.

While it runs, `LossGuard.rebuilding` holds the ladder even where the guard's own check or the
processor's watermark would let its batch through half-way: the held batch must not be
applied between the rebuild's batches. Afterwards the held batch goes through by the existing
lift: its matches the rebuild read are found applied (duplicates, their events produced by the
rebuild), those after the end it read are applied after them in log order, as are later
batches. `stream_rater_store_rebuilds_total{ladder,outcome}` counts each attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from stream_rater.checkpoints import configured_sink
from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.corrections.rerate import new_owner
from stream_rater.kafka import HistoryTruncated
from stream_rater.offline.recovery import recover
from stream_rater.processor import StoreLost
from stream_rater.service import metrics
from stream_rater.store import StateStore
from stream_rater.store.base import RerateRunning
from stream_rater.waiting import backoff

log = logging.getLogger(__name__)

#: Seconds the rebuild's lock outlives a worker that crashed while rebuilding.
LEASE = 15.0
#: Seconds before a ladder whose rebuild ended (busy, failed, or rebuilt and still reported
#: lost) is tried again: the first delay, doubling (jittered) up to the last.
RETRY_DELAYS = (5.0, 300.0)


class RebuildRunning(StoreLost):
    """What `LossGuard.hold` raises for a ladder while its automatic rebuild runs: the loss it
    rebuilds (same message), not a new one."""

    def __init__(self, lost: StoreLost) -> None:
        RuntimeError.__init__(self, str(lost))
        self.ladder = lost.ladder


def manual_command(settings: Settings, ladder: str) -> str:
    """The operator's recovery of `ladder` when the topic lacks its head."""
    return (
        f"stream-rater replay --from-topic --ladder {ladder} --store URL "
        f"--consumer-group {settings.consumer_group} --history FILE"
    )


def refused_note(settings: Settings, error: HistoryTruncated) -> str:
    """Why a ladder is not rebuilt by itself: the first offset left of each partition whose head
    was deleted, and the manual command that supplies the deleted matches."""
    heads = "; ".join(head.line() for head in error.heads)
    return (
        f"not rebuilt automatically: {heads}, so the topic no longer holds the ladder's whole "
        f"history; rebuild it with `{manual_command(settings, error.ladder)}` "
        "(FILE: its matches before those offsets)"
    )


class AutoRebuild:
    """Starts and follows the automatic rebuilds of lost ladders (see the module docstring).

    `rebuild(ladder)` does one (`TopicRebuild`) and returns a one-line summary; `holds` is the
    `LadderHealth`'s map of ladders held while rebuilt; `report` is its `report_loss`,
    called when an attempt is refused or fails, for readiness to say so at once (a busy one
    shows at the held batch's next retry)."""

    def __init__(
        self,
        rebuild: Callable[[str], Awaitable[str]],
        settings: Settings,
        *,
        holds: dict[str, StoreLost],
        report: Callable[[StoreLost], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rebuild, self.settings, self.holds, self.report = rebuild, settings, holds, report
        self.clock = clock
        self.tasks: dict[str, asyncio.Task[None]] = {}
        #: Ladder → what readiness adds to its loss (the rebuild running, or why it is not).
        self.notes: dict[str, str] = {}
        #: Ladders whose history the topic no longer holds: never rebuilt by the worker.
        self.refused: set[str] = set()
        self._delays: dict[str, Iterator[float]] = {}
        self._next_try: dict[str, float] = {}

    def lost(self, exc: StoreLost) -> str | None:
        """Called with each report of a lost ladder: start its rebuild unless one runs, it was
        refused, or its last attempt was too recent; what readiness adds to the loss."""
        ladder = exc.ladder
        if self._may_start(exc):
            self.holds[ladder] = RebuildRunning(exc)
            self.notes[ladder] = (
                f"rebuilding ladder {ladder!r} from topic {self.settings.topic_matches!r} "
                "(STREAM_RATER_ON_STORE_LOSS=rebuild)"
            )
            log.warning("%s; rebuilding it from topic %r", exc, self.settings.topic_matches)
            self.tasks[ladder] = asyncio.ensure_future(self._run(exc))
        return self.notes.get(ladder)

    def _may_start(self, exc: StoreLost) -> bool:
        """A rebuild of `exc`'s ladder is due: none runs or was refused, and the last attempt
        is longer ago than its retry delay. A `RebuildRunning` reported after its rebuild ended
        is no new loss."""
        ladder = exc.ladder
        return (
            not isinstance(exc, RebuildRunning)
            and ladder not in self.tasks
            and ladder not in self.refused
            and self.clock() >= self._next_try.get(ladder, 0.0)
        )

    async def _run(self, exc: StoreLost) -> None:
        """One attempt; the ladder is held until it ends, and readiness told how it ended."""
        ladder, outcome, note = exc.ladder, "failed", None
        try:
            outcome, note = await self._attempt(ladder)
        finally:
            self.holds.pop(ladder, None)
            self.tasks.pop(ladder, None)
            delays = self._delays.setdefault(ladder, backoff(*RETRY_DELAYS))
            self._next_try[ladder] = self.clock() + next(delays)
            metrics.STORE_REBUILDS.labels(ladder, outcome).inc()
        if note is None:
            self.notes.pop(ladder, None)
            return
        self.notes[ladder] = note
        if outcome != "busy":  # busy: the other's rebuild may have ended, the ladder back by now
            self.report(exc)

    async def _attempt(self, ladder: str) -> tuple[str, str | None]:
        """Rebuild `ladder`: its outcome (the metric's label) and what readiness says then."""
        try:
            summary = await self.rebuild(ladder)
        except HistoryTruncated as error:
            self.refused.add(ladder)
            note = refused_note(self.settings, error)
            log.error("ladder %r: %s", ladder, note)
            return "refused", note
        except RerateRunning as error:
            log.warning("%s; not rebuilding it here", error)
            return "busy", f"not rebuilt here: {error}; waiting for it"
        except Exception as error:  # any failure: the ladder stays held, tried again later
            log.error("rebuilding ladder %r failed; tried again later", ladder, exc_info=error)
            return "failed", f"its automatic rebuild failed ({error!r}); tried again later"
        log.warning("ladder %r rebuilt from topic %r: %s", ladder, self.settings.topic_matches, summary)
        return "rebuilt", None

    async def stop(self) -> None:
        """Cancel the rebuilds running (the worker stops): each releases its lock."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class TopicRebuild:
    """``rebuild(ladder)`` for `AutoRebuild`: lock, pick the start (a checkpoint or the topic's
    start), check the topic still holds what it needs, rebuild (steps 1-3 of the module docstring), on a store of its own
    (`open_store`), so that the worker's connections and store metrics stay the batches'."""

    def __init__(
        self, settings: Settings, ladders: Ladders, open_store: Callable[[], StateStore], lease: float = LEASE
    ) -> None:
        self.settings, self.ladders, self.open_store, self.lease = settings, ladders, open_store, lease
        self.owner = new_owner()

    async def __call__(self, ladder: str) -> str:
        store = self.open_store()
        try:
            async with (
                rebuild_lock(store, ladder, self.owner, self.lease),
                configured_sink(self.settings) as sink,
            ):
                summary, produced, start, _ = await recover(
                    self.settings, self.ladders, ladder, store, sink, batch_size=self.settings.batch_size
                )
        finally:
            await store.close()
        origin = f"from {start.line()}" if start is not None else "from the topic's start"
        return f"{origin}: {summary.line()}; {produced} rating changes produced to {self.settings.topic_updates!r}"


@contextlib.asynccontextmanager
async def rebuild_lock(store: StateStore, ladder: str, owner: str, lease: float) -> AsyncIterator[None]:
    """Hold `ladder`'s re-rate lock while the block runs (renewed every third of `lease`):
    `RerateRunning` if another holds it. Taking it opens an empty staging generation (and hands
    back one a crashed re-rate left); both are dropped, and the lock released, at the end."""
    _, abandoned = await store.begin_rerate(ladder, owner, lease, None)

    async def renew() -> None:
        while True:
            await asyncio.sleep(lease / 3)
            await store.renew(ladder, owner, lease)

    keeper = asyncio.create_task(renew())
    try:
        if abandoned is not None:
            await store.drop_generation(ladder, abandoned)
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await keeper
        staging = await store.abort_rerate(ladder, owner)
        if staging is not None:
            await store.drop_generation(ladder, staging)
