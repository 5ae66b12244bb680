"""Making checkpoints: `Checkpointer` keeps a ladder replayed in memory (`Replica`) from its
last usable checkpoint, catches it up with the live ladder, and at the cadence writes a
checkpoint that is verified first.

Who writes: a process of its own (``stream-rater checkpoint``, once or ``--loop``), never the
worker. It only reads the live store and the matches topic, so live rating never waits for
it: a checkpoint sink that is down delays checkpoints (the loop retries; the age metric
alerts), nothing else.

Verified: before a checkpoint is written, the live ladder's states are read between two reads
of its positions (`live_at`); the replica is taken at the first, and every player and effect
— but those of matches the live worker applied between the two reads, which moved meanwhile
and are compared at the next checkpoint — must equal the live state exactly (a replay is the
stream, by construction). Written: chunks, then the manifest; then read back, its digest
checked (`decode`); only then are the ladder's checkpoints older than the correction window
dropped (but the newest of those: a void of the window's oldest match starts from it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stream_rater.checkpoints.format import Checkpoint, LadderState, Manifest
from stream_rater.checkpoints.replica import Entry, Replica
from stream_rater.checkpoints.select import ReplayNeeds, latest_usable
from stream_rater.checkpoints.sink import CheckpointSink
from stream_rater.config.ladders import Ladders
from stream_rater.config.settings import Settings
from stream_rater.kafka import LogReader, home_partition, ladder_history, partition_count
from stream_rater.store.base import PlayerState, StateStore, Void

#: A ladder's live players' and effects' states.
_States = tuple[dict[str, PlayerState], dict[str, PlayerState]]

log = logging.getLogger(__name__)


class Unverified(RuntimeError):
    """A checkpoint's states differ from the live ladder's: not written."""


@dataclass(slots=True)
class Round:
    """What one `Checkpointer.round` did."""

    ladder: str
    written: Manifest | None = None
    applied: int = 0
    compared: int = 0
    #: Players left out of the comparison: the live worker moved them during the live read.
    moving: int = 0
    dropped: list[str] = field(default_factory=list)
    skipped: str = ""

    def line(self) -> str:
        if self.written is None:
            return f"ladder {self.ladder!r}: no checkpoint ({self.skipped or 'not due'}); {self.applied} matches replayed"
        return (
            f"ladder {self.ladder!r}: checkpoint {self.written.id} at offsets {self.written.positions} "
            f"written and verified ({self.compared} states equal the live ones, {self.moving} moving left "
            f"for the next); {len(self.dropped)} older dropped"
        )


def differing(
    live: Mapping[str, PlayerState], replica: Mapping[str, PlayerState], skip: set[str]
) -> list[str]:
    """Ids whose state (all but the version) differs between `live` and `replica`, but `skip`."""
    ids = (set(live) | set(replica)) - skip
    return sorted(
        i
        for i in ids
        if i not in live or i not in replica or live[i][:4] + live[i][5:] != replica[i][:4] + replica[i][5:]
    )


class Checkpointer:
    """Checkpoints of `ladder` (see the module docstring): `round` once per call."""

    def __init__(
        self, settings: Settings, ladders: Ladders, store: StateStore, sink: CheckpointSink, ladder: str
    ) -> None:
        self.settings, self.ladders, self.store, self.sink, self.ladder = (
            settings,
            ladders,
            store,
            sink,
            ladder,
        )
        self.replica: Replica | None = None
        self.reader: LogReader | None = None
        self.pending: list[Entry] = []
        self.last_written = time.time()
        #: Set when a round wrote a checkpoint (the loop's age metric clears it).
        self.written = False
        #: Whether the newest checkpoint kept has other voids or parameters than the live ones
        #: (a correction died between its switch and rewriting its checkpoints), or none is kept
        #: of a ladder with voids or parameters (a correction from the topic's start dropped
        #: them all): a recovery of a lost store, which knows only the checkpoints', would undo
        #: the corrections. The next round writes one whatever the cadence.
        self.stale = False
        #: The live generation at the last round: a re-rate that switched since may have
        #: dropped the checkpoints (one from the topic's start drops them all), so `stale` is
        #: asked again even when the replica's voids and parameters still hold.
        self.generation: int | None = None

    async def close(self) -> None:
        if self.reader is not None:
            await self.reader.__aexit__(None, None, None)
            self.reader = None

    async def _restart(self, voids: dict[str, Void], params: dict[str, Any] | None) -> Replica:
        """A replica from the newest checkpoint usable with these voids and parameters."""
        await self.close()
        self.stale = await self._stale(voids, params)
        start = await latest_usable(self.sink, self.ladder, ReplayNeeds(voids, params))
        replica = await Replica(self.ladders, self.ladder, start, voids=voids, params=params).open()
        partitions = await self._partitions(start)
        self.reader = LogReader(
            self.settings, self.settings.topic_matches, dict(replica.positions), partitions
        )
        await self.reader.__aenter__()
        self.pending, self.replica = [], replica
        self.last_written = start.created if start is not None else time.time()
        return replica

    async def _stale(self, voids: Mapping[str, Void], params: Mapping[str, Any] | None) -> bool:
        """Whether the newest checkpoint kept has other voids or parameters than these, or none
        is kept while there are some (see `stale`)."""
        manifests = await self.sink.manifests(self.ladder)
        if not manifests:
            return bool(voids or params)
        newest = manifests[-1]
        return set(newest.voids) != set(voids) or dict(newest.params or {}) != dict(params or {})

    async def _partitions(self, start: Checkpoint | None) -> list[int]:
        live = await self.store.generations(self.ladder)
        count = await partition_count(self.settings, self.settings.topic_matches)
        return sorted(
            {home_partition(self.ladder, count), *live.positions, *(start.positions if start else {})}
        )

    async def _read(self) -> None:
        assert self.reader is not None
        records = await self.reader.read()
        found = await asyncio.to_thread(
            ladder_history, records, self.ladders, self.ladder, self.settings.limits()
        )
        self.pending += list(zip(found.matches, found.where))

    async def _apply_upto(self, positions: Mapping[int, int]) -> int:
        """Apply the pending entries before `positions`; how many."""
        ready = 0
        while ready < len(self.pending) and _before(self.pending[ready][1], positions):
            ready += 1
        assert self.replica is not None
        await self.replica.apply(self.pending[:ready])
        del self.pending[:ready]
        self.replica.advance(positions)
        return ready

    def due(self, force: bool) -> bool:
        """Whether the cadence (or `force`, or a `stale` newest checkpoint) asks for a
        checkpoint now."""
        replica = self.replica
        if replica is None or (replica.since == 0 and not self.stale):
            return False
        hours = (time.time() - self.last_written) / 3600
        return (
            force
            or self.stale
            or replica.since >= self.settings.checkpoint_every_matches
            or hours >= self.settings.checkpoint_every_hours
        )

    async def round(self, force: bool = False) -> Round:
        """Catch the replica up with the live ladder; when due, write a verified checkpoint."""
        report = Round(self.ladder)
        live = await self.store.generations(self.ladder)
        if live.lock_owner is not None:
            report.skipped = f"a re-rate of the ladder is running ({live.lock_owner})"
            return report
        voids = await self.store.voids(self.ladder)
        replica = self.replica
        if replica is None or replica.voids != voids or (replica.params or None) != (live.params or None):
            replica = await self._restart(voids, live.params)
        elif live.live != self.generation:
            self.stale = self.stale or await self._stale(voids, live.params)
        self.generation = live.live
        first, states, second = await self._live_at()
        if first is None:
            report.skipped = "the live generation switched meanwhile"
            return report
        assert self.reader is not None
        while not _covers(await self.reader.reached(), second):
            await self._read()
        report.applied = await self._apply_upto(first)
        if not self.due(force):
            return report
        await self._write(report, states, first, second)
        self.stale = self.stale and report.written is None
        return report

    async def _live_at(self) -> tuple[dict[int, int] | None, dict[str, _States], dict[int, int]]:
        """The live positions, the live states of the ladder and its shadows, and the positions
        after that read (None first: a re-rate switched the generation meanwhile)."""
        before = await self.store.generations(self.ladder)
        names = [self.ladder, *(s.name for s in self.ladders.get(self.ladder).shadows)]
        states = {n: (await self.store.players(n), await self.store.players(n, effects=True)) for n in names}
        after = await self.store.generations(self.ladder)
        if after.live != before.live:
            return None, states, after.positions
        return before.positions, states, after.positions

    async def _write(
        self, report: Round, live: dict[str, _States], first: dict[int, int], second: dict[int, int]
    ) -> None:
        """Verify the replica against `live`, write it, read it back, drop the older ones."""
        assert self.replica is not None
        checkpoint = await self.replica.checkpoint()
        moving = {
            p.id
            for m, w in self.pending
            if not _before(w, first) and _before(w, second)
            for t in m.teams
            for p in t.players
        }
        moving |= {
            e
            for m, w in self.pending
            if not _before(w, first) and _before(w, second)
            for t in m.teams
            for e in t.effects
        }
        states: dict[str, LadderState] = {self.ladder: checkpoint.state, **checkpoint.shadows}
        for name, (players, effects) in live.items():
            wrong = differing(players, states[name].players, moving) + differing(
                effects, states[name].effects, moving
            )
            if wrong:
                raise Unverified(
                    f"ladder {name!r}: checkpoint at {first} differs from the live states of {wrong[:5]}"
                )
            report.compared += len(players) + len(effects)
        report.moving = len(moving)
        manifest = await self.sink.write(checkpoint)
        await self.sink.load(manifest)  # read back: TornCheckpoint unless whole
        for old in expired(
            await self.sink.manifests(self.ladder), time.time() - self.settings.correction_window_hours * 3600
        ):
            await self.sink.drop(old)
            report.dropped.append(old.id)
        report.written, self.replica.since, self.last_written = manifest, 0, time.time()
        self.replica.segment = []
        self.written = True
        self.replica.start = checkpoint


def expired(manifests: list[Manifest], since: float) -> list[Manifest]:
    """Of `manifests` (oldest first), those a correction within the window (made at or after
    `since`) can no longer need: all made before it but the newest of those, the start of a
    void of the window's oldest match."""
    old = [m for m in manifests if m.created < since]
    return old[:-1]


def _before(where: tuple[int, int] | None, positions: Mapping[int, int]) -> bool:
    return where is None or where[1] < positions.get(where[0], 0)


def _covers(reached: Mapping[int, int], positions: Mapping[int, int]) -> bool:
    return all(reached.get(p, 0) >= o for p, o in positions.items())
