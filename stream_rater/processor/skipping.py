"""Matches that make the model fail on their own are skipped (offline) or dead-lettered (the
worker) by one rule, so that stream = replay holds for such input too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stream_rater.contracts import MatchFinished
from stream_rater.processor.results import BatchResult, Unratable

if TYPE_CHECKING:
    from stream_rater.processor.core import Processor


@dataclass(frozen=True, slots=True)
class Skipped:
    """A match that made the model fail on its own (`Unratable`): the worker dead-letters it
    and the offline tools skip it, so that both go on with the same states."""

    match: MatchFinished
    #: (partition, offset) of its record in the matches topic, None if not from there.
    where: tuple[int, int] | None
    error: Exception

    @property
    def reason(self) -> str:
        """``processing failed: <ExceptionType>: <message>`` (a dead letter's ``sr-reason``)."""
        return f"processing failed: {type(self.error).__name__}: {self.error}"

    def line(self) -> str:
        """One line for a report: the match, where it was, and why it was skipped."""
        at = "" if self.where is None else f" (matches[{self.where[0]}]@{self.where[1]})"
        return f"skipped match {self.match.match_id!r}{at} of ladder {self.match.ladder!r}: {self.reason}"


#: ``attempt(action)`` runs one `Processor.process` call (``action()``) and returns its result;
#: the worker's retries transient errors.
Attempt = Callable[[Callable[[], Awaitable[BatchResult]]], Awaitable[BatchResult]]


async def _once(action: Callable[[], Awaitable[BatchResult]]) -> BatchResult:
    return await action()


async def process_skipping(
    processor: Processor,
    matches: Sequence[MatchFinished],
    where: Sequence[tuple[int, int] | None] | None = None,
    *,
    attempt: Attempt = _once,
    on_skip: Callable[[Skipped], Awaitable[None]] | None = None,
) -> tuple[BatchResult, list[Skipped]]:
    """`processor.process(matches, where)`, and the matches skipped: when a match makes the
    model fail (`Unratable`), the batch is applied again one match at a time (committed
    matches are found applied) and each match that fails on its own is skipped. The one rule
    by which the worker dead-letters and `replay`, `verify` and re-rates skip, so that
    stream = replay holds for such input too. Any other error propagates.

    `on_skip` is awaited for each skipped match before any later match is applied: once a
    later match is committed, the ladder's stored position is past the skipped record, and a
    redelivery finds it applied (the worker dead-letters it there, so that a crash cannot lose
    it)."""
    try:
        return await attempt(lambda: processor.process(matches, where)), []
    except Unratable:
        pass
    result, skipped = BatchResult(), []
    for i, match in enumerate(matches):
        place = None if where is None else where[i]
        try:
            one = await attempt(lambda: processor.process([match], [place]))  # noqa: B023
        except Unratable as exc:
            skipped.append(Skipped(match, place, exc.cause))
            if on_skip is not None:
                await on_skip(skipped[-1])
            continue
        result.results += one.results
        result.conflicts += one.conflicts
        result.quality += one.quality
    return result, skipped
