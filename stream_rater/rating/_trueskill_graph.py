"""The factor graph below `stream_rater.rating.trueskill`: its sum and comparison factors.

TrueSkill (Herbrich, Minka, Graepel 2006) links each player's skill to its team's
performance by a sum factor and adjacent teams' performances by comparison factors
(section 2, Figure 1). This module holds the pure-math kernel the model class runs:

- `posteriors`: the sum factor of Table 1 run upwards, from a team's moved performance to
  its players' posteriors (every match, two teams or more).
- `Chain`: expectation propagation (section 3, eqs. 3-6, Table 1) on the chain of
  team-performance differences of a match of three or more teams, sweeping forwards and
  backwards (the paper's schedule, Figure 1) until the largest change of any difference's
  approximate marginal is below `_TOLERANCE` standard deviations, at most `_MAX_SWEEPS`
  sweeps.
- `tied_moves`: the chain run over the orders of tied blocks, so that teams with equal
  ranks and equal priors get identical posteriors (the "ties" choice of the model's docs).

Split from the model for size only: the hot path calls these as module globals, exactly
as before (no extra call layer).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Protocol, TypeGuard

from stream_rater.rating._evidence import margin_moments, margin_observation
from stream_rater.rating._gaussian import _SQRT2, _TAIL, truncate_draw, truncate_win
from stream_rater.rating.base import Rating, Teams

#: EP stops when no difference's marginal mean or std moved more than this many stds.
_TOLERANCE = 1e-5
_MAX_SWEEPS = 200
#: Smallest posterior/prior variance ratio a comparison may impose, so that EP messages
#: stay finite when a comparison pins a performance difference beyond float precision.
_MIN_VARIANCE_FACTOR = 1e-20
#: Most chain runs spent on symmetrising tied blocks (all orders of a 5-team tie).
_MAX_TIE_ORDERS = 120

#: ``N(x) / Phi(x) = _SQRT_2_OVER_PI * exp(-x**2 / 2) / erfc(-x / sqrt 2)``
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
#: ``_new(Rating, (mu, sigma))`` skips the named tuple's Python-level ``__new__`` (half the cost).
_new = tuple.__new__

#: ``(shift, remain)``: a team performance ``N(m, s)`` moved to ``N(m + shift * s, remain * s)``.
TeamMove = tuple[float, float]


class Gaussian(Protocol):
    """A rating as TrueSkill reads it: a skill ``N(mu, sigma**2)``, i.e. a `Rating` whose
    ``sigma`` is not None (`has_sigmas` tells, once per call of a public method)."""

    @property
    def mu(self) -> float: ...

    @property
    def sigma(self) -> float: ...


GaussianTeams = Sequence[Sequence[Gaussian]]


def has_sigmas(teams: Teams) -> TypeGuard[GaussianTeams]:
    """Whether every rating of `teams` has a sigma (Elo-family states have none)."""
    for team in teams:
        for r in team:
            if r.sigma is None:
                return False
    return True


class Chain:
    """EP on the chain of team performances of one multi-team match (Figure 1).

    Built once per match from the teams' performance priors ``N(means[j], spreads[j])`` and
    sizes; `run` then does EP for one order of the teams.
    """

    __slots__ = ("margins2", "means", "noise2", "scale", "scores", "sizes", "spreads")

    def __init__(self, margin: float, means: list[float], spreads: list[float], sizes: list[int]) -> None:
        self.means = means
        self.spreads = spreads
        self.sizes = sizes
        # eps**2 = (z * beta)**2 * (n1 + n2) (section 4.1): each team's share of it
        margin2 = margin * margin
        self.margins2 = [margin2 * n for n in sizes]
        self.scores: list[float] | None = None
        self.scale = self.noise2 = 0.0

    def scored(self, scores: list[float], scale: float, noise2: float) -> None:
        """Make each decisive comparison's score margin evidence too (`_evidence`): the
        teams' scores, ``margin_scale`` and ``margin_noise**2``."""
        self.scores = scores
        self.scale = scale
        self.noise2 = noise2

    # One EP kernel, kept whole on purpose: splitting the sweep loop would add calls per factor
    # update in the hot multi-team path and scatter eqs. 5-6 / Table 1 over helpers.
    def run(self, order: list[int], draws: list[bool]) -> list[TeamMove]:  # noqa: PLR0915
        """How the performances of the teams ranked in `order` (best first) move.

        ``draws[f]`` says whether positions ``f`` and ``f + 1`` drew. Factor ``f``
        compares them through their difference ``d_f = t_f - t_{f+1}``: its Gaussian
        approximation (eq. 6) is moment-matched under its cavity (team priors times the
        far-side messages; Table 1, last row) and passed on in the sweep's direction, where
        it becomes part of the next factor's cavity (eq. 5). Sweeps alternate forwards and
        backwards (Figure 1) until no difference's marginal moves by `_TOLERANCE` of its
        cavity std. Returned in `order`: each team's `TeamMove`, everything the match says
        about its performance.

        Each position keeps two cavities in moment form, its prior times the message from
        the factor on its left (``l_``) or on its right (``r_``), so a factor's cavity is
        just ``N(lm_f - rm_{f+1}, lv_f + rv_{f+1})``. A factor whose posterior has
        ``(V, 1 - W)`` under a cavity ``N(mean, c**2)`` sends forwards (``t_{f+1} = t_f -
        d_f``) the message of precision ``W / D`` and mean ``rm_{f+1} - c V / W`` with
        ``D = lv_f + rv_{f+1} (1 - W)``, and backwards the mirror image; both are written
        without dividing by ``W``, which may be 0 (a certain outcome says nothing).
        """
        last = len(order) - 1
        means, spreads, margins2 = self.means, self.spreads, self.margins2
        means = [means[j] for j in order]
        spreads = [spreads[j] for j in order]
        eps = [math.sqrt(margins2[a] + margins2[b]) for a, b in itertools.pairwise(order)]
        scores = self.scores
        seen = None
        if scores is not None:
            seen = [
                margin_observation(self.scale, scores[a], scores[b]) for a, b in itertools.pairwise(order)
            ]
        exp, erfc, sqrt = math.exp, math.erfc, math.sqrt
        lm, lv = means[:], spreads[:]
        rm, rv = means[:], spreads[:]
        post_mean = [0.0] * last
        post_std = [0.0] * last
        floor, tail, erfc_scale = _MIN_VARIANCE_FACTOR, -_TAIL, -1.0 / _SQRT2
        steps: range = range(last)  # the first pass: every factor, forwards
        forward = True
        for sweep in range(_MAX_SWEEPS + 1):
            change = 0.0
            for f in steps:
                g = f + 1
                vl = lv[f]
                vr = rv[g]
                var = vl + vr
                mean = lm[f] - rm[g]
                c = sqrt(var)
                inv_c = 1.0 / c  # products, not quotients: CPython specialises float * only
                if (
                    not draws[f]
                    and (seen is None or seen[f] is None)
                    and (x := (mean - eps[f]) * inv_c) > tail
                ):
                    # a plain win: `truncate_win` away from the tail, without the call; 1 - W > 0.04
                    v = _SQRT_2_OVER_PI * exp(-0.5 * x * x) / erfc(x * erfc_scale)
                    omw = 1.0 - v * (v + x)
                else:
                    if draws[f]:
                        v, omw = truncate_draw(mean * inv_c, eps[f] * inv_c)
                    elif seen is not None and (observed := seen[f]) is not None:
                        v, omw = margin_moments(mean, c, eps[f], observed, self.noise2)
                    else:
                        v, omw = truncate_win(mean * inv_c, eps[f] * inv_c)
                    omw = floor if omw < floor else (1.0 if omw > 1.0 else omw)
                cv = c * v
                new_mean = mean + cv
                new_std = c * sqrt(omw)
                moved = (abs(new_mean - post_mean[f]) + abs(new_std - post_std[f])) * inv_c
                if moved > change:
                    change = moved
                post_mean[f] = new_mean
                post_std[f] = new_std
                w = 1.0 - omw
                # the new cavity: prior N(m, s) times the message, in moment form
                if forward:
                    d = vl + vr * omw
                    s = spreads[g]
                    k = 1.0 / (d + s * w)
                    lv[g] = s * d * k
                    lm[g] = (means[g] * d + s * (w * rm[g] - cv)) * k
                else:
                    d = vr + vl * omw
                    s = spreads[f]
                    k = 1.0 / (d + s * w)
                    rv[f] = s * d * k
                    rm[f] = (means[f] * d + s * (w * lm[f] + cv)) * k
            # the last factor updated is the turning point: it also sends the other way,
            # and it is not updated again (its cavity has not changed)
            if forward:
                d = vr + vl * omw
                s = spreads[f]
                k = 1.0 / (d + s * w)
                rv[f] = s * d * k
                rm[f] = (means[f] * d + s * (w * lm[f] + cv)) * k
                steps = range(last - 2, -1, -1)
            else:
                d = vl + vr * omw
                s = spreads[g]
                k = 1.0 / (d + s * w)
                lv[g] = s * d * k
                lm[g] = (means[g] * d + s * (w * rm[g] - cv)) * k
                steps = range(1, last)
            forward = not forward
            if sweep and change < _TOLERANCE:
                break
        # the posterior N(m + shift * s, remain * s) of a performance is its two cavities
        # over the prior: with a = s / lv and b = s / rv, remain = 1 / (a + b - 1)
        moves = []
        for m, s, ml, vl, mr, vr in zip(means, spreads, lm, lv, rm, rv):
            a = s / vl
            b = s / vr
            den = a + b - 1.0
            moves.append(((a * (ml - m) + b * (mr - m)) / (s * den), 1.0 / den))
        return moves


