"""Score-Per-Hour Elo with per-game caps (ZoneStats, *Player Rating*, equations 1–6), for
drop-in/drop-out games where players join and leave at any time.

For every pair of rated players i, j on different teams (every other player in a
free-for-all, i.e. when each team has one player; team-mates are never compared):

1. predicted = 1 / (1 + exp((r_j − r_i)/T))                                  (eq. 1)
2. result = 1 / 0 / 0.5 as SPH_i = score_i / hours_i is >, <, = SPH_j;
   indiv = result − predicted                                               (eq. 2)
3. indiv ×= GAME_MULT × min(MAX_GAME_LENGTH, minutes_i, minutes_j)          (eq. 3)
4. offset_i = Σ_j indiv_ij                                                  (eq. 4)
5. the player with the largest |offset| sets
   scale = min(1, GAME_MULT × that player's minutes / |offset|)             (eq. 5)
6. every player's final offset = offset × scale                             (eq. 6)

Each pair's two terms are exact negatives, and one common scale keeps the game zero-sum
for any team sizes. New players start at ``initial = 500``; states have ``sigma=None``.

Ranks are ignored: the result of each pair comes from the SPH comparison only (a team's
rank or score in the event plays no part). Partial-play weights and elapsed time are
ignored too.

Decisions where the seed is silent (each pinned by a test):

- Zero time in game: SPH is undefined, but eq. 3 multiplies every pair involving the
  player by min(…, 0 minutes) = 0, so the player neither gains nor gives points (offset 0,
  rating unchanged) and is never compared (no division by zero). Negative or non-finite
  times, and non-finite scores, are invalid input (ValueError).
- SPH equality ("tie score", result 0.5) compares score_i·seconds_j with
  score_j·seconds_i (no division) with a relative tolerance of 1e-12, so SPH that are
  equal up to the rounding of their inputs draw: 12 points in 15 minutes ties 16 in 20,
  0.3 points in 3 s ties 0.1 in 1 s, and equal scores in equal times always tie.
- All offsets zero (e.g. equal ratings, everybody tied on SPH; or one team only): eq. 5
  would divide by zero; the scale is 1 and nobody moves.
- A player alone on a team in a team game is compared with every player of every other
  team, like everybody else; a match with a single team changes nothing.
- Several players share the largest |offset| (always the case one-on-one, where the
  offsets are +x and −x) but played different times: the shortest of their times is used,
  i.e. the strictest scale, so that every one of them respects the 2-points-per-minute
  cap. Offsets within a relative 1e-12 of the largest count as shared, so the choice does
  not depend on summation order or on how players are listed.
- "That player's minutes" in eq. 5 is the player's whole time in the game, not limited to
  MAX_GAME_LENGTH (the seed limits only the pairwise time of eq. 3).

Follows the seed exactly in one visible way: only the player with the largest |offset| is
checked against the cap, so a player who played briefly can still move more than
GAME_MULT points per minute of their own time, and raising one player's offset past the
largest can lower that player's final gain when the capping player changes to one with
less time (a discontinuity of eq. 5 itself).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import ClassVar

from stream_rater.rating._pairs import (
    antisymmetric,
    check_finite,
    check_positive,
    expit,
    finite_or_zero,
    log_softmax_probabilities,
)
from stream_rater.rating.base import Outcome, PerPlayer, PointRatingModel, Rating, Teams

#: Offsets within this relative distance of the largest |offset| count as the largest.
_TIE_TOLERANCE = 1e-12
#: SPH within this relative distance of each other are equal (a draw, eq. 2).
_SPH_TOLERANCE = 1e-12
_SPH_TOLERANCE_EXACT = Fraction(_SPH_TOLERANCE)


def _pair_term(r_i: float, r_j: float, result: float, spread: float, weight: float) -> float:
    # eqs. 1–3 for player i against player j
    return (result - expit((r_i - r_j) / spread)) * weight


def _sph_result(score_i: float, seconds_i: float, score_j: float, seconds_j: float) -> float:
    """Eq. 2's 1 / 0 / 0.5 from SPH_i vs SPH_j (both times > 0), equal within _SPH_TOLERANCE.

    Compares score_i·seconds_j with score_j·seconds_i (no division); products too large
    for a float are compared exactly as rationals.
    """
    left, right = score_i * seconds_j, score_j * seconds_i
    if not (math.isfinite(left) and math.isfinite(right)):
        exact_left = Fraction(score_i) * Fraction(seconds_j)
        exact_right = Fraction(score_j) * Fraction(seconds_i)
        if abs(exact_left - exact_right) <= _SPH_TOLERANCE_EXACT * max(abs(exact_left), abs(exact_right)):
            return 0.5
        return 1.0 if exact_left > exact_right else 0.0
    if abs(left - right) <= _SPH_TOLERANCE * max(abs(left), abs(right)):
        return 0.5
    return 1.0 if left > right else 0.0


def _per_player(name: str, values: PerPlayer | None, teams: Teams) -> list[list[float]]:
    if values is None:
        raise ValueError(f"sph-elo needs per-player {name} for every player")
    if len(values) != len(teams) or any(len(v) != len(t) for v, t in zip(values, teams)):
        raise ValueError(f"{name} must have one value per player, in the teams' shape")
    out = [[float(x) for x in team] for team in values]
    if not all(math.isfinite(x) for team in out for x in team):
        raise ValueError(f"{name} must be finite numbers")
    return out


class SphElo(PointRatingModel):
    """Score-Per-Hour Elo with the per-game cap (ZoneStats equations 1–6).

    Parameters (ladder configuration keys): ``T`` logistic spread (eq. 1), ``game_mult``
    points per minute (eqs. 3, 5), ``max_game_length`` minutes (eq. 3), ``initial`` rating
    of a new player.
    """

    name: ClassVar[str] = "sph-elo"
    TUNING: ClassVar[dict[str, str]] = {"game_mult": "log"}
    supports_effects: ClassVar[bool] = False
    needs_scores: bool = True

    def __init__(
        self,
        T: float = 120.0,
        game_mult: float = 2.0,
        max_game_length: float = 20.0,
        initial: float = 500.0,
    ) -> None:
        self.T = check_positive("T", T)
        self.game_mult = check_positive("game_mult", game_mult)
        self.max_game_length = check_positive("max_game_length", max_game_length)
        self.initial_rating = check_finite("initial", initial)

    def __repr__(self) -> str:
        return (
            f"SphElo(T={self.T!r}, game_mult={self.game_mult!r}, "
            f"max_game_length={self.max_game_length!r}, initial={self.initial_rating!r})"
        )

    def rate(
        self,
        teams: Teams,
        scores: PerPlayer,
        seconds_played: PerPlayer,
        rated: Sequence[Sequence[bool]] | None = None,
    ) -> list[list[Rating]]:
        """Posterior states for one game from per-player scores and seconds in the game.

        Convenience over `rate_match` (ranks are not needed by this model); players with
        ``rated`` False keep their rating and are compared with nobody.
        """
        outcome = Outcome(ranks=[0.0] * len(teams), scores=scores, seconds_played=seconds_played, rated=rated)
        return self.rate_match(teams, outcome)

    def offsets(self, teams: Teams, outcome: Outcome) -> list[float]:
        """Eq. 4's uncapped rating offsets, flattened in team order."""
        scores = _per_player("scores", outcome.scores, teams)
        seconds = _per_player("seconds_played", outcome.seconds_played, teams)
        if any(s < 0.0 for team in seconds for s in team):
            raise ValueError("seconds_played must be >= 0")
        players = [
            (t, p.mu, scores[t][i], seconds[t][i], seconds[t][i] / 60.0)
            for t, team in enumerate(teams)
            for i, p in enumerate(team)
        ]
        parts: list[list[float]] = [[] for _ in players]
        for i, (team_i, r_i, score_i, sec_i, min_i) in enumerate(players):
            for j in range(i + 1, len(players)):
                team_j, r_j, score_j, sec_j, min_j = players[j]
                minutes = min(self.max_game_length, min_i, min_j)
                if team_i == team_j or minutes <= 0.0:
                    continue
                result = _sph_result(score_i, sec_i, score_j, sec_j)
                term = antisymmetric(_pair_term, r_i, r_j, result, self.T, self.game_mult * minutes)
                parts[i].append(term)
                parts[j].append(-term)
        return [math.fsum(p) for p in parts]

    def cap_scale(self, offsets: Sequence[float], minutes: Sequence[float]) -> float:
        """Eq. 5: min(1, GAME_MULT × minutes of the largest-|offset| player / that |offset|).

        Ties for the largest |offset| use the shortest time; all-zero offsets give 1.
        """
        largest = max((abs(o) for o in offsets), default=0.0)
        if largest == 0.0:
            return 1.0
        cap_minutes = min(m for o, m in zip(offsets, minutes) if abs(o) >= largest * (1.0 - _TIE_TOLERANCE))
        return min(1.0, self.game_mult * cap_minutes / largest)

    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """Equations 1–6 of the seed for every player (ranks ignored)."""
        offsets = self.offsets(teams, outcome)
        assert outcome.seconds_played is not None  # checked by offsets()
        minutes = [float(s) / 60.0 for team in outcome.seconds_played for s in team]
        scale = self.cap_scale(offsets, minutes)
        final = finite_or_zero([o * scale for o in offsets])
        it = iter(final)
        return [[Rating(p.mu + next(it), None) for p in team] for team in teams]

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team finishes first, i.e. has the best SPH), an approximation: Luce's choice
        rule on each team's mean rating, softmax(mean/T) — exactly eq. 1 one-on-one."""
        means = [math.fsum(p.mu for p in team) / len(team) for team in teams]
        return log_softmax_probabilities([m / self.T for m in means])
