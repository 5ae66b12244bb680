"""Two-player Elo and its pairwise generalisation to N teams (Kerby, *Multiplayer
generalization of Elo*, §2 and §3.1).

Scale. Kerby works on the latent scale ρ (exponential version: P(1 beats 2) =
e^ρ1 / (e^ρ1 + e^ρ2); Gaussian version: X_i ~ N(ρ_i, 1)). Ratings here are r = scale·ρ, so
with the default ``scale = 400/ln 10`` the logistic form is the chess convention
P = 1 / (1 + 10^(−Δr/400)), and the Gaussian form has a per-player performance standard
deviation of ``scale`` rating points. ``k`` is Kerby's learning rate η expressed in rating
points: r' = r + k·g, where g is the update direction on the ρ scale. With ``scale=1``
the formulas are literally Kerby's.

The two updates (our reading of Kerby §2.2, last paragraph):

- ``update="bounded"`` — the classic Elo rule r' = r + k·(S − P), S the actual result
  (1, ½ or 0) and P the model's win probability. Its size is bounded by k.
- ``update="ml"`` — a gradient-ascent step on the log-likelihood of the observed result:
  logistic g = S − P (identical to the bounded rule, Kerby §2.1); Gaussian
  g = φ(z)/Φ(z)/√(n_a+n_b) for a win with z = (ρ_a − ρ_b)/√(n_a+n_b) (Kerby's g_2 for two
  single players), which is unbounded: it grows like the size of the upset.

Draws (equal ranks) count as half a win and half a loss: S = ½ in the bounded rule, and
½·(∇log P(win) + ∇log P(loss)) in the ML rule (for the logistic form both give ½ − P).

Teams. A team's rating is the sum of its members' ratings (its performance is the sum of
theirs, as in the TrueSkill paper; in the Gaussian form its variance is therefore
n·scale², so two teams compare through √(n_a + n_b)). Every member receives the team's
full delta — this is exactly the gradient of the team likelihood with respect to each
member's rating, since ∂(Σ r)/∂r_i = 1. The update is therefore zero-sum when all teams
have the same number of players, and not otherwise (each side moves n·Δ).

N teams (Kerby §3.1, pairwise Elo): every pair of teams is a two-sided game decided by
their ranks; a team's delta is the ``combine="sum"`` or the ``combine="mean"`` (sum / (N−1))
of its pairwise deltas. Kerby notes the sum over-weights large games and the mean
under-weights them; the default is the mean, which keeps a match's change bounded by k
(bounded update) like a one-on-one.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from stream_rater.rating._gaussian import cdf
from stream_rater.rating._latent import first_place_probabilities
from stream_rater.rating._pairs import (
    CHESS_SCALE,
    antisymmetric,
    apply_team_deltas,
    check_choice,
    check_finite,
    check_positive,
    check_ranks,
    expit,
    finite_or_zero,
    gauss_hazard,
    log_softmax_probabilities,
    pair_score,
    team_sums,
    unchanged,
)
from stream_rater.rating.base import Outcome, PointRatingModel, Rating, Teams

Kind = Literal["logistic", "gaussian"]
Update = Literal["bounded", "ml"]
Combine = Literal["sum", "mean"]


def _logistic_step(r_a: float, r_b: float, score: float, scale: float, size: float, ml: bool) -> float:
    # ML and bounded coincide for the logistic form (Kerby §2.1): S − P.
    return score - expit((r_a - r_b) / scale)


def _gaussian_step(r_a: float, r_b: float, score: float, scale: float, size: float, ml: bool) -> float:
    spread = math.sqrt(size)  # √(n_a + n_b): sd of the difference of team performances, in ρ units
    z = (r_a - r_b) / (scale * spread)
    if not ml:
        return score - cdf(z)
    # ∂/∂ρ_a of S·log Φ(z) + (1 − S)·log Φ(−z)
    return (score * gauss_hazard(z) - (1.0 - score) * gauss_hazard(-z)) / spread


class Elo(PointRatingModel):
    """Pairwise Elo: logistic (Bradley-Terry) or Gaussian (Thurstone Case V) two-team Elo,
    bounded or maximum-likelihood update, summed or averaged over the pairs of teams.

    Parameters (ladder configuration keys): ``k`` learning rate in rating points (the
    K-factor; Kerby's η), ``scale`` rating points per unit of Kerby's ρ, ``initial`` rating
    of a new player, ``kind`` "logistic" | "gaussian", ``update`` "bounded" | "ml",
    ``combine`` "sum" | "mean". Partial-play weights and elapsed time are ignored.
    """

    name: ClassVar[str] = "elo"
    TUNING: ClassVar[dict[str, str]] = {"k": "log"}
    supports_effects: ClassVar[bool] = True
    needs_scores: bool = False

    def __init__(
        self,
        k: float = 32.0,
        scale: float = CHESS_SCALE,
        initial: float = 1500.0,
        kind: Kind = "logistic",
        update: Update = "bounded",
        combine: Combine = "mean",
    ) -> None:
        self.k = check_positive("k", k)
        self.scale = check_positive("scale", scale)
        self.initial_rating = check_finite("initial", initial)
        self.kind = check_choice("kind", kind, ("logistic", "gaussian"))
        self.update = check_choice("update", update, ("bounded", "ml"))
        self.combine = check_choice("combine", combine, ("sum", "mean"))
        self._step = _logistic_step if kind == "logistic" else _gaussian_step

    def __repr__(self) -> str:
        return (
            f"Elo(k={self.k!r}, scale={self.scale!r}, initial={self.initial_rating!r}, "
            f"kind={self.kind!r}, update={self.update!r}, combine={self.combine!r})"
        )

    def pair_delta(self, r_a: float, r_b: float, score: float, size_a: int = 1, size_b: int = 1) -> float:
        """Rating change of team a (rating r_a, ``size_a`` players) after scoring `score`
        (1 win, ½ draw, 0 loss) against team b; team b's change is exactly the negative.
        """
        return self.k * antisymmetric(
            self._step, r_a, r_b, score, self.scale, float(size_a + size_b), self.update == "ml"
        )

    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """Kerby §2 for two teams, §3.1 (pairwise, sum or mean) for more."""
        ranks = check_ranks(teams, outcome)
        n = len(teams)
        if n < 2:
            return unchanged(teams)
        sums = team_sums(teams)
        parts: list[list[float]] = [[] for _ in range(n)]
        for a in range(n):
            for b in range(a + 1, n):
                d = self.pair_delta(
                    sums[a], sums[b], pair_score(ranks[a], ranks[b]), len(teams[a]), len(teams[b])
                )
                parts[a].append(d)
                parts[b].append(-d)
        divisor = float(n - 1) if self.combine == "mean" else 1.0
        deltas = finite_or_zero([math.fsum(p) / divisor for p in parts])
        return apply_team_deltas(teams, deltas)

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team finishes first).

        Exact for two teams (the model's own pairwise probability). Pairwise Elo defines no
        joint distribution over N > 2 teams, so for more teams we use the joint model whose
        pairwise probabilities are exactly Elo's: Luce's choice rule softmax(R/scale) for the
        logistic form, independent Gaussian team performances N(R, n·scale²) for the
        Gaussian form (R = team rating, n = team size).
        """
        sums = team_sums(teams)
        if self.kind == "logistic":
            return log_softmax_probabilities([r / self.scale for r in sums])
        return first_place_probabilities(
            [r / self.scale for r in sums], [math.sqrt(len(t)) for t in teams], "normal"
        )
