"""The exponential multiplayer generalisation of Elo (Kerby, *Multiplayer generalization of
Elo*, §3.2) — a Plackett-Luce model — with its closed-form gradient update.

Model (default orientation, ``reversed=False``, Kerby's): performances X_i are independent
exponential variables with mean e^ρ_i; the *smallest* performance finishes last. With the
order listed from last place (1) to first place (n),
P(order) = Π_i λ_i / Σ_{j≥i} λ_j with λ = e^(−ρ), and the update (Kerby's closing formula
of §3.2) is

    r_k' = r_k + η·(−1 + Σ_{i≤k} e^(−r_k) / Σ_{j≥i} e^(−r_j)).

It suits games decided by eliminations (the first player out finishes last). The update
of the last player lies in (−η, 0], of the winner in [0, η(n−1)).

``reversed=True`` is the orientation Kerby calls Plackett-Luce proper: the *smallest*
performance wins (the winner is "chosen first" with probability ∝ e^ρ), suited to races.
It is the same formula with ρ → −ρ and the order read from first place, so the winner's
update lies in [0, η) and the last player's in (−η(n−1), 0]. For n = 2 both orientations
equal logistic Elo (Kerby §2.1).

Scale and teams are as in `stream_rater.rating.elo`: r = scale·ρ, ``eta`` is η in rating
points, a team's ρ is the sum of its members' (its strength e^ρ is the product of theirs),
and every member receives the team's update (the exact gradient with respect to each
member). Zero-sum when all teams have the same size.

Ties (not covered by Kerby): a tied group is handled by Breslow's method — the model is a
proportional-hazards model (eliminations at rates λ_i) and a tie is several eliminations
at the same moment, each against the same risk set. A stage with a group G of tied teams
and risk set R (G and every team ranked better) contributes Σ_{d∈G} (−ρ_d − log Σ_R λ),
whose gradient adds −1 to each member of G and |G|·λ_k / Σ_R λ to every k in R. Equal
teams tied with each other therefore do not move, the update stays zero-sum and bounded
as above, and a two-player draw moves each side by η(1 − 2P(win)) — twice the pairwise-Elo
draw; it is the gradient of the likelihood that both performances are equal, the same
semantics as the Thurstonian model's ties.

All sums are log-sum-exps, so 100+ players and rating gaps of 1e6 stay finite.
"""

from __future__ import annotations

import math
from typing import ClassVar

from stream_rater.rating._latent import first_place_probabilities
from stream_rater.rating._pairs import (
    CHESS_SCALE,
    apply_team_deltas,
    center,
    check_finite,
    check_positive,
    check_ranks,
    finite_or_zero,
    log_softmax_probabilities,
    logaddexp,
    logsumexp,
    rank_groups,
    team_sums,
    unchanged,
)
from stream_rater.rating.base import Outcome, PointRatingModel, Rating, Teams


def elimination_gradient(rho: list[float], stages: list[list[int]]) -> list[float]:
    """∂ log P / ∂ρ_k of Kerby's elimination model with Breslow ties (pure Python, O(n)).

    `stages` lists groups of indices from the first eliminated (last place) to the last.
    g_k = −1 + e^(−ρ_k) · Σ_{stages s up to k's own} |G_s| / Σ_{j∈R_s} e^(−ρ_j), all in logs.
    """
    # log Σ_{R_s} λ for each stage s: risk sets are suffixes of the stage list
    risk = [0.0] * len(stages)
    acc = -math.inf
    for s in range(len(stages) - 1, -1, -1):
        acc = logaddexp(acc, logsumexp([-rho[k] for k in stages[s]]))
        risk[s] = acc
    gradient = [0.0] * len(rho)
    cumulative = -math.inf
    for s, group in enumerate(stages):
        cumulative = logaddexp(cumulative, math.log(len(group)) - risk[s])
        for k in group:
            gradient[k] = -1.0 + math.exp(cumulative - rho[k])
    return gradient


class PlackettLuce(PointRatingModel):
    """Kerby's exponential multiplayer Elo (Plackett-Luce), closed-form gradient update.

    Parameters (ladder configuration keys): ``eta`` learning rate in rating points,
    ``scale`` rating points per unit of ρ, ``initial`` rating of a new player,
    ``reversed`` False = elimination orientation (Kerby's), True = race orientation.
    """

    name: ClassVar[str] = "plackett-luce"
    TUNING: ClassVar[dict[str, str]] = {"eta": "log"}
    supports_effects: ClassVar[bool] = True
    needs_scores: bool = False

    def __init__(
        self,
        eta: float = 32.0,
        scale: float = CHESS_SCALE,
        initial: float = 1500.0,
        reversed: bool = False,
    ) -> None:
        self.eta = check_positive("eta", eta)
        self.scale = check_positive("scale", scale)
        self.initial_rating = check_finite("initial", initial)
        if not isinstance(reversed, bool):
            raise ValueError(f"reversed must be true or false, got {reversed!r}")
        self.reversed = reversed

    def __repr__(self) -> str:
        return (
            f"PlackettLuce(eta={self.eta!r}, scale={self.scale!r}, "
            f"initial={self.initial_rating!r}, reversed={self.reversed!r})"
        )

    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """Kerby §3.2's update (Breslow ties), applied to every member of each team."""
        ranks = check_ranks(teams, outcome)
        if len(teams) < 2:
            return unchanged(teams)
        rho = [s / self.scale for s in team_sums(teams)]
        if self.reversed:
            # winner "eliminated" first on the negated scale; negate the gradient back
            stages = rank_groups(ranks, best_first=True)
            gradient = [-g for g in elimination_gradient([-r for r in rho], stages)]
        else:
            gradient = elimination_gradient(rho, rank_groups(ranks, best_first=False))
        deltas = finite_or_zero([self.eta * g for g in center(gradient)])
        return apply_team_deltas(teams, deltas)

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team finishes first), exact under the model.

        Reversed orientation: the closed form softmax(ρ) (the first choice of Plackett-Luce).
        Elimination orientation: P(a survives longest) = ∫ f_a Π_{b≠a} F_b over log-time,
        one log-space quadrature (exact closed form expit(Δρ) for two teams).
        """
        rho = [s / self.scale for s in team_sums(teams)]
        if self.reversed:
            return log_softmax_probabilities(rho)
        return first_place_probabilities(rho, [1.0] * len(rho), "logexp")
