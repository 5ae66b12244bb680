"""The newcomers rule: a player is *provisional* — flagged so in their events and reads, and
not ranked — while they have played fewer than ``provisional_games`` N rated games or, on a
model with σ, while σ > ``provisional_sigma`` S (the stored σ, as of their last match)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from stream_rater.config.rules.base import Rule, RuleError, Standing, real


@dataclass(frozen=True, slots=True)
class Newcomers(Rule):
    """``provisional_games`` N and ``provisional_sigma`` S (None: that half is off)."""

    PARAMS: ClassVar[dict[str, Any]] = {"provisional_games": None, "provisional_sigma": None}
    FLAG: ClassVar[str | None] = "provisional"

    provisional_games: int | None = None
    provisional_sigma: float | None = None

    def __post_init__(self) -> None:
        games, sigma = self.provisional_games, self.provisional_sigma
        if games is not None and (type(games) is not int or games < 0):
            raise RuleError(f"provisional_games={games}: must be an integer >= 0")
        if sigma is not None and not (real(sigma) and sigma >= 0):
            raise RuleError(f"provisional_sigma={sigma}: must be a number >= 0")

    def flag(self, games: int, sigma: float | None) -> bool:
        if self.provisional_games is not None and games < self.provisional_games:
            return True
        return self.provisional_sigma is not None and sigma is not None and sigma > self.provisional_sigma

    blocks = flag  # a provisional player is not ranked

    def unranked(self, standing: Standing) -> str | None:
        games, sigma = standing.games, standing.sigma
        if self.provisional_games is not None and games < self.provisional_games:
            return f"provisional, {games} of {self.provisional_games} games played"
        if self.flag(games, sigma):
            return f"provisional, sigma {sigma:.4g} above {self.provisional_sigma}"
        return None
