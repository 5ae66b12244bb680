"""The interface of a ladder rule as a plug-in (`Rule`), and what rules share."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from stream_rater.rating.base import Rating, RatingModel

#: Seconds in one day of ``leaderboard_active_days``.
DAY = 86_400.0


class RuleError(ValueError):
    """A ladder-rule parameter that cannot be used; the message names it."""


class Standing(NamedTuple):
    """What a rule sees of a player: rated games and σ (None on a model without one) as of
    their last match, and when that was (None: never played)."""

    games: int
    sigma: float | None
    last_played: float | None = None


class Rule:
    """A ladder rule as a plug-in: one module of this package, listed in `PLUGINS`. Each hook
    has a neutral default, so a rule overrides only what it changes."""

    __slots__ = ()

    #: The parameters the rule takes, with their defaults (the rule is off while all are).
    PARAMS: ClassVar[dict[str, Any]] = {}
    #: The flag the rule adds to a player's rating-changed events and read rows (a field of
    #: the event schema), or None.
    FLAG: ClassVar[str | None] = None
    #: Whether `adjusted` can change a state (the planner skips the call otherwise).
    ADJUSTS: ClassVar[bool] = False

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Rule | None:
        """The rule with a ladder's `params` (its own among them, validated: `RuleError`
        naming the first bad one), or None when the ladder does not use it."""
        own = {k: params[k] for k in cls.PARAMS if k in params and params[k] != cls.PARAMS[k]}
        return cls(**own) if own else None

    @property
    def params(self) -> dict[str, Any]:
        """The ladder parameters this rule stands for (those `of` built it from): the ones set
        away from their defaults, so that a ladder can be configured from a rule object."""
        return {k: v for k, default in self.PARAMS.items() if (v := getattr(self, k)) != default}

    def blocks(self, games: int, sigma: float | None) -> bool:
        """Whether the rule keeps a player with `games` rated games and σ `sigma` off the
        leaderboard (asked for every player a match writes: keep it cheap)."""
        return False

    def unranked(self, standing: Standing) -> str | None:
        """Why a player in `standing` may not be ranked (the read API's words), or None."""
        return None

    def flag(self, games: int, sigma: float | None) -> bool:
        """The value of `FLAG` for such a player (asked for every event: keep it cheap)."""
        return False

    def adjusted(
        self, model: RatingModel, rating: Rating, standing: Standing, at: float, bound: float
    ) -> Rating:
        """`rating` as a rated match at `at` starts from (never below display `bound`, the
        ladder's floor or starting rating, whichever is higher); `rating` when unchanged."""
        return rating


def real(value: Any) -> bool:
    """Whether a parameter's `value` is a finite number (not a bool)."""
    return type(value) in (int, float) and math.isfinite(value)
