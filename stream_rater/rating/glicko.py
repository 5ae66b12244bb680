"""Glicko-1 and Glicko-2 (Glickman), rated one match per rating period as lichess does.

Sources. Glicko-1: M. E. Glickman, "Parameter estimation in large dynamic paired comparison
experiments", Applied Statistics 48 (1999), in the form of its algorithm summary "The Glicko
system": Step 1 (the RD grows with idle time, ``RD = min(sqrt(RD0² + c²t), 350)``) and Step 2
(the new rating and RD after m games). Glicko-2: M. E. Glickman, "Example of the Glicko-2
system" (2012): Steps 1-8, the volatility by the Illinois algorithm of Step 5.

One formula for both. On the Glicko-2 scale (``μ = (r − 1500)/s``, ``φ = RD/s``, ``s`` =
173.7178 for Glicko-2 as in the paper, ``1/q = 400/ln 10`` for Glicko-1) Glicko-1's Step 2
is Glicko-2's Step 7 with φ in place of φ*: ``φ' = 1/sqrt(1/φ² + 1/v)``,
``μ' = μ + φ'² Σ g(φ_j)(s_j − E_j)``, ``v = 1/Σ g(φ_j)² E_j(1 − E_j)`` (Glicko-2 Steps 3-4,
Glicko-1's ``d²`` is ``v/q²``). The two models differ only in Glicko-2's Steps 5-6: a new
volatility σ' and ``φ*² = φ² + σ'²`` before the update.

Choices where the papers leave room (documented and tested):

- **Rating period = one match.** Each match is its own rating period, as lichess rates. The
  papers' multi-game period is `rate_period` (used to check their worked examples).
- **Idle time** (both models): before a match, ``RD² += c²·t`` with ``t`` the days since the
  player's previous match (none for a first match), capped at the initial ``rd`` — the
  paper's 350; an RD is always read between ``rd_floor`` and that cap. Reads apply the same
  growth (`as_of`), as TrueSkill's ``time_tau``. Glicko-2's own Step 6 term σ'² is added per match
  and capped the same way (the paper does not cap it; lichess caps RD too).
- **RD floor**: the RD after a match is at least ``rd_floor`` (default 30), so a player who
  plays very often keeps moving a little.
- **Teams and more than two teams** (pairwise decomposition, like `Elo`): a team's strength is
  the sum of its members' ratings (`_pairs.team_sums`; so context effects are extra team
  members), and each player plays one game per other team, all in one rating period. In the
  game of player i (team a) against team b the rating difference is ``R_a − R_b`` and the
  "opponent" carries everyone else's uncertainty: ``RD_opp² = Σ_b RD² + Σ_{a∖i} RD²``. For one
  player against one this is exactly the papers' update; it is the composite-opponent reading
  of a team game, which needs no per-pair state and keeps a player's own RD as its own.
  Results per pair come from the ranks (`_pairs.pair_score`: 1, ½, 0).
- **Numerics**: ``E(1 − E)`` is computed as ``expit(x)·expit(−x)`` (no cancellation); Step 5's
  f is evaluated divided by v², finite even when ``Σ g²E(1−E)`` underflows (v = ∞); the
  volatility search is bracketed above by the cap RD (a larger volatility would only be capped
  in Step 6) and both its bracket search and its iteration are bounded; an RD is read between
  ``rd_floor`` and the cap. So huge rating gaps, tiny RDs and long idle times give finite
  states, never an exception.

State: ``Rating(mu=rating, sigma=RD, extra=volatility)``; Glicko-1 keeps ``extra`` None. A
state without a usable volatility (a context effect, an older state) starts from the initial
``volatility``.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from stream_rater.rating._pairs import (
    check_finite,
    check_positive,
    check_ranks,
    expit,
    log_softmax_probabilities,
    pair_score,
    team_sums,
)
from stream_rater.rating.base import Outcome, Rating, RatingModel, Teams

#: Glicko-2's scale factor (the paper's Step 2 constant, 400/ln 10 rounded).
GLICKO2_SCALE = 173.7178
#: Glicko-1's scale: 1/q, q = ln 10 / 400.
GLICKO1_SCALE = 400.0 / math.log(10.0)
SECONDS_PER_DAY = 86400.0
#: The paper's convergence tolerance ε of Step 5.
VOLATILITY_TOLERANCE = 1e-6
#: Most Illinois iterations (it converges in about ten) and bracket steps of Step 5.2.
_MAX_ITERATIONS = 100

#: One game of a rating period on the Glicko-2 scale: (μ − μ_j, φ_j², score).
Game = tuple[float, float, float]


def g(phi2: float) -> float:
    """Glicko-2 Step 3's ``g(φ) = 1/sqrt(1 + 3φ²/π²)``, from φ² (Glicko-1's g(RD) with φ = q·RD)."""
    return 1.0 / math.sqrt(1.0 + 3.0 * phi2 / (math.pi * math.pi))


def _evidence(games: Sequence[Game]) -> tuple[float, float]:
    """``(Σ g²E(1−E), Σ g(s − E))`` over the games (Steps 3-4: the first is 1/v)."""
    information = 0.0
    total = 0.0
    for diff, phi2, score in games:
        gj = g(phi2)
        x = gj * diff
        e = expit(x)
        information += gj * gj * e * expit(-x)
        total += gj * (score - e)
    return information, total


def new_volatility(
    sigma: float, phi2: float, information: float, total: float, tau: float, cap2: float
) -> float:
    """Glicko-2 Step 5: σ' by the Illinois algorithm, bounded (module docs).

    ``information`` = Σ g²E(1−E) = 1/v, ``total`` = Σ g(s − E) = Δ/v; ``cap2`` is the largest φ²
    a player may have, and so the largest σ'² worth finding (Step 6 would cap it). The paper's
    ``f(x) = e^x(Δ² − φ² − v − e^x) / 2(φ² + v + e^x)² − (x − a)/τ²`` is evaluated with
    numerator and denominator divided by v², which is finite for every ``information ≥ 0``
    (v and Δ² overflow for a result the ratings said was impossible).
    """
    top = math.log(cap2)
    a = min(2.0 * math.log(sigma), top)
    tau2 = tau * tau
    info = information

    def f(x: float) -> float:
        ex = math.exp(x)
        spread = 1.0 + info * (phi2 + ex)
        return (
            ex * (total * total - info * (phi2 * info + 1.0 + ex * info)) / (2.0 * spread * spread)
            - (x - a) / tau2
        )

    # Step 5.2: the bracket [A, B]; Δ² > φ² + v multiplied by 1/v²
    big_a = a
    excess = total * total - info * (phi2 * info + 1.0)
    if excess > 0.0:
        big_b = top if info == 0.0 else min(math.log(excess) - 2.0 * math.log(info), top)
        if big_b == top and f(top) >= 0.0:  # the root lies at or above the cap
            return math.exp(top / 2.0)
    else:
        k = 1
        while f(a - k * tau) < 0.0 and k < _MAX_ITERATIONS:
            k += 1
        big_b = a - k * tau
    # Steps 5.3-5.4: Illinois iteration
    f_a, f_b = f(big_a), f(big_b)
    for _ in range(_MAX_ITERATIONS):
        if abs(big_b - big_a) <= VOLATILITY_TOLERANCE or f_b == f_a:
            break
        big_c = big_a + (big_a - big_b) * f_a / (f_b - f_a)
        f_c = f(big_c)
        if f_c * f_b <= 0.0:
            big_a, f_a = big_b, f_b
        else:
            f_a /= 2.0
        big_b, f_b = big_c, f_c
    return math.exp(big_a / 2.0)  # Step 5.5


class _Glicko(RatingModel):
    """What Glicko-1 and Glicko-2 share: parameters, idle-time growth, the pairwise
    decomposition, predictions. Subclasses say how a rating period updates one player."""

    has_sigma: ClassVar[bool] = True
    supports_effects: ClassVar[bool] = True
    #: Rating points per unit of the Glicko-2 scale.
    scale: ClassVar[float]

    def __init__(self, rating: float, rd: float, c: float, rd_floor: float) -> None:
        self.rating = check_finite("rating", rating)
        self.rd = check_positive("rd", rd)
        c = check_finite("c", c)
        if c < 0.0:
            raise ValueError(f"c must be >= 0, got {c!r}")
        self.c = c
        self.rd_floor = check_positive("rd_floor", rd_floor)
        if self.rd_floor > self.rd:
            raise ValueError(f"rd_floor ({rd_floor!r}) must not exceed rd ({rd!r})")
        s2 = self.scale * self.scale
        self._cap2 = self.rd * self.rd / s2  # φ² of the initial RD
        self._floor2 = self.rd_floor * self.rd_floor / s2
        self._growth = self.c * self.c / s2 / SECONDS_PER_DAY  # φ² per idle second

    # ------------------------------------------------------------------ state on the Glicko-2 scale

    def _phi2(self, rating: Rating) -> float:
        """φ² of a state's RD taken between ``rd_floor`` and ``rd`` (Step 1's ``min(·, 350)``);
        an unusable RD (None, NaN) counts as the initial one."""
        rd = rating.sigma
        if rd is None or math.isnan(rd):
            return self._cap2
        phi = rd / self.scale
        return min(max(phi * phi, self._floor2), self._cap2)

    def _grown(self, phi2: float, idle_seconds: float | None) -> float:
        """φ² after `idle_seconds` without a match (Glicko-1 Step 1), capped at the initial RD."""
        if self._growth == 0.0 or idle_seconds is None or not idle_seconds > 0.0:  # NaN too
            return phi2
        return min(phi2 + self._growth * idle_seconds, self._cap2)

    def _state(self, mu: float, phi2: float, volatility: float | None, prior: Rating) -> Rating:
        """The posterior state (RD at least ``rd_floor``); the prior if it would not be finite."""
        rd = self.scale * math.sqrt(max(phi2, self._floor2))
        if not (math.isfinite(mu) and math.isfinite(rd)):
            return prior
        return Rating(mu, rd, volatility)

    @abstractmethod
    def _update(self, prior: Rating, phi2: float, games: Sequence[Game]) -> Rating:
        """The player's state after one rating period of `games`, from its prior and its φ²
        with the idle-time growth already applied."""

    # ------------------------------------------------------------------ RatingModel

    def initial(self) -> Rating:
        """A new player: ``rating`` and ``rd``."""
        return Rating(self.rating, self.rd)

    def as_of(self, rating: Rating, idle_seconds: float) -> Rating:
        """The RD an idle player has by now (Glicko-1 Step 1, capped), for reads."""
        phi2 = self._phi2(rating)
        grown = self._grown(phi2, idle_seconds)
        if grown == phi2:
            return rating
        return Rating(rating.mu, self.scale * math.sqrt(grown), rating.extra)

    def rate_period(
        self, player: Rating, games: Sequence[tuple[Rating, float]], idle_seconds: float | None = None
    ) -> Rating:
        """The papers' rating period: `player`'s state after `games` (opponent, score 1/½/0),
        all at once, `idle_seconds` after the player's previous period."""
        phi2 = self._grown(self._phi2(player), idle_seconds)
        scaled = [((player.mu - opp.mu) / self.scale, self._phi2(opp), float(s)) for opp, s in games]
        return self._update(player, phi2, scaled)

    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """One rating period per match: each player plays each other team (module docs)."""
        ranks = check_ranks(teams, outcome)
        elapsed = outcome.elapsed
        if len(teams) == 2 and len(teams[0]) == 1 == len(teams[1]):
            return self._duel(teams[0][0], teams[1][0], pair_score(ranks[0], ranks[1]), elapsed)
        phi2s = [
            [
                self._grown(self._phi2(r), None if elapsed is None else elapsed[t][i])
                for i, r in enumerate(team)
            ]
            for t, team in enumerate(teams)
        ]
        sums = team_sums(teams)
        spreads = [math.fsum(row) for row in phi2s]
        result: list[list[Rating]] = []
        for a, team in enumerate(teams):
            posts = []
            for i, player in enumerate(team):
                own = phi2s[a][i]
                mates = max(0.0, spreads[a] - own)
                games = [
                    ((sums[a] - sums[b]) / self.scale, mates + spreads[b], pair_score(ranks[a], ranks[b]))
                    for b in range(len(teams))
                    if b != a
                ]
                posts.append(self._update(player, own, games))
            result.append(posts)
        return result

    def _duel(
        self, a: Rating, b: Rating, score: float, elapsed: Sequence[Sequence[float | None]] | None
    ) -> list[list[Rating]]:
        """`_rate` for one player against one, the common match: the same arithmetic without
        the per-team sums."""
        phi2_a, phi2_b = self._phi2(a), self._phi2(b)
        if elapsed is not None:
            phi2_a, phi2_b = self._grown(phi2_a, elapsed[0][0]), self._grown(phi2_b, elapsed[1][0])
        diff = (a.mu - b.mu) / self.scale
        return [
            [self._update(a, phi2_a, ((diff, phi2_b, score),))],
            [self._update(b, phi2_b, ((-diff, phi2_a, 1.0 - score),))],
        ]

    def win_probabilities(self, teams: Teams) -> list[float]:
        """P(each team finishes first): for two teams Glickman's predictive probability
        ``1/(1 + 10^(−g(sqrt(RD_a² + RD_b²))·(R_a − R_b)/400))`` with team ratings R = Σ r and
        RD² = Σ RD²; for more, Luce's choice rule with the same attenuation over all teams'
        RD² (its pairwise odds for two teams are exactly the above)."""
        sums = team_sums(teams)
        attenuation = g(math.fsum(self._phi2(r) for team in teams for r in team))
        return log_softmax_probabilities([attenuation * r / self.scale for r in sums])


