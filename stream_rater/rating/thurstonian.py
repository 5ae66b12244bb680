"""The Gaussian multiplayer generalisation of Elo (Kerby, *Multiplayer generalization of
Elo*, §3.3) — a Thurstonian model — updated by a gradient step on the log-likelihood of
the observed order.

Model: independent performances X_i ~ N(ρ_i, 1); the observed order (last place to first)
is X_1 < X_2 < … < X_n, with likelihood ∫ f_n ∫ f_{n−1} … ∫ f_1. There is no closed form;
Kerby decomposes the n-dimensional integral into a chain of one-dimensional cumulative
integrals and insists on staying in log scale, since the probability underflows. We do
exactly that on one grid (`stream_rater.rating._latent.gaussian_order_loglik_gradient`):
a forward pass of cumulative log-sum-exp integrals, a backward pass for the integrals
above each player, and the gradient as ∂ log P/∂ρ_k = E[X_k − ρ_k | order] (the posterior
shift of player k's performance), instead of splines and autodiff. Then r' = r + η·g.

Accuracy: the grid spans every mean ± 10 sd with a step of 0.05 sd (at most 6001 points);
the gradient is then accurate to ≈1e-5 relative. When the ratings of one match spread over
more than ≈300 performance sd (≈52,000 rating points at the default scale) the step grows
with the spread and the quadrature gets coarser — the result stays finite and centred
(a three-player upset across a 2e6-point range still moves the two ends by the expected
≈ η·(gap/2)/scale, the shift that makes the observed order unsurprising).

For two teams the likelihood is Φ(Δρ/√2) and the update is the Gaussian maximum-likelihood
Elo step (Kerby §2.2), which is used in closed form. Like it, the update is unbounded: it
grows like the size of an upset.

Scale and teams as in `stream_rater.rating.elo`: r = scale·ρ (each player's performance
standard deviation is ``scale`` rating points), ``eta`` is η in rating points, a team's
performance is the sum of its members' (mean Σρ, variance n) and every member receives the
team's update. Zero-sum when all teams have the same size; the numerical gradient is
centred so that the rounding residue (≈1e-5 of η) does not leak rating points.

Ties (not covered by Kerby): tied teams share one performance value — the limit of a draw
margin ε → 0 (the TrueSkill paper's draw event); the likelihood then has the factor
∫ Π_{tied} f_a(x) (…) dx. Two equal players who draw do not move; a two-player draw pulls
both ratings together by η·Δρ/(n_a + n_b) (η·Δρ/2 for single players).
"""

from __future__ import annotations

import math
from typing import ClassVar

from stream_rater.rating._latent import first_place_probabilities, gaussian_order_loglik_gradient
from stream_rater.rating._pairs import (
    CHESS_SCALE,
    apply_team_deltas,
    center,
    check_finite,
    check_positive,
    check_ranks,
    finite_or_zero,
    gauss_hazard,
    rank_groups,
    team_sums,
    unchanged,
)
from stream_rater.rating.base import Outcome, PointRatingModel, Rating, Teams


def _two_team_gradient(rho: list[float], sizes: list[int], ranks: list[float]) -> list[float]:
    """Closed form for two teams: ML Gaussian Elo, or the ε → 0 draw."""
    total = float(sizes[0] + sizes[1])
    if ranks[0] == ranks[1]:
        g = (rho[1] - rho[0]) / total
        return [g, -g]
    spread = math.sqrt(total)
    z = (rho[0] - rho[1]) / spread
    g = gauss_hazard(z) / spread if ranks[0] < ranks[1] else -gauss_hazard(-z) / spread
    return [g, -g]


class Thurstonian(PointRatingModel):
    """Kerby's Gaussian multiplayer Elo: gradient of the log-likelihood of the full order.

    Parameters (ladder configuration keys): ``eta`` learning rate in rating points,
    ``scale`` rating points per unit of ρ (performance sd), ``initial`` new-player rating.
    """

    name: ClassVar[str] = "thurstonian"
    TUNING: ClassVar[dict[str, str]] = {"eta": "log"}
    supports_effects: ClassVar[bool] = True
    needs_scores: bool = False

    def __init__(self, eta: float = 32.0, scale: float = CHESS_SCALE, initial: float = 1500.0) -> None:
        self.eta = check_positive("eta", eta)
        self.scale = check_positive("scale", scale)
        self.initial_rating = check_finite("initial", initial)

    def __repr__(self) -> str:
        return f"Thurstonian(eta={self.eta!r}, scale={self.scale!r}, initial={self.initial_rating!r})"

    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """Kerby §3.3's log-likelihood gradient step (ties as shared performances)."""
        ranks = check_ranks(teams, outcome)
        if len(teams) < 2:
            return unchanged(teams)
        rho = [s / self.scale for s in team_sums(teams)]
        sizes = [len(t) for t in teams]
        groups = rank_groups(ranks, best_first=False)
        if len(groups) == 1 and len(teams) > 2:
            # everybody tied: the posterior of the shared value is one Gaussian
            precision = math.fsum(1.0 / n for n in sizes)
            shared = math.fsum(r / n for r, n in zip(rho, sizes)) / precision
            gradient = [(shared - r) / n for r, n in zip(rho, sizes)]
        elif len(teams) == 2:
            gradient = _two_team_gradient(rho, sizes, ranks)
        else:
            _, gradient = gaussian_order_loglik_gradient(rho, [float(n) for n in sizes], groups)
        deltas = finite_or_zero([self.eta * g for g in center(gradient)])
        return apply_team_deltas(teams, deltas)

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team finishes first) under the model: ∫ f_a Π_{b≠a} F_b, log-space
        quadrature (closed form Φ(Δρ/√(n_a + n_b)) for two teams)."""
        rho = [s / self.scale for s in team_sums(teams)]
        return first_place_probabilities(rho, [math.sqrt(len(t)) for t in teams], "normal")
