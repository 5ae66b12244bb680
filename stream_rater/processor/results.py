"""What processing a batch returns, and the errors it raises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from stream_rater.contracts import MatchFinished
from stream_rater.rating.base import Rating
from stream_rater.store.base import Event

#: ``_new(Cls, values)`` makes a named tuple without its Python-level ``__new__`` (about
#: half the cost); the hot loop builds several per player and match.
_new = tuple.__new__


class MatchResult(NamedTuple):
    """One match's rating-changed events; ``duplicate`` = it had been applied before,
    ``voided`` = an operator voided it, so it was not applied (and has no events);
    ``unrated`` = why the match is recorded but changes no rating (`Rules.unrated_reason`),
    or None. A season-start record's events are its players' soft resets.

    A duplicate carries the events its marker still holds — to re-emit, since they may never
    have reached the broker — or none once they are known produced (its marker was shrunk).

    A named tuple (like `PlayerState`): one is made per match. Make one by what happened to
    the match: `applied`, `duplicate`, `voided`, `unrated`."""

    match: MatchFinished
    events: list[Event]
    duplicate: bool
    voided: bool = False
    unrated: str | None = None

    @staticmethod
    def applied(match: MatchFinished, events: list[Event]) -> MatchResult:
        """`match` newly applied, with its `events`."""
        return _new(MatchResult, (match, events, False, False, None))

    @staticmethod
    def duplicate_of(match: MatchFinished, events: list[Event]) -> MatchResult:
        """`match` found applied before; `events` are what its marker still holds."""
        return _new(MatchResult, (match, events, True, False, None))

    @staticmethod
    def voided_by_operator(match: MatchFinished) -> MatchResult:
        """`match` voided by an operator: not applied, no events."""
        return _new(MatchResult, (match, [], False, True, None))

    @staticmethod
    def unrated_because(match: MatchFinished, reason: str) -> MatchResult:
        """`match` recorded as applied but rating no one, for `reason`."""
        return _new(MatchResult, (match, [], False, False, reason))


@dataclass(slots=True)
class BatchResult:
    """Results in input order, how many commits were refused and retried, and the
    prediction-quality increments committed (ladder, scorer, `processor.quality` sums)."""

    results: list[MatchResult] = field(default_factory=list)
    conflicts: int = 0
    quality: list[tuple[str, str, dict[str, float]]] = field(default_factory=list)

    @property
    def events(self) -> list[Event]:
        """Every rating-changed event of the batch, in order (duplicates re-emit those their
        markers still hold)."""
        return [e for r in self.results for e in r.events]


def is_late(result: MatchResult) -> bool:
    """True when the match finished before one of its players' last applied match.

    The rule: matches of a ladder are applied in log order, whatever their `finished_at`. A
    late match adds no inactivity time for that player (elapsed 0: the model's time-scaled
    dynamics see no gap), leaves the player's `last_played` where it was, and marks that
    player's rating-changed event ``"late": true``; the worker counts such matches.
    """
    return any("late" in event for event in result.events)


def points_created(result: MatchResult, display: Callable[[Rating], float]) -> float:
    """The display-rating points `result`'s match created: the sum over its rating-changed
    events of after − before display rating (`display`: the ladder model's). Zero for a
    zero-sum update (Elo between established players); rules and models that add or remove
    points (a ``rating_floor``, per-game caps, new players' larger K) show here."""
    total = 0.0
    for event in result.events:
        change = event.get("rating_delta")  # the same difference, in the event already
        if change is None:
            before, after = event["before"], event["after"]
            change = display(Rating(after["mu"], after["sigma"])) - display(
                Rating(before["mu"], before["sigma"])
            )
        total += change
    return total


class NonFiniteRating(ArithmeticError):
    """A model returned NaN or infinity; the match is refused rather than stored."""


class Unratable(Exception):
    """Rating a match of the batch raised `cause` (the model, its rules or the events built
    from it; pure code, so the same match on the same states raises again): input the worker
    dead-letters and the offline tools skip (`process_skipping`), never infrastructure."""

    def __init__(self, ladder: str, cause: Exception) -> None:
        super().__init__(f"ladder {ladder!r}: {type(cause).__name__}: {cause}")
        self.ladder, self.cause = ladder, cause


class TooManyConflicts(RuntimeError):
    """A batch kept conflicting with concurrent commits beyond the retry limit."""


class StoreLost(RuntimeError):
    """The store holds less of a ladder than was committed to it: its data was lost (a Redis
    restart without persistence, a failover to a replica that missed writes, FLUSHDB,
    eviction). Applying more matches on top would silently rate them onto wrong states."""

    def __init__(self, ladder: str, reason: str) -> None:
        super().__init__(
            f"ladder {ladder!r}: {reason}; rebuild it from the matches topic "
            f"(stream-rater replay --from-topic --ladder {ladder} --store URL)"
        )
        self.ladder = ladder