class Glicko(_Glicko):
    """Glicko-1 (Glickman 1999), one match per rating period.

    Parameters (ladder configuration keys): ``rating`` and ``rd`` of a new player (1500, 350;
    ``rd`` is also the cap of the idle-time growth), ``c`` RD growth per day without a match
    (``RD² += c²·days``; 0 = none), ``rd_floor`` the least RD after a match (30).
    """

    name: ClassVar[str] = "glicko"
    TUNING: ClassVar[dict[str, str]] = {"rd": "log", "c": "log"}
    scale: ClassVar[float] = GLICKO1_SCALE

    def __init__(
        self, rating: float = 1500.0, rd: float = 350.0, c: float = 0.0, rd_floor: float = 30.0
    ) -> None:
        super().__init__(rating, rd, c, rd_floor)

    def __repr__(self) -> str:
        return f"Glicko(rating={self.rating!r}, rd={self.rd!r}, c={self.c!r}, rd_floor={self.rd_floor!r})"

    def _update(self, prior: Rating, phi2: float, games: Sequence[Game]) -> Rating:
        """Step 2: ``r' = r + q/(1/RD² + 1/d²) Σ g(RD_j)(s_j − E_j)``, ``RD' = (1/RD² + 1/d²)^−½``
        (on the Glicko-2 scale: ``φ'² = 1/(1/φ² + Σ g²E(1−E))``, ``μ' = μ + φ'² Σ g(s − E))``."""
        information, total = _evidence(games)
        post2 = 1.0 / (1.0 / phi2 + information)
        return self._state(prior.mu + self.scale * post2 * total, post2, None, prior)