def tied_moves(chain: Chain, order: list[int], draws: list[bool]) -> list[TeamMove]:
    """Each team's move averaged over every order of the tied blocks (`trueskill` docs).

    The chain sees a team only as its performance prior, size and score (0 without the
    ``margin_scale`` option), so teams are sorted within their block by that key (nothing
    then depends on how the teams were listed) and orders that differ only by swapping
    equal-key teams are run once. Up to `_MAX_TIE_ORDERS` combined orders, every team gets
    its move from every order; beyond that, one run in the canonical order, and teams with
    equal keys pool theirs. Players' posterior means and variances are linear in their
    team's ``(shift, remain)``, so averaging those averages the players' posterior moments.
    """
    keys = list(zip(chain.means, chain.spreads, chain.sizes, chain.scores or itertools.repeat(0.0)))
    blocks, start = [], 0
    for f, tied in enumerate(draws, 1):
        if not tied:
            blocks.append(order[start:f])
            start = f
    blocks.append(order[start:])
    n_orders, repeats = 1, False
    for i, block in enumerate(blocks):
        if len(block) > 1:
            blocks[i] = block = sorted(block, key=keys.__getitem__)
            n_orders *= math.factorial(len(block))
            repeats = repeats or len({keys[j] for j in block}) < len(block)
    received: list[list[TeamMove]] = [[] for _ in order]
    if n_orders > _MAX_TIE_ORDERS:
        _canonical_moves(chain, blocks, draws, keys, received)
    else:
        _every_order_moves(chain, blocks, draws, keys if repeats else None, received)
    fsum = math.fsum  # exact: the same moves in another order give the same bits
    averages = []
    for got in received:
        shifts, remains = zip(*got)
        averages.append((fsum(shifts) / len(got), fsum(remains) / len(got)))
    return averages


