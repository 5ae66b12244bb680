"""The inactivity decay rule: ``decay_after_days`` D and ``decay_per_day`` R — a ranked player
idle for more than D days loses R display points per further whole idle day, never going
below the ladder's ``rating_floor`` or the starting rating (whichever is higher; a player
already below it keeps their rating).

The decay is applied in log time, so that it is replay-exact: when a ranked player's next
rated match comes (the time between their last match and this match's ``finished_at``), their
state is lowered before the model rates the match, and the decayed state is what is written,
ranked on the leaderboard and sent in the events (their ``before``). A read shows the decay
accrued so far (as of the read's clock) in ``rating_now`` and the player's ``rating``, the rating
their next match would start from — as it shows σ grown with time on a model with dynamics —
while the leaderboard orders by the stored ratings, which a replay of the log reproduces.
"Ranked" is the leaderboard's eligibility by games (and the newcomers rule), activity aside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from stream_rater.config.rules.base import DAY, Rule, RuleError, Standing, real
from stream_rater.rating.base import Rating, RatingModel


@dataclass(frozen=True, slots=True)
class Decay(Rule):
    """``decay_after_days`` D (None: off) and ``decay_per_day`` R (0: off)."""

    PARAMS: ClassVar[dict[str, Any]] = {"decay_after_days": None, "decay_per_day": 0.0}
    ADJUSTS: ClassVar[bool] = True

    decay_after_days: float | None = None
    decay_per_day: float = 0.0

    def __post_init__(self) -> None:
        for name in ("decay_after_days", "decay_per_day"):
            value = getattr(self, name)
            if value is not None and not (real(value) and value >= 0):
                raise RuleError(f"{name}={value}: must be a number >= 0")
        if (self.decay_after_days is None) != (not self.decay_per_day):
            raise RuleError(
                f"decay_after_days={self.decay_after_days}, decay_per_day={self.decay_per_day}: "
                "inactivity decay needs both (days before it starts, points a day after)"
            )

    def adjusted(
        self, model: RatingModel, rating: Rating, standing: Standing, at: float, bound: float
    ) -> Rating:
        last, after = standing.last_played, self.decay_after_days
        if last is None or after is None or at <= last:
            return rating
        days = math.floor((at - last) / DAY - after)
        if days <= 0:
            return rating
        display = model.display(rating)
        target = max(display - self.decay_per_day * days, min(display, bound))
        if not target < display:
            return rating
        extra = rating[2] if len(rating) > 2 else None  # a model may build (mu, sigma) by tuple.__new__
        return Rating(rating.mu + (target - display), rating.sigma, extra)  # display = μ + a term without μ