class Glicko2(_Glicko):
    """Glicko-2 (Glickman 2012), one match per rating period, as lichess rates.

    Parameters: those of `Glicko` plus ``volatility`` σ of a new player (0.06) and ``tau`` τ,
    how fast the volatility moves (0.5; the paper suggests 0.3-1.2).
    """

    name: ClassVar[str] = "glicko2"
    TUNING: ClassVar[dict[str, str]] = {"rd": "log", "c": "log", "tau": "log"}
    scale: ClassVar[float] = GLICKO2_SCALE

    def __init__(
        self,
        rating: float = 1500.0,
        rd: float = 350.0,
        volatility: float = 0.06,
        tau: float = 0.5,
        c: float = 0.0,
        rd_floor: float = 30.0,
    ) -> None:
        super().__init__(rating, rd, c, rd_floor)
        self.volatility = check_positive("volatility", volatility)
        self.tau = check_positive("tau", tau)

    def __repr__(self) -> str:
        return (
            f"Glicko2(rating={self.rating!r}, rd={self.rd!r}, volatility={self.volatility!r}, "
            f"tau={self.tau!r}, c={self.c!r}, rd_floor={self.rd_floor!r})"
        )

    def initial(self) -> Rating:
        """A new player: ``rating``, ``rd`` and ``volatility``."""
        return Rating(self.rating, self.rd, self.volatility)

    def _update(self, prior: Rating, phi2: float, games: Sequence[Game]) -> Rating:
        """Steps 3-8: v and Δ (3-4), σ' (5), ``φ*² = φ² + σ'²`` capped (6), φ' and μ' (7),
        back to the Glicko scale (8)."""
        sigma = prior.extra
        if sigma is None or not (0.0 < sigma < math.inf):
            sigma = self.volatility
        information, total = _evidence(games)
        sigma = new_volatility(sigma, phi2, information, total, self.tau, self._cap2)
        star2 = min(phi2 + sigma * sigma, self._cap2)
        post2 = 1.0 / (1.0 / star2 + information)
        return self._state(prior.mu + self.scale * post2 * total, post2, sigma, prior)