_Key = tuple[float, float, int, float]


def _canonical_moves(
    chain: Chain,
    blocks: list[list[int]],
    draws: list[bool],
    keys: list[_Key],
    received: list[list[TeamMove]],
) -> None:
    """Into `received`: each team's moves from one run in the canonical order, pooled over
    the teams of a block with equal keys."""
    arrangement = list(itertools.chain.from_iterable(blocks))
    for j, move in zip(arrangement, chain.run(arrangement, draws)):
        received[j].append(move)
    for block in blocks:
        for _, same in itertools.groupby(block, keys.__getitem__):
            group = list(same)
            pooled = [m for j in group for m in received[j]]
            for j in group:
                received[j] = pooled


def _every_order_moves(
    chain: Chain,
    blocks: list[list[int]],
    draws: list[bool],
    keys: list[_Key] | None,
    received: list[list[TeamMove]],
) -> None:
    """Into `received`: each team's moves from every combination of orders of the tied
    blocks; with `keys` (some teams of a block share one), orders with the same key
    sequence are run once."""
    done: dict[tuple[_Key, ...], list[TeamMove]] = {}
    for blocks_in_order in itertools.product(*map(itertools.permutations, blocks)):
        arrangement = list(itertools.chain.from_iterable(blocks_in_order))
        if keys is not None:
            signature = tuple([keys[j] for j in arrangement])
            moves = done.get(signature)
            if moves is None:
                moves = done[signature] = chain.run(arrangement, draws)
        else:
            moves = chain.run(arrangement, draws)
        for j, move in zip(arrangement, moves):
            received[j].append(move)


def posteriors(
    teams: GaussianTeams,
    variances: list[list[float]],
    weights: list[list[float]] | None,
    moves: list[tuple[float, float]],
    spreads: list[float],
) -> list[list[Rating]]:
    """Players' posteriors from their teams': the sum factor of Table 1 run upwards.

    Team ``j``'s performance (prior variance ``spreads[j]``) moved by ``shift * spread`` and
    kept the fraction ``remain`` of its variance (``moves[j] = (shift, remain)``); a player
    with weight ``w`` and variance ``var`` covaries with it by ``w * var``, so
    ``mu += w * var * shift`` and ``var *= 1 - (1 - remain) * w**2 * var / spread``,
    computed as ``(spread - w**2 var + remain * w**2 var) / spread`` so it stays positive.
    """
    if weights is None:
        result = []
        for team, row, (shift, remain), spread in zip(teams, variances, moves, spreads):
            posteriors = []  # loops: a comprehension per team costs more than its work
            for r, v in zip(team, row):
                posteriors.append(posterior(r.mu, v, shift, remain, spread))
            result.append(posteriors)
        return result
    sqrt = math.sqrt
    return [
        [
            Rating(r.mu + w * v * shift, sqrt(v * ((spread - w * w * v) + w * w * v * remain) / spread))
            for r, v, w in zip(team, row, team_weights)
        ]
        for team, row, team_weights, (shift, remain), spread in zip(teams, variances, weights, moves, spreads)
    ]


def posterior(mu: float, var: float, shift: float, remain: float, spread: float) -> Rating:
    """`posteriors` for one player of weight 1, prior mean `mu` and variance `var`."""
    return _new(Rating, (mu + var * shift, math.sqrt(var * ((spread - var) + var * remain) / spread)))
