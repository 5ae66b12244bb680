"""The build step of a re-rate: the ladder's history applied to the staging generation."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from stream_rater.corrections.planning import Entry, Progress
from stream_rater.processor import Processor, process_skipping
from stream_rater.store.base import Event


def covers(reached: Mapping[int, int], positions: Mapping[int, int]) -> bool:
    """True when the topic was read at least up to the live positions."""
    return all(reached.get(p, 0) >= offset for p, offset in positions.items())


def not_delivered(
    held: Mapping[str, list[Event]], where: Mapping[str, tuple[int, int] | None], committed: Mapping[int, int]
) -> dict[str, list[Event]]:
    """Of `held` (match id → the events its marker still holds), the matches whose events are
    not known to be with the broker. A worker acknowledges a batch only once its events are
    with the broker, so a match whose record (`where`) is below the consumer group's
    `committed` offset of its partition had them produced: its marker only waits for the
    ladder's next commit to shrink. Sending those again would hand subscribers duplicates."""

    def acknowledged(at: tuple[int, int] | None) -> bool:
        return at is not None and at[1] < committed.get(at[0], 0)

    return {m: events for m, events in held.items() if not acknowledged(where.get(m))}


#: The fewest matches a build applies in one processor batch, however slow they are.
MIN_CHUNK = 10


class Build:
    """The staging generation's progress through the history. Its processor batches hold at
    most `batch_size` matches and take about `budget` seconds at most: the rating is CPU work
    on the event loop the re-rate's lock keeper shares, so a batch that took the whole lease
    (a big free-for-all ladder on a loaded machine) would let the lock expire, every time."""

    def __init__(
        self,
        processor: Processor,
        entries: list[Entry],
        batch_size: int,
        recent: int,
        progress: Progress | None,
        budget: float,
    ) -> None:
        self.processor, self.batch_size, self.progress = processor, batch_size, progress
        self.budget, self.chunk = budget, min(batch_size, MIN_CHUNK)  # the first batch measures the pace
        self.pending: list[Entry] = list(entries)
        self.applied = 0  # matches newly applied
        self.done = 0  # entries processed (applied, voided, duplicates or skipped)
        #: A line per match the model could not rate (skipped, as the worker dead-letters it).
        self.skipped: list[str] = []
        #: The ids of the last `keep` matches processed, oldest first, with where their
        #: records are (None: from a file).
        self.recent: OrderedDict[str, tuple[int, int] | None] = OrderedDict()
        self.keep = recent

    def add(self, entries: list[Entry]) -> None:
        self.pending += entries

    async def apply_upto(self, positions: Mapping[int, int]) -> list[Entry]:
        """Apply the pending entries the live generation has applied (files' entries, and
        topic records before its positions; all of them when it has no position); returns
        them."""

        def live_has(entry: Entry) -> bool:
            where = entry[1]
            return where is None or not positions or where[1] < positions.get(where[0], 0)

        ready = 0
        while ready < len(self.pending) and live_has(self.pending[ready]):
            ready += 1
        start = 0
        while start < ready:
            chunk = self.pending[start : min(start + self.chunk, ready)]
            began = time.perf_counter()
            result, skipped = await process_skipping(
                self.processor, [m for m, _ in chunk], [w for _, w in chunk]
            )
            self._pace(time.perf_counter() - began, len(chunk))
            self.skipped += [skip.line() for skip in skipped]
            newly = [r for r in result.results if not r.duplicate and not r.voided]
            self.applied += len(newly)
            self.recent.update((match.match_id, where) for match, where in chunk[-self.keep :])
            while len(self.recent) > self.keep:
                self.recent.popitem(last=False)
            self.done += len(chunk)
            if self.progress is not None:
                self.progress(self.done, self.done + len(self.pending) - start - len(chunk))
            start += len(chunk)
            await asyncio.sleep(0)  # the lock keeper's turn
        applied = self.pending[:ready]
        del self.pending[:ready]
        return applied

    def _pace(self, seconds: float, matches: int) -> None:
        """Size the next batch so that it takes about half the budget at this batch's pace."""
        per_match = seconds / matches
        fits = int(self.budget / 2 / per_match) if per_match > 0 else self.batch_size
        self.chunk = max(MIN_CHUNK, min(self.batch_size, fits))


def players_of(entries: Iterable[Entry]) -> set[str]:
    """The ids of every player of the entries' matches."""
    return {player.id for match, _ in entries for team in match.teams for player in team.players}


def touched(so_far: set[str] | None, entries: Sequence[Entry]) -> set[str] | None:
    """`so_far` and the players of `entries`; None (every player) once a season-start record
    is among them, since a season moves every player of the ladder."""
    if so_far is None or any(match.season is not None for match, _ in entries):
        return None
    return so_far | players_of(entries)
