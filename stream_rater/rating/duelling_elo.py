"""The Elo baseline of the TrueSkill paper (Herbrich, Minka, Graepel; §1 eq. 1 and §4
"Experiments"): Gaussian Elo with the "duelling" heuristic for teams and free-for-alls.

Two players (§1): performances p_i ~ N(s_i, β²), P(p_1 > p_2) = Φ((s_1 − s_2)/(√2 β)) (eq. 1)
and, with y = +1 / 0 / −1 for a win / draw / loss of player 1,

    Δ = αβ√π · ((y + 1)/2 − Φ((s_1 − s_2)/(√2 β))),   s_1 ← s_1 + Δ,   s_2 ← s_2 − Δ.

Two readings of the paper's typesetting, both forced by the paper's own statements:
the update is written s_1 ← s_1 + yΔ there, but Δ already carries the sign of the result
through (y+1)/2, and multiplying again by y would make a loss *gain* points and a draw
change nothing — we apply s_1 ← s_1 + Δ; and eq. 1 is printed with √(2β) where the
difference of two N(·, β²) performances has standard deviation √2·β, as in the Δ formula.

Defaults are the paper's: α = 0.07 (§4), β = σ0/2 = 25/6 with the Xbox Live scale of
§4.2, and a new player at ``initial = 25`` = μ0 of that scale. The K-factor is αβ√π
(≈ 0.517 here); on the chess scale (``beta=200``, ``initial=1500``) it is ≈ 24.8, the
"K factor of 24" the paper quotes.

Duelling heuristic (§4): "for each player, compute the Δ's in comparison to all other
players based on the team outcome of the player and every other player and perform an
update with the average of the Δ's". We read "all other players" as every player of every
*other* team (team-mates have no outcome against each other; counting them as draws would
pull team-mates together for no reason), each duel decided by the two teams' ranks and
each player keeping an individual rating. Zero-sum when all teams have the same size
(each player averages over the same number of duels); otherwise not.
"""

from __future__ import annotations

import math
from typing import ClassVar

from stream_rater.rating._gaussian import cdf
from stream_rater.rating._latent import first_place_probabilities
from stream_rater.rating._pairs import (
    antisymmetric,
    check_finite,
    check_positive,
    check_ranks,
    finite_or_zero,
    pair_score,
    unchanged,
)
from stream_rater.rating.base import Outcome, PointRatingModel, Rating, Teams


def _duel(s_1: float, s_2: float, score: float, k_factor: float, spread: float) -> float:
    # Δ of the paper with (y + 1)/2 = score
    return k_factor * (score - cdf((s_1 - s_2) / spread))


class DuellingElo(PointRatingModel):
    """Gaussian Elo as benchmarked in the TrueSkill paper, duelling heuristic for teams.

    Parameters (ladder configuration keys): ``alpha`` weight of new evidence (0 < α < 1),
    ``beta`` performance standard deviation β, ``initial`` rating of a new player.
    """

    name: ClassVar[str] = "duelling-elo"
    TUNING: ClassVar[dict[str, str]] = {"alpha": "log"}
    # Context effects are team members in the other models; here each player duels on its
    # own, so an effect would be an extra duellist, not an effect.
    supports_effects: ClassVar[bool] = False
    needs_scores: bool = False

    def __init__(self, alpha: float = 0.07, beta: float = 25.0 / 6.0, initial: float = 25.0) -> None:
        self.alpha = check_positive("alpha", alpha)
        self.beta = check_positive("beta", beta)
        self.initial_rating = check_finite("initial", initial)
        self.k_factor = self.alpha * self.beta * math.sqrt(math.pi)
        self._spread = math.sqrt(2.0) * self.beta

    def __repr__(self) -> str:
        return f"DuellingElo(alpha={self.alpha!r}, beta={self.beta!r}, initial={self.initial_rating!r})"

    def duel(self, s_1: float, s_2: float, score: float) -> float:
        """The paper's Δ for player 1 (score 1 win, ½ draw, 0 loss); player 2 gets −Δ."""
        return antisymmetric(_duel, s_1, s_2, score, self.k_factor, self._spread)

    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """Every player: the average of its duels against all players of the other teams."""
        ranks = check_ranks(teams, outcome)
        if len(teams) < 2:
            return unchanged(teams)
        players = [(t, p.mu) for t, team in enumerate(teams) for p in team]
        parts: list[list[float]] = [[] for _ in players]
        for i, (t_i, s_i) in enumerate(players):
            for j in range(i + 1, len(players)):
                t_j, s_j = players[j]
                if t_i == t_j:
                    continue
                d = self.duel(s_i, s_j, pair_score(ranks[t_i], ranks[t_j]))
                parts[i].append(d)
                parts[j].append(-d)
        deltas = finite_or_zero([math.fsum(p) / len(p) if p else 0.0 for p in parts])
        result: list[list[Rating]] = []
        it = iter(deltas)
        for team in teams:
            result.append([Rating(p.mu + next(it), None) for p in team])
        return result

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team finishes first), an approximation: each team performs like one player
        of its mean skill, N(mean s, β²), independently — exactly eq. 1 for one-on-one, and
        for two teams Φ((mean_a − mean_b)/(√2 β)), close to the average duel probability the
        heuristic updates towards. Several teams: log-space quadrature of ∫ f_a Π F_b.
        """
        means = [math.fsum(p.mu for p in team) / len(team) for team in teams]
        return first_place_probabilities(means, [self.beta] * len(teams), "normal")
