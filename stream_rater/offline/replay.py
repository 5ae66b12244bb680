"""Offline processing of match files through the same `Processor` the stream worker uses.

`replay` validates each record (a bad one is reported with its ``file:line`` and skipped,
or stops the run with ``strict``), feeds valid matches to the processor in batches and hands
the rating-changed events to a sink.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import Limits, MatchFinished, ValidationError, parse_match
from stream_rater.offline.adapters import InputRecord
from stream_rater.processor import BatchResult, MatchResult, Processor, Skipped, process_skipping


class BadRecord(ValueError):
    """A record that could not be used, with where it came from."""


@dataclass(slots=True)
class ReplaySummary:
    """Counts of one replay run."""

    read: int = 0
    applied: int = 0
    duplicates: int = 0
    rejected: int = 0
    #: Matches the model could not rate (`processor.Skipped`): skipped, as the worker
    #: dead-letters them.
    skipped: int = 0
    events: int = 0
    conflicts: int = 0
    round_trips: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        """A one-line human summary."""
        rate = self.applied / self.seconds if self.seconds > 0 else 0.0
        return (
            f"{self.read} read, {self.applied} applied, {self.duplicates} already applied, "
            f"{self.rejected} rejected, {self.skipped} skipped; {self.events} rating changes "
            f"in {self.seconds:.2f} s "
            f"({rate:,.0f} matches/s, {self.round_trips} store round trips)"
        )


def validated(
    records: Iterable[InputRecord],
    ladders: Ladders,
    *,
    limits: Limits | None = None,
    ladder: str | None = None,
    on_error: Callable[[str, str], None],
    strict: bool = False,
) -> Iterable[MatchFinished]:
    """Valid matches of `records`; each bad one goes to ``on_error(where, reason)`` (or
    raises `BadRecord` when `strict`). `ladder` overrides the events' ladder."""
    limits = limits or Limits()
    for record in records:
        reason = record.error
        match = None
        if reason is None:
            event = record.event
            if ladder is not None and isinstance(event, dict):
                event = {**event, "ladder": ladder}
            try:
                match = parse_match(event, ladders, limits)
            except ValidationError as exc:
                reason = str(exc)
        if match is None:
            if strict:
                raise BadRecord(f"{record.where}: {reason}")
            on_error(record.where, str(reason))
            continue
        yield match


#: Called with each batch's result and where its matches are in the matches topic, before
#: their markers count as produced (see `replay`).
BatchHook = Callable[[BatchResult, Sequence[tuple[int, int] | None]], Awaitable[None]]


async def replay(
    matches: Iterable[MatchFinished],
    processor: Processor,
    *,
    batch_size: int = 1000,
    on_result: Callable[[MatchResult], None] | None = None,
    on_skip: Callable[[Skipped], None] | None = None,
    where: Iterable[tuple[int, int] | None] | None = None,
    on_batch: BatchHook | None = None,
) -> ReplaySummary:
    """Apply `matches` in order, `batch_size` at a time; `on_result` sees every result.
    `where` gives each match's (partition, offset) in the matches topic (the commits then
    record how far into it the ladder's states go, as a worker's do). Once `on_result` has
    seen a batch's results and `on_batch` (awaited) has had the batch with the places of its
    results, their markers count as produced (`Processor.produced`). A match the model cannot
    rate is skipped as the worker dead-letters it (`process_skipping`) and goes to `on_skip`.

    After each batch the objects alive so far are frozen out of the cyclic garbage
    collector: a long replay keeps every result in memory (store markers, histories), and
    rescanning them at each full collection would make the run quadratic.
    """
    summary = ReplaySummary()
    start = time.perf_counter()
    trips_before = processor.store.round_trips
    batch: list[MatchFinished] = []
    places: list[tuple[int, int] | None] = []
    located = iter(where) if where is not None else itertools.repeat(None)
    hooks = _Hooks(on_result, on_skip, on_batch)
    for match in matches:
        summary.read += 1
        batch.append(match)
        places.append(next(located))
        if len(batch) >= batch_size:
            await _apply(processor, batch, places if where is not None else None, summary, hooks)
            batch.clear()
            places.clear()
    if batch:
        await _apply(processor, batch, places if where is not None else None, summary, hooks)
    summary.seconds = time.perf_counter() - start
    summary.round_trips = processor.store.round_trips - trips_before
    return summary


@dataclass(frozen=True, slots=True)
class _Hooks:
    """`replay`'s callbacks."""

    on_result: Callable[[MatchResult], None] | None
    on_skip: Callable[[Skipped], None] | None
    on_batch: BatchHook | None


async def _apply(
    processor: Processor,
    batch: list[MatchFinished],
    places: list[tuple[int, int] | None] | None,
    summary: ReplaySummary,
    hooks: _Hooks,
) -> None:
    """One batch of `replay`: process it, count it into `summary`, call the hooks, then
    mark its results produced (module docs of `replay`)."""
    result, skipped = await process_skipping(processor, batch, places)
    summary.skipped += len(skipped)
    gone = {id(skip.match) for skip in skipped}
    if hooks.on_skip is not None:
        for skip in skipped:
            hooks.on_skip(skip)
    placed = [place for match, place in zip(batch, places or itertools.repeat(None)) if id(match) not in gone]
    gc.freeze()
    summary.conflicts += result.conflicts
    for r in result.results:
        summary.duplicates += r.duplicate
        summary.applied += not r.duplicate
        summary.events += len(r.events)
        if hooks.on_result is not None:
            hooks.on_result(r)
    if hooks.on_batch is not None:
        await hooks.on_batch(result, placed)
    processor.produced(result)
