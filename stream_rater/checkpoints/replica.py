"""A ladder replayed in memory from a checkpoint (or from its start) through the worker's
`Processor`: what makes the next checkpoint (`Replica.checkpoint`), and what `verify` compares
the live ladder with. Shadows are rated beside it, as the worker rates them."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from stream_rater.checkpoints.format import Checkpoint
from stream_rater.checkpoints.state import SEED_MARKERS, capture, seed, with_params
from stream_rater.config.ladders import Ladders
from stream_rater.contracts import MatchFinished
from stream_rater.processor import Processor, Skipped, process_skipping
from stream_rater.store.memory import MemoryStore

#: A match and where its record is in the matches topic (None: from a file).
Entry = tuple[MatchFinished, tuple[int, int] | None]

#: Matches per processor batch of a replica.
BATCH = 1000


class Replica:
    """`ladder` replayed in memory with the `voids` and parameter overrides `params` the live
    generation has, from `start` (None: the ladder's beginning). Call `open` first."""

    def __init__(
        self,
        ladders: Ladders,
        ladder: str,
        start: Checkpoint | None = None,
        *,
        voids: Mapping[str, dict[str, Any]] | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.ladder, self.start, self.params = ladder, start, params
        self.base = ladders
        self.ladders = with_params(ladders, ladder, params)
        self.voids = dict(voids or {})
        self.store = MemoryStore()
        self.positions: dict[int, int] = dict(start.positions) if start else {}
        #: The last applied match ids, and the ids passed since the start (or the last checkpoint).
        self.applied: deque[str] = deque(start.applied if start else (), maxlen=SEED_MARKERS)
        self.segment: list[str] = []
        self.seasons: list[str] = list(start.seasons) if start else []
        self.skipped: list[Skipped] = []
        #: Matches applied since `open` (the cadence counts them).
        self.since = 0

    async def open(self) -> Replica:
        """Record the voids and seed the starting checkpoint's state (shadows included)."""
        await self.store.set_voids(self.ladder, self.voids, [], 0)
        if self.start is not None:
            await seed(self.store, self.base, self.start, None, shadows=True, whole=False)
        self.processor = Processor(self.ladders, self.store)
        return self

    def has(self, where: tuple[int, int] | None) -> bool:
        """Whether the record at `where` is before the replica's positions (already passed)."""
        return where is not None and where[1] < self.positions.get(where[0], 0)

    async def apply(self, entries: Sequence[Entry]) -> None:
        """Apply `entries` (those not passed yet), in order, a batch at a time."""
        todo = [e for e in entries if not self.has(e[1])]
        for i in range(0, len(todo), BATCH):
            chunk = todo[i : i + BATCH]
            result, skipped = await process_skipping(
                self.processor, [m for m, _ in chunk], [w for _, w in chunk]
            )
            self.skipped += skipped
            for r in result.results:
                if not r.duplicate and not r.voided:
                    self.applied.append(r.match.match_id)
                    self.since += 1
                    if r.match.season is not None:
                        self.seasons.append(r.match.match_id)
            for match, where in chunk:
                self.segment.append(match.match_id)
                if where is not None:
                    self.positions[where[0]] = max(self.positions.get(where[0], 0), where[1] + 1)

    def advance(self, positions: Mapping[int, int]) -> None:
        """Move the positions on to `positions` (records of other ladders passed)."""
        for partition, offset in positions.items():
            self.positions[partition] = max(self.positions.get(partition, 0), offset)

    async def checkpoint(self) -> Checkpoint:
        """The replica's state as a checkpoint at its positions."""
        shadows = {s.name: await capture(self.store, s.name) for s in self.ladders.get(self.ladder).shadows}
        return Checkpoint(
            self.ladder,
            dict(self.positions),
            await capture(self.store, self.ladder),
            shadows,
            list(self.applied),
            list(self.segment),
            dict(self.voids),
            dict(self.params) if self.params else None,
            list(self.seasons),
        )
