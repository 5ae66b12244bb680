"""TrueSkill's predictions of a match before it is rated (section 4.1): each player's part of
a team's performance variance, the draw margin, a 1v1's probabilities, the first-place
probabilities of any teams, and a rating as an idle player has it by now; a base of
`stream_rater.rating.trueskill.TrueSkill`, which sets the numbers they read."""

from __future__ import annotations

import math

from stream_rater.rating._gaussian import _SQRT2
from stream_rater.rating.base import Rating, Teams

_NO_SIGMA = "a TrueSkill rating needs a sigma"


class TrueSkillPredictions:
    """The predictions of `TrueSkill` (its constructor sets the attributes below)."""

    _tau2: float
    _beta2: float
    _sigma2: float
    _time_rate: float
    #: eps = _margin * sqrt(n1 + n2): section 4.1 solved for eps.
    _margin: float
    #: `draw_margin` of one player against one.
    _duel_margin: float

    def as_of(self, rating: Rating, idle_seconds: float) -> Rating:
        """The uncertainty an idle player has by now: the time term of the dynamics,
        ``sigma**2 + time_tau**2 * dt`` (capped at the prior's, as in an update), for reads."""
        if self._time_rate == 0.0 or not idle_seconds > 0:
            return rating
        sigma = rating.sigma
        if sigma is None:
            raise ValueError(_NO_SIGMA)
        var = sigma * sigma
        return Rating(rating.mu, math.sqrt(max(var, min(var + self._time_rate * idle_seconds, self._sigma2))))

    @property
    def ages(self) -> bool:
        """Whether `as_of` may change a rating: with time-scaled dynamics (``time_tau`` > 0)."""
        return self._time_rate != 0.0

    def draw_margin(self, players: int) -> float:
        """The draw margin eps of a match with `players` players in all (section 4.1)."""
        return self._margin * math.sqrt(players)

    def duel_probabilities(self, a: Rating, b: Rating) -> tuple[float, float, float]:
        """P(a wins), P(b wins) and P(draw) of player `a` against player `b` (section 4.1),
        uncalibrated: `rating.predict.pairwise` of a 1v1 computed as it computes any pair
        (`performance_variances`, `draw_margin`, ``cdf``: the same operations on the same
        numbers, so the same bits) without its per-team lists and calls."""
        sigma_a, sigma_b = a[1], b[1]  # indexed: a named tuple's attribute costs a descriptor's lookup
        if sigma_a is None or sigma_b is None:
            raise ValueError(_NO_SIGMA)
        extra = self._tau2 + self._beta2
        c = math.sqrt(math.fsum((sigma_a * sigma_a + extra, sigma_b * sigma_b + extra)))
        delta, eps = (a[0] + 0.0) - (b[0] + 0.0), self._duel_margin  # `fsum` of one mu: mu + 0.0
        win_a = 0.5 * math.erfc(-((delta - eps) / c) / _SQRT2)  # cdf((delta - eps) / c)
        win_b = 0.5 * math.erfc(-((-delta - eps) / c) / _SQRT2)
        rest = 1.0 - win_a - win_b
        return win_a, win_b, rest if rest > 0.0 else 0.0  # `max(0.0, rest)` without the call

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team performs best), exact under the model; sums to 1.

        Team performances are independent ``N(M_j, S_j**2)`` with ``M_j = sum mu`` and
        ``S_j**2 = sum (sigma**2 + tau**2 + beta**2)`` (the prior this match's update would
        use, without the time term). Two teams: ``Phi((M_0 - M_1) / sqrt(S_0**2 + S_1**2))``
        (eq. 1 generalised). More teams: ``P_j = int N(z) prod_k Phi((M_j + S_j z - M_k) /
        S_k) dz`` by quadrature, then normalised (`_latent.first_place_probabilities`).
        Draws (the margin eps) are not counted: "first" means the highest performance.
        """
        if len(teams) < 2 or not all(teams):
            raise ValueError("a match needs at least two teams, each with a player")
        # only here: _latent needs numpy and scipy, importing the model stays light
        from stream_rater.rating._latent import first_place_probabilities

        means = [math.fsum(r.mu for r in team) for team in teams]
        stds = [math.sqrt(math.fsum(row)) for row in self.performance_variances(teams)]
        return first_place_probabilities(means, stds, "normal")

    def performance_variances(self, teams: Teams) -> list[list[float]]:
        """Each player's part of its team's performance variance in a match rated now,
        ``sigma**2 + tau**2 + beta**2`` (the prior this match's update would use, without
        the time term), same shape as `teams`."""
        extra, rows = self._tau2 + self._beta2, []
        for team in teams:  # loops: a comprehension per team costs more than its work
            row = []
            for r in team:
                if r.sigma is None:
                    raise ValueError(_NO_SIGMA)
                row.append(r.sigma * r.sigma + extra)
            rows.append(row)
        return rows
