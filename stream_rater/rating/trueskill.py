"""TrueSkill (Herbrich, Minka, Graepel 2006): Bayesian skill rating on a factor graph.

Every player has a Gaussian skill ``N(mu, sigma**2)`` (eq. 2's factorising prior). In a
match each player performs ``p_i ~ N(s_i, beta**2)``, a team performs ``t = sum w_i p_i``
(``w_i`` = partial play, as in the ``trueskill`` package) and the ranks say how the team
performances are ordered: a win between adjacent teams is ``t_a - t_b > eps`` and a draw is
``|t_a - t_b| <= eps`` (section 2, Figure 1). The posterior is approximated by expectation
propagation (section 3, eqs. 3-6, Table 1) with the truncated-Gaussian corrections V and W
of `stream_rater.rating._gaussian`.

- Two teams: the factor graph is a tree with one approximate factor, so EP is exact after
  one pass; that case is computed in closed form (the "fast path").
- More teams: EP on the chain of team-performance differences, sweeping forwards and
  backwards (the paper's schedule, Figure 1) until the largest change of any difference's
  approximate marginal is below ``_TOLERANCE`` standard deviations, at most
  ``_MAX_SWEEPS`` sweeps.

The factor-graph kernel (the sum factor, the EP chain, the tied-block runs) is in
`stream_rater.rating._trueskill_graph`, match quality (eq. 7) in
`stream_rater.rating._trueskill_quality`, the other predictions in
`stream_rater.rating._trueskill_predictions`; this module is the model: parameters, dynamics,
the two-team closed form and the dispatch between them.

Choices where the paper leaves room (documented and tested):

- **Draw margin** per comparison from the draw probability and both teams' sizes
  (section 4.1): ``eps = Phi^-1((p + 1) / 2) * sqrt(n1 + n2) * beta``.
- **Dynamics** before the update: first the time term ``sigma**2 += time_tau**2 * dt`` (``dt`` =
  seconds since the player's previous match in ``time_unit``; none for a first match), which
  may raise sigma to at most the prior ``sigma`` (it never lowers a larger sigma); then the
  per-match ``tau**2`` (the paper's gamma), not capped: the defaults (``time_tau=0``) are the paper's.
- **Evidence beyond the order** (options, off by default): score margins between adjacent teams
  (``margin_scale``) and each player's score inside the match (``player_scores``), both from the
  per-player ``score`` (and ``seconds_played``) of the outcome; a team's score is the sum of its
  players'. The factors and their assumptions are in `stream_rater.rating._evidence`. With the
  options off, or every score 0 (scores absent), the update is the order-only one, bit for bit.
- **Partial play** weights are floored at ``_MIN_WEIGHT`` like the ``trueskill`` package,
  so every team has a performance.
- **Ties of teams in a multi-team match.** The chain ``... > A = B > ...`` is not symmetric in A
  and B (A is compared with the team above, B with the team below), so on its own it rates
  equal teams with equal ranks differently. The chain is therefore run in every combination of
  orders of the tied blocks and each player's posterior mean and variance are the averages over
  those runs. Beyond `_MAX_TIE_ORDERS` combinations (e.g. a 6-team tie) it is run once in a
  canonical order and tied teams with equal performance priors pool their runs. Either way
  teams with equal priors and ranks get identical posteriors, whatever order they are listed in.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence, Sized
from operator import attrgetter

from stream_rater.rating._evidence import margin_moments, margin_observation, observed, score_evidence
from stream_rater.rating._gaussian import _INV_SQRT_2PI, _SQRT2, _TAIL, ppf, truncate_draw, truncate_win
from stream_rater.rating._trueskill_graph import Chain, Gaussian, GaussianTeams, TeamMove, tied_moves
from stream_rater.rating._trueskill_graph import has_sigmas as _has_sigmas
from stream_rater.rating._trueskill_graph import posteriors as _posteriors
from stream_rater.rating._trueskill_predictions import _NO_SIGMA, TrueSkillPredictions
from stream_rater.rating._trueskill_quality import match_quality
from stream_rater.rating.base import MeanSigma, Outcome, Rating, RatingModel, Teams

__all__ = ["Gaussian", "GaussianTeams", "TIME_UNITS", "TeamMove", "TrueSkill"]

#: Seconds per ``time_unit`` name; a number is taken as seconds.
TIME_UNITS: dict[str, float] = {
    "seconds": 1.0,
    "minutes": 60.0,
    "hours": 3600.0,
    "days": 86400.0,
    "weeks": 7 * 86400.0,
    "years": 365.25 * 86400.0,
}

_MIN_WEIGHT = 1e-4
#: ``_new(Rating, (mu, sigma))`` skips the named tuple's Python-level ``__new__``.
_new = tuple.__new__
#: A rating's mean, for ``fsum(map(_MU, team))`` (no comprehension per team).
_MU = attrgetter("mu")


class TrueSkill(TrueSkillPredictions, RatingModel):
    """The TrueSkill model with the paper's Xbox defaults (section 4.2).

    Parameters (ladder configuration keys):

    - ``mu``, ``sigma``: prior of a new player (mu0 = 25, sigma0 = 25/3).
    - ``beta``: performance noise (sigma0 / 2).
    - ``tau``: per-match dynamics gamma (sigma0 / 100); ``0`` means none.
    - ``draw_probability``: chance that two teams draw, in ``[0, 1)`` (section 4.1).
    - ``time_tau``, ``time_unit``: time-scaled dynamics ``sigma**2 += time_tau**2 * dt``
      with ``dt`` in ``time_unit`` ("seconds" ... "weeks", "years" = 365.25 days, or a
      number of seconds); ``time_tau = 0`` (default) disables it.
    - ``k``: leaderboard value is ``mu - k * sigma`` (section 4.2).
    - ``player_scores``: each player's score (per second played where every player has a
      ``seconds_played``) is evidence about its performance relative to the match's other
      players (TrueSkill 2's individual statistics), read with the extra noise
      ``score_noise`` (default beta). Off (False) by default.
    - ``margin_scale``: a win by ``M`` points is also the observation ``margin_scale * ln(1
      + M) ~ N(d, margin_noise**2)`` of the winner-minus-loser performance difference
      ``d``; 0 (default) disables it. ``margin_noise`` defaults to beta.

    Either option sets ``needs_scores`` on the instance, so the processor passes the
    players' scores and times (0 where absent: no evidence) in the `Outcome`.
    """

    name = "trueskill"
    has_sigma = True
    GAUSSIAN = True
    TUNING = {"beta": "log", "tau": "log", "time_tau": "log", "draw_probability": "logit"}  # noqa: RUF012
    TUNING_OPTIONS = {"margin_scale": "log", "margin_noise": "log", "score_noise": "log"}  # noqa: RUF012

    def __init__(
        self,
        mu: float = 25.0,
        sigma: float = 25.0 / 3.0,
        beta: float = 25.0 / 6.0,
        tau: float = 25.0 / 300.0,
        draw_probability: float = 0.10,
        time_tau: float = 0.0,
        time_unit: str | float = "days",
        k: float = 3.0,
        player_scores: bool = False,
        score_noise: float = 25.0 / 6.0,
        margin_scale: float = 0.0,
        margin_noise: float = 25.0 / 6.0,
    ) -> None:
        unit = TIME_UNITS.get(time_unit) if isinstance(time_unit, str) else float(time_unit)
        if unit is None:
            raise ValueError(f"time_unit must be one of {', '.join(TIME_UNITS)} or seconds")
        checks = {
            "mu": math.isfinite(mu),
            "sigma": math.isfinite(sigma) and sigma > 0,
            "beta": math.isfinite(beta) and beta > 0,
            "tau": math.isfinite(tau) and tau >= 0,
            "draw_probability": 0 <= draw_probability < 1,
            "time_tau": math.isfinite(time_tau) and time_tau >= 0,
            "time_unit": math.isfinite(unit) and unit > 0,
            "k": math.isfinite(k),
            "player_scores": isinstance(player_scores, bool),
            "score_noise": math.isfinite(score_noise) and score_noise > 0,
            "margin_scale": math.isfinite(margin_scale) and margin_scale >= 0,
            "margin_noise": math.isfinite(margin_noise) and margin_noise > 0,
        }
        bad = [key for key, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid TrueSkill parameter(s): {', '.join(bad)}")
        self.mu = float(mu)
        self.sigma = float(sigma)
        self.beta = float(beta)
        self.tau = float(tau)
        self.draw_probability = float(draw_probability)
        self.time_tau = float(time_tau)
        self.time_unit = time_unit
        self.k = float(k)
        self.player_scores = player_scores
        self.score_noise = float(score_noise)
        self.margin_scale = float(margin_scale)
        self.margin_noise = float(margin_noise)
        self.needs_scores = player_scores or self.margin_scale > 0.0
        self._score_noise2 = self.score_noise**2
        self._margin_noise2 = self.margin_noise**2
        self._beta2 = self.beta**2
        self._tau2 = self.tau**2
        self._sigma2 = self.sigma**2
        self._time_rate = self.time_tau**2 / unit
        #: eps = _margin * sqrt(n1 + n2): section 4.1 solved for eps.
        self._margin = ppf((self.draw_probability + 1.0) / 2.0) * self.beta
        #: `draw_margin` of one player against one (a 1v1, the commonest match).
        self._duel_margin = self.draw_margin(2)

    # ------------------------------------------------------------------ RatingModel

    def initial(self) -> Rating:
        """A new player's prior ``N(mu, sigma**2)``."""
        return Rating(self.mu, self.sigma)

    def display(self, rating: MeanSigma) -> float:
        """The conservative skill ``mu - k * sigma`` shown on leaderboards (section 4.2)."""
        sigma = rating.sigma
        if sigma is None:
            raise ValueError(_NO_SIGMA)
        return rating.mu - self.k * sigma

    def rate_match(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """`RatingModel.rate_match`; one player against one with nothing but ranks (no weights,
        scores or unrated players: the commonest match) straight to `_rate_duel`, as `rate` goes."""
        ranks, weights, scores, _, elapsed, rated = outcome  # unpacked: no named tuple's lookups
        duel = len(teams) == 2 and len(teams[0]) == 1 == len(teams[1])
        if duel and len(ranks) == 2 and weights is scores is rated is None:
            return self._rate_duel(teams, ranks[0], ranks[1], elapsed)
        return RatingModel.rate_match(self, teams, outcome)  # not `super()`: its object costs

    def _rate(self, teams: Teams, outcome: Outcome) -> list[list[Rating]]:
        """`rate` with the outcome's ranks, weights, elapsed times, scores and times played."""
        return self.rate(
            teams, outcome.ranks, outcome.weights, outcome.elapsed, outcome.scores, outcome.seconds_played
        )

    # ------------------------------------------------------------------ updates

    def rate(
        self,
        teams: Teams,
        ranks: Sequence[float] | None = None,
        weights: Sequence[Sequence[float]] | None = None,
        elapsed: Sequence[Sequence[float | None]] | None = None,
        scores: Sequence[Sequence[float]] | None = None,
        seconds_played: Sequence[Sequence[float]] | None = None,
    ) -> list[list[Rating]]:
        """Posterior ratings after a match, same shape as `teams`.

        ``ranks``: one per team, lower is better, equal is a draw (default: listed order).
        ``weights``: partial play per player (default 1). ``elapsed``: seconds since each
        player's previous match, None for a first match (time-scaled dynamics only).
        ``scores``, ``seconds_played``: per player (rows may leave out the context effects
        listed last in a team), read by the ``margin_scale`` and ``player_scores`` options.
        """
        n_teams = len(teams)
        if n_teams < 2 or not all(teams):
            raise ValueError("a match needs at least two teams, each with a player")
        if ranks is None:
            ranks = range(n_teams)
        elif len(ranks) != n_teams:
            raise ValueError(f"{len(ranks)} ranks for {n_teams} teams")
        team_scores = None
        if self.margin_scale and scores is not None:
            if len(scores) != n_teams:
                raise ValueError("scores must have one row per team")
            team_scores = [math.fsum(row) for row in scores]
        if n_teams == 2 and weights is None and len(teams[0]) == 1 == len(teams[1]):
            posterior = self._rate_duel(teams, ranks[0], ranks[1], elapsed, team_scores)
        elif not _has_sigmas(teams):
            raise ValueError(_NO_SIGMA)
        else:
            variances = self._variances(teams, elapsed)
            rows = self._weights(teams, weights)
            if n_teams == 2:
                posterior = self._rate_two(teams, ranks[0], ranks[1], variances, rows, team_scores)
            else:
                posterior = self._rate_many(teams, ranks, variances, rows, team_scores)
        if self.player_scores and scores is not None:
            return self._observe_scores(teams, posterior, scores, seconds_played)
        return posterior

    def _observe_scores(
        self,
        teams: Teams,
        posterior: list[list[Rating]],
        scores: Sequence[Sequence[float]],
        seconds_played: Sequence[Sequence[float]] | None,
    ) -> list[list[Rating]]:
        """`posterior` times each player's score evidence (`_evidence.score_evidence`, from
        the prior means of `teams`): a Gaussian update per player, so sigma never grows."""
        if len(scores) != len(teams) or (seconds_played is not None and len(seconds_played) != len(teams)):
            raise ValueError("scores and seconds_played must have one row per team")
        evidence = score_evidence(
            [[r.mu for r in team] for team in teams], scores, seconds_played, self._beta2, self._score_noise2
        )
        return observed(posterior, evidence)

    def _variances(
        self, teams: GaussianTeams, elapsed: Sequence[Sequence[float | None]] | None
    ) -> list[list[float]]:
        """Each player's prior variance after the dynamics: time term (capped), then tau**2."""
        tau2 = self._tau2
        result = []
        if elapsed is None or self._time_rate == 0.0:
            for team in teams:  # loops: a comprehension per team costs more than its work
                row = []
                for r in team:
                    row.append(r.sigma * r.sigma + tau2)
                result.append(row)
            return result
        rate, cap = self._time_rate, self._sigma2
        for team, gaps in zip(teams, elapsed, strict=True):
            row = []
            for r, gap in zip(team, gaps, strict=True):
                var = r.sigma * r.sigma
                if gap is not None and gap > 0:  # False for NaN too
                    var = max(var, min(var + rate * gap, cap))
                row.append(var + tau2)
            result.append(row)
        return result

    @staticmethod
    def _weights(
        teams: Sequence[Sized], weights: Sequence[Sequence[float]] | None
    ) -> list[list[float]] | None:
        """Validated partial-play weights floored at `_MIN_WEIGHT`; None when all are 1."""
        if weights is None:
            return None
        result = []
        for team, row in zip(teams, weights, strict=True):
            if len(row) != len(team):
                raise ValueError("weights must have one entry per player")
            for w in row:
                if not (0.0 <= w < math.inf):
                    raise ValueError(f"weight {w!r} is not a finite number >= 0")
            result.append([w if w > _MIN_WEIGHT else _MIN_WEIGHT for w in row])
        return result

    def _rate_two(
        self,
        teams: GaussianTeams,
        rank0: float,
        rank1: float,
        variances: list[list[float]],
        weights: list[list[float]] | None,
        team_scores: list[float] | None = None,
    ) -> list[list[Rating]]:
        """Closed form for two teams: one comparison factor, so one EP step is exact.

        With ``c**2 = sum w_i**2 (var_i + beta**2)`` over both teams and ``d`` the first team's
        performance minus the second's, ``mu_i += +-w_i var_i / c * V(d/c, eps/c)`` and
        ``var_i *= 1 - w_i**2 var_i / c**2 * W`` (Table 1 composed along the tree), the latter
        written as ``(rest_i + w_i**2 var_i (1 - W)) / c**2`` so it stays positive when W
        rounds to 1.
        """
        team0, team1 = teams
        var0, var1 = variances
        beta2 = self._beta2
        if weights is None:
            diff = sum([r.mu for r in team0]) - sum([r.mu for r in team1])
            total = sum(var0) + sum(var1) + (len(var0) + len(var1)) * beta2
        else:
            w0, w1 = weights
            diff = sum(w * r.mu for w, r in zip(w0, team0)) - sum(w * r.mu for w, r in zip(w1, team1))
            total = sum(w * w * (v + beta2) for w, v in zip(w0, var0)) + sum(
                w * w * (v + beta2) for w, v in zip(w1, var1)
            )
        margin = self._margin * math.sqrt(len(team0) + len(team1))  # `draw_margin`, inlined
        shift, omw = self._compare(diff, total, margin, rank0, rank1, team_scores)
        return _posteriors(teams, variances, weights, [(shift, omw), (-shift, omw)], [total, total])

    def _rate_duel(
        self,
        teams: Teams,
        rank0: float,
        rank1: float,
        elapsed: Sequence[Sequence[float | None]] | None,
        team_scores: list[float] | None = None,
    ) -> list[list[Rating]]:
        """`_rate_two` for one player against one with weight 1, the common match: the same
        arithmetic (so the same bits) without the per-team lists."""
        (a,), (b,) = teams
        mu_a, mu_b = a[0], b[0]  # indexed: a named tuple's attribute costs a descriptor's lookup
        if elapsed is None or self._time_rate == 0.0:  # `_variances` without the lists
            sigma_a, sigma_b = a[1], b[1]
            if sigma_a is None or sigma_b is None:
                raise ValueError(_NO_SIGMA)
            var_a = sigma_a * sigma_a + self._tau2
            var_b = sigma_b * sigma_b + self._tau2
        elif _has_sigmas(teams):
            (var_a,), (var_b,) = self._variances(teams, elapsed)
        else:
            raise ValueError(_NO_SIGMA)
        total = var_a + var_b + 2.0 * self._beta2
        if team_scores is None and rank0 != rank1:  # a win: `_compare`, inlined
            c = math.sqrt(total)
            t, eps = ((mu_a - mu_b) / c if rank0 < rank1 else -(mu_a - mu_b) / c), self._duel_margin / c
            x = t - eps
            if x > -_TAIL:  # `truncate_win` away from the tail, inlined
                v = _INV_SQRT_2PI * math.exp(-0.5 * x * x) / (0.5 * math.erfc(-x / _SQRT2))
                omw = 1.0 - v * (v + x)
            else:
                v, omw = truncate_win(t, eps)
            shift = (v if rank0 < rank1 else -v) / c
        else:
            shift, omw = self._compare(mu_a - mu_b, total, self._duel_margin, rank0, rank1, team_scores)
        sqrt = math.sqrt  # `_posterior` of each, inlined
        return [
            [_new(Rating, (mu_a + var_a * shift, sqrt(var_a * ((total - var_a) + var_a * omw) / total)))],
            [_new(Rating, (mu_b + var_b * -shift, sqrt(var_b * ((total - var_b) + var_b * omw) / total)))],
        ]

    def _compare(
        self,
        diff: float,
        total: float,
        margin: float,
        rank0: float,
        rank1: float,
        team_scores: list[float] | None = None,
    ) -> tuple[float, float]:
        """The comparison factor of two teams (Table 1, last row): ``(V / c, 1 - W)`` for the
        first team's performance minus the second's, ``N(diff, total)``, given the ranks and
        the match's draw `margin` (`draw_margin`, section 4.1). With `team_scores` (the
        ``margin_scale`` option) a win's margin is a second factor (`_evidence`)."""
        c = math.sqrt(total)
        eps = margin / c
        if rank0 == rank1:
            v, omw = truncate_draw(diff / c, eps)
        elif team_scores is not None:
            v, omw = self._margin_win(diff, c, eps, rank0 < rank1, team_scores)
        elif rank0 < rank1:
            v, omw = truncate_win(diff / c, eps)
        else:
            v, omw = truncate_win(-diff / c, eps)
            v = -v
        return v / c, omw  # team 0 moves by +shift * w * var, team 1 by -shift * w * var

    def _margin_win(
        self, diff: float, c: float, eps: float, first_won: bool, team_scores: list[float]
    ) -> tuple[float, float]:
        """``(V, 1 - W)`` of a win given the first team's minus the second's performance
        ``N(diff, c**2)`` and the standardised draw margin `eps`, times the margin's Gaussian
        factor when the winner's score is higher; signed for the first team like `_compare`."""
        sign = 1.0 if first_won else -1.0
        winner, loser = team_scores if first_won else team_scores[::-1]
        seen = margin_observation(self.margin_scale, winner, loser)
        if seen is None:
            v, omw = truncate_win(sign * diff / c, eps)
        else:
            v, omw = margin_moments(sign * diff, c, eps * c, seen, self._margin_noise2)
        return sign * v, omw

    def _rate_many(
        self,
        teams: GaussianTeams,
        ranks: Sequence[float],
        variances: list[list[float]],
        weights: list[list[float]] | None,
        team_scores: list[float] | None = None,
    ) -> list[list[Rating]]:
        """EP on the chain of rank-ordered teams, tied blocks symmetrised (module docs);
        with `team_scores`, a decisive comparison's margin is evidence too (`_evidence`)."""
        beta2 = self._beta2
        fsum = math.fsum  # exact sums: the order players are listed in cannot matter
        if weights is None:
            means = [fsum(map(_MU, team)) for team in teams]
            spreads = [fsum(row) + len(row) * beta2 for row in variances]
        else:
            means = [fsum([w * r.mu for w, r in zip(row, team)]) for row, team in zip(weights, teams)]
            spreads = [
                fsum([w * w * (v + beta2) for w, v in zip(row, var)]) for row, var in zip(weights, variances)
            ]
        order = sorted(range(len(teams)), key=ranks.__getitem__)
        draws = [ranks[i] == ranks[j] for i, j in itertools.pairwise(order)]
        chain = Chain(self._margin, means, spreads, [len(team) for team in teams])
        if team_scores is not None:
            chain.scored(team_scores, self.margin_scale, self._margin_noise2)
        if True in draws:
            moves = tied_moves(chain, order, draws)
        else:
            moves = [(0.0, 1.0)] * len(teams)
            for j, move in zip(order, chain.run(order, draws)):
                moves[j] = move
        return _posteriors(teams, variances, weights, moves, spreads)

    # ------------------------------------------------------------------ predictions (more: TrueSkillPredictions)

    def quality(self, teams: Teams, weights: Sequence[Sequence[float]] | None = None) -> float:
        """Match quality: eq. (7) generalised to teams, as in the ``trueskill`` package.

        The draw probability relative to its limit for ``eps -> 0``: with ``d`` the vector of
        adjacent team-performance differences, ``sqrt(det B / det S) * exp(-m' S^-1 m / 2)``
        where ``m = E[d]``, ``S = Cov[d]`` and ``B`` its part due to ``beta`` alone. ``S`` is
        tridiagonal, so this is a linear-time LDL' factorisation. Uses the ratings as given
        (no dynamics), like eq. (7). In ``[0, 1]``; 1 only for identical certain teams.
        """
        if len(teams) < 2 or not all(teams):
            raise ValueError("a match needs at least two teams, each with a player")
        if not _has_sigmas(teams):
            raise ValueError(_NO_SIGMA)
        rows = self._weights(teams, weights) or [[1.0] * len(team) for team in teams]
        return match_quality(teams, rows, self._beta2)
