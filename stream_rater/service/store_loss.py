"""Noticing, when a partition is assigned, that the store lost what was applied from it.

A worker's own watermark check (`Processor`) sees a loss only while it runs; a worker that
starts, or that gets a partition in a rebalance, remembers nothing. What survives both is
the consumer group's committed offset of the partition (how far the matches were applied and
their events produced) and the store's positions (``p:<partition>`` of each ladder's live
generation: the offset after the last record of the ladder applied). If the group committed
beyond the furthest position a ladder of the store shows for the partition, the records in
between were applied to a store that no longer has them — or were records that never reach
the store: dead letters, voided matches, redeliveries of applied ones. So those records
are read back (`SCAN_LIMIT` at most) and the valid matches among them looked up: one that is
neither applied nor voided means its ladder was lost.

Legitimate cases, not losses: a group with no committed offset (a fresh store and group); a
group that committed less than the store has (a worker died between its Redis commit and
its offset commit: the batch is redelivered and found applied); dead letters, voids and
duplicates at the partition's end.

A lost ladder is held (its batches are neither applied nor acknowledged), /readyz says so with
the offsets, and ``stream_rater_store_losses_total`` counts it, until it is rebuilt
(``stream-rater replay --from-topic --ladder L --store URL``): the check then finds the
matches it found missing applied.

Limits: a ladder whose unapplied matches all lie beyond `SCAN_LIMIT` records of non-applying
ones is not noticed; on a partition shared by several ladders, one whose lost records all lie
after another ladder's furthest position is noticed only if it has a match in the records read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import Limits, ValidationError
from stream_rater.contracts.codecs import DecodeError, decode_match
from stream_rater.kafka import LogRecord
from stream_rater.processor import StoreLost
from stream_rater.service.ladder_health import LadderHealth
from stream_rater.store import ReadStore

log = logging.getLogger(__name__)

#: Records read back at most between the store's position and the group's committed offset.
SCAN_LIMIT = 1000

#: Seconds between checks whether a lost ladder was rebuilt, while no batch asks.
RECHECK_INTERVAL = 5.0

#: The group's committed offsets (0 where none) of the matches topic's given partitions.
Committed = Callable[[Sequence[int]], Awaitable[dict[int, int]]]
#: The records of one partition of the matches topic from an offset to (before) another.
ReadRange = Callable[[int, int, int], Awaitable[list[LogRecord]]]


@dataclass(frozen=True, slots=True)
class Loss:
    """A ladder found lost: why, and the matches found missing (it is back once all are applied)."""

    error: StoreLost
    missing: tuple[str, ...]


class LossGuard:
    """Checks each assigned partition (`assigned`) before its batches are applied (`ready`),
    and holds the batches of lost ladders (`hold`) until they are rebuilt.

    `health` is told of each ladder found lost (`LadderHealth.report_loss`, once per ladder)
    and of each back (`recovered`)."""

    def __init__(
        self,
        store: ReadStore,
        ladders: Ladders,
        committed: Committed,
        read: ReadRange,
        *,
        health: LadderHealth,
        limits: Limits = Limits(),
    ) -> None:
        self.store, self.ladders, self.limits = store, ladders, limits
        self.committed, self.read = committed, read
        self.report, self.recovered = health.report_loss, health.recovered
        #: Ladder → its loss, while it is held.
        self.lost: dict[str, Loss] = {}
        #: Ladder → what to raise while the worker rebuilds it (`service.auto_rebuild`): held
        #: even where the check above or the processor's watermark would let it through.
        self.rebuilding: dict[str, StoreLost] = health.rebuilding
        self._checks: dict[int, asyncio.Future[None]] = {}
        self._watch: asyncio.Task[None] | None = None

    def assigned(self, partitions: Iterable[int]) -> None:
        """Start checking `partitions` (newly assigned to this worker)."""
        partitions = sorted(set(partitions))
        if partitions:
            check = asyncio.ensure_future(self._check(partitions))
            self._checks.update(dict.fromkeys(partitions, check))

    def in_flight(self) -> list[str]:
        """One line per partition's check and per lost ladder, for the operator's dump."""
        lines = []
        for partition, check in sorted(self._checks.items()):
            state = (
                "pending"
                if not check.done()
                else "cancelled"
                if check.cancelled()
                else (f"failed {check.exception()!r}" if check.exception() is not None else "done")
            )
            lines.append(f"loss guard p{partition}: check {state}")
        return lines + [
            f"loss guard: ladder {ladder!r} held: {loss.error}" for ladder, loss in self.lost.items()
        ]

    async def ready(self, partitions: Iterable[int]) -> None:
        """Return once `partitions` are checked (a check that failed runs again; its error is
        raised, for the caller to retry)."""
        for partition in set(partitions):
            check = self._checks.get(partition)
            if check is None or (check.done() and check.exception() is not None):
                self.assigned([partition])
            await self._checks[partition]

    async def hold(self, ladders: Iterable[str]) -> None:
        """Raise `StoreLost` for the first of `ladders` being rebuilt or still lost (asking the
        store again)."""
        ladders = set(ladders)
        for ladder in ladders & set(self.rebuilding):
            raise self.rebuilding[ladder]
        for ladder in ladders & set(self.lost):
            loss = self.lost.get(ladder)
            if loss is not None and not await self._back(ladder):
                raise loss.error

    async def _check(self, partitions: list[int]) -> None:
        """Compare the group's committed offsets of `partitions` with the store's positions."""
        committed = await self.committed(partitions)
        generations = {name: await self.store.generations(name) for name in self.ladders}
        for partition in partitions:
            positions = {name: g.positions.get(partition, 0) for name, g in generations.items()}
            await self._check_partition(partition, committed.get(partition, 0), positions)
        if self.lost and self._watch is None:
            self._watch = asyncio.ensure_future(self._recheck())

    async def _check_partition(self, partition: int, committed: int, positions: dict[str, int]) -> None:
        """Hold the ladders with matches the group committed on `partition` and the store lacks."""
        reached = max(positions.values(), default=0)
        if committed <= reached:
            return
        records = await self.read(partition, reached, min(committed, reached + SCAN_LIMIT))
        where = (
            f"partition {partition}: the consumer group committed offset {committed}, "
            f"the store's positions reach {reached}"
        )
        for ladder, missing in (await self._missing(records)).items():
            match_id, offset = missing[0]
            error = StoreLost(
                ladder,
                f"{where} ({ladder!r} at {positions.get(ladder, 0)}), and match {match_id!r} "
                f"(offset {offset}) of those is not in it",
            )
            if ladder not in self.lost:
                self.lost[ladder] = Loss(error, tuple(m for m, _ in missing))
                self.report(error)

    async def _missing(self, records: list[LogRecord]) -> dict[str, list[tuple[str, int]]]:
        """Per ladder, the valid matches of `records` (match id, offset) the store has neither
        applied nor voided."""
        found: dict[str, list[tuple[str, int]]] = {}
        for record in records:
            try:
                match = decode_match(
                    record.value, self.ladders, self.limits, record_time=record.timestamp / 1000.0
                )
            except (DecodeError, ValidationError):
                continue  # dead-lettered: never in the store
            found.setdefault(match.ladder, []).append((match.match_id, record.offset))
        missing = {}
        for ladder, matches in found.items():
            snapshot = await self.store.read(ladder, [], [], [m for m, _ in matches])
            absent = [(m, o) for m, o in matches if m not in snapshot.applied and m not in snapshot.voided]
            if absent:
                missing[ladder] = absent
        return missing

    async def _back(self, ladder: str) -> bool:
        """True (and the ladder no longer held) once the store has every match found missing
        and nobody holds the ladder's re-rate lock (a rebuild by this worker or another may
        have applied those matches and not yet the rest)."""
        loss = self.lost.get(ladder)
        if loss is None:
            return True
        if ladder in self.rebuilding or (await self.store.generations(ladder)).lock_owner is not None:
            return False
        snapshot = await self.store.read(ladder, [], [], list(loss.missing))
        if not all(m in snapshot.applied or m in snapshot.voided for m in loss.missing):
            return False
        if self.lost.pop(ladder, None) is not None:
            log.warning("ladder %r is in the store again (rebuilt); applying it", ladder)
            self.recovered(ladder)
        return True

    async def _recheck(self) -> None:
        """Every `RECHECK_INTERVAL` s, whether the lost ladders are back (a rebuild), so that
        readiness says so even while no batch of theirs arrives."""
        try:
            while self.lost:
                await asyncio.sleep(RECHECK_INTERVAL)
                for ladder in list(self.lost):
                    try:
                        await self._back(ladder)
                    except Exception as exc:  # the store not answering: readiness says so; next round
                        log.warning("checking ladder %r again failed: %r", ladder, exc)
        finally:
            self._watch = None
