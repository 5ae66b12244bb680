"""Numerical integration over independent latent performances, kept in log space.

Two jobs need one-dimensional integrals of products of many densities and CDFs:

- `first_place_probabilities`: P(team a has the largest performance) for independent
  location-scale performances (Gaussian, or the log of an exponential variable), the
  ``win_probabilities`` of TrueSkill and of the multiplayer Elo family (Kerby §3.2–3.3).
  One integral per team, by Gauss-Legendre quadrature with the product of CDFs summed in
  log space; P ≥ 1/n for the leading team, so the normalisation never divides by 0.
- `gaussian_order_loglik_gradient`: log P(observed order) of independent Gaussian
  performances and its gradient with respect to every location, for the Thurstonian model.
  Its values underflow double precision long before 100 players (P(one full order of 100
  players) is far below 1e-308).

For the second, Kerby integrates the chain ∫ f_n ∫ f_{n−1} … ∫ f_1 with cubic splines and
autodiff. Here every function lives on one uniform grid as a log-density, each running
integral is a cumulative log-sum-exp of the exact integrals of the piecewise log-linear
interpolant (``_interval_log_mass``), and the gradient comes from a backward pass instead
of autodiff: ∂ log P / ∂m_k = E[(X_k − m_k)] / v_k under the posterior of X_k given the
observed order, whose density ∝ (everything below, forward pass) × f_k × (everything
above, backward pass). Nothing is ever exponentiated before it is normalised, so no step
can underflow to 0 and then produce log(0) or 0/0.

Every exp, log and weighted sum here is `_portable`'s, so the answers are the same bits on
every CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy.special import log_ndtr, ndtr

from stream_rater.rating._gaussian import cdf
from stream_rater.rating._pairs import expit
from stream_rater.rating._portable import exp, expm1, log, logsumexp, weighted_sums

Floats = NDArray[np.float64]

#: Grid points at most (per integral); past that the spacing grows with the rating spread.
MAX_GRID = 6001
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _interval_log_mass(logf: Floats, h: float) -> Floats:
    """log ∫ over each grid interval of exp(the linear interpolant of `logf`).

    Exact for exponential pieces: h·(e^b − e^a)/(b − a) = h·e^max·(1 − e^−d)/d, d = |b − a|.
    """
    a, b = logf[:-1], logf[1:]
    top = np.maximum(a, b)
    d = np.abs(b - a)
    big = d > 1e-8
    safe = np.where(big, d, 1.0)
    shape = np.where(big, log(-expm1(-safe) / safe), -0.5 * d)
    return top + math.log(h) + shape


def _left_tail(logf: Floats, h: float) -> float:
    """log ∫_{−∞}^{x_0}: the first interval's log-slope extended as an exponential tail."""
    slope = (logf[1] - logf[0]) / h
    return float(logf[0] - math.log(slope)) if slope > 0.0 else float(logf[0] + math.log(h))


def _right_tail(logf: Floats, h: float) -> float:
    """log ∫_{x_last}^{∞}, mirror image of `_left_tail`."""
    slope = (logf[-2] - logf[-1]) / h
    return float(logf[-1] - math.log(slope)) if slope > 0.0 else float(logf[-1] + math.log(h))


def _grid(lo: float, hi: float, step: float) -> tuple[Floats, float]:
    """A uniform grid on [lo, hi] with spacing ≈ `step`, at most MAX_GRID points."""
    span = max(hi - lo, step)
    points = min(MAX_GRID, max(3, math.ceil(span / step) + 1))
    h = span / (points - 1)
    return lo + h * np.arange(points, dtype=np.float64), h


def _log_trapezoid_weights(points: int, h: float) -> Floats:
    weights = np.full(points, math.log(h))
    weights[0] = weights[-1] = math.log(h / 2.0)
    return weights


# --- first place: P(team a's performance is the largest) ---------------------------------


def _normal_kernel(u: Floats) -> Floats:
    return -0.5 * u * u


def _logexp_kernel(u: Floats) -> Floats:
    # T = log X with X ~ Exp(mean 1): density e^(u − e^u), a Gumbel (minimum) shape.
    return u - exp(np.minimum(u, 700.0))


def _logexp_logcdf(u: Floats) -> Floats:
    # log(1 − exp(−e^u)); for u ≪ 0 its series u − e^u/2 avoids log(0).
    low = u < -30.0
    e = exp(np.minimum(u, 700.0))
    return np.where(low, u - 0.5 * e, log(-expm1(-np.where(low, 1.0, e))))


#: Per family, in standard units: log of the unnormalised density, its normaliser, the log
#: CDF, and the window outside which the density's mass is negligible (< 1e-17).
_FAMILIES = {
    "normal": (_normal_kernel, math.sqrt(2.0 * math.pi), log_ndtr, -12.0, 12.0),
    "logexp": (_logexp_kernel, 1.0, _logexp_logcdf, -40.0, 4.0),
}
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(16)
#: Most panels of `_first_places`' shared grid (its arrays hold 16 nodes a panel per team:
#: 100 teams make 13 MB each at this size).
MAX_SHARED_PANELS = 1024
#: Per family, in standard units, where `_first_places` integrates: where the density is
#: above e^-40 of its peak (what lies outside changes no probability by 1e-17).
_SHARED_WINDOW = {"normal": (-9.0, 9.0), "logexp": (-40.0, 4.0)}
#: Per family, the CDF itself: `_first_places` multiplies the other teams' CDFs as they are (a
#: product under 1e-308 is a node that adds nothing) rather than summing log CDFs, which for
#: the normal family costs twice as much (``log_ndtr``).
_SHARED_CDF = {"normal": ndtr, "logexp": lambda u: -expm1(-exp(np.minimum(u, 700.0)))}


def first_place_probabilities(locs: Sequence[float], scales: Sequence[float], family: str) -> list[float]:
    """P(team a's performance is the largest) for independent location-scale performances.

    ``family="normal"``: performance ~ N(loc, scale²) (Thurstone; TrueSkill's team
    performances). ``family="logexp"``: performance = log X with X exponential of mean
    e^loc (Kerby §3.2's Plackett-Luce model in its elimination orientation; `scales` must
    be 1). Two teams use the closed forms Φ(±Δ/√(s_a² + s_b²)) and expit(±Δ) (Kerby §2);
    more teams integrate each P_a by `_first_place`. Either way the probabilities are then
    normalised (which also absorbs the quadrature error).
    """
    n = len(locs)
    if n == 1:
        return [1.0]
    if n == 2:
        d = locs[0] - locs[1]
        if family == "normal":
            z = d / math.sqrt(scales[0] ** 2 + scales[1] ** 2)
            probs = [cdf(z), cdf(-z)]
        else:
            probs = [expit(d), expit(-d)]
    else:
        loc, scale = np.asarray(locs, dtype=float), np.asarray(scales, dtype=float)
        shared = _first_places(loc, scale, family)
        probs = [_first_place(a, loc, scale, family) for a in range(n)] if shared is None else shared
    total = math.fsum(probs)
    return [p / total for p in probs]


def _first_places(locs: Floats, scales: Floats, family: str) -> list[float] | None:
    """Every team's `_first_place` at once, on one grid of performance values shared by all
    teams: each team's CDF is computed once per node (n·G values instead of n²·G), and team
    a's integrand is ``f_a(x) · Π_b F_b(x) / F_a(x)``, summed over the nodes inside a's
    `_SHARED_WINDOW` (where F_a is at least 1e-19, so the division keeps full precision). The grid covers every team's window in 16-point
    Gauss-Legendre panels at most twice the narrowest team's scale wide, so no CDF changes
    much within a panel (what `_first_place`'s extra break points are for): the answers agree
    with `_first_place`'s to some 1e-13 (tests/unit/rating/test_predict.py). None when that
    grid would have more panels than the per-team grids together (performances far apart on
    very different scales), or more than `MAX_SHARED_PANELS`: ask `_first_place`.
    """
    kernel, normaliser, _, _, _ = _FAMILIES[family]
    lo, hi = _SHARED_WINDOW[family]
    width = 2.0 * float(np.min(scales))
    merged: list[list[float]] = []
    for start, end in sorted(zip((locs + lo * scales).tolist(), (locs + hi * scales).tolist())):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    counts = [max(1, math.ceil((end - start) / width)) for start, end in merged]
    if sum(counts) > min(len(locs) * (hi - lo), MAX_SHARED_PANELS):
        return None
    lefts = np.concatenate(
        [start + (end - start) / c * np.arange(c) for (start, end), c in zip(merged, counts)]
    )
    half = np.concatenate([np.full(c, 0.5 * (end - start) / c) for (start, end), c in zip(merged, counts)])
    x = ((lefts + half)[:, None] + half[:, None] * _NODES).ravel()
    weights = (half[:, None] * _WEIGHTS).ravel()
    u = (x[None, :] - locs[:, None]) / scales[:, None]
    cdfs = _SHARED_CDF[family](u)
    inside = (u >= lo) & (u <= hi)  # where team a's CDF is at least 1e-19: safe to divide by
    others = np.divide(cdfs.prod(axis=0), cdfs, out=np.zeros_like(cdfs), where=inside)
    density = exp(np.where(inside, kernel(u), -np.inf))
    probabilities: list[float] = (weighted_sums(density * others, weights) / (scales * normaliser)).tolist()
    return probabilities


def _first_place(a: int, locs: Floats, scales: Floats, family: str) -> float:
    """``∫ f(u) Π_{b≠a} F((loc_a + s_a u − loc_b) / s_b) du`` over the family's window.

    Composite 16-point Gauss-Legendre on unit panels, with extra break points around each
    place where a steeper team's CDF switches on (``u = (loc_b − loc_a) / s_a``, width
    ``s_b / s_a < 1``), so steps narrower than a panel are resolved; the product of CDFs is
    summed in log space, vectorised over all nodes and teams.
    """
    kernel, normaliser, logcdf, lo, hi = _FAMILIES[family]
    others = np.arange(len(locs)) != a
    loc_b, scale_b = locs[others], scales[others]
    centre = (loc_b - locs[a]) / scales[a]
    width = scale_b / scales[a]
    steep = width < 1.0  # CDFs at least a panel wide are smooth enough as they are
    breaks = [np.arange(lo, hi + 1.0)]
    for offset in (-6.0, 0.0, 6.0):
        breaks.append(centre[steep] + offset * width[steep])
    edges = np.unique(np.clip(np.concatenate(breaks), lo, hi))
    half = 0.5 * np.diff(edges)[:, None]
    u = ((0.5 * (edges[:-1] + edges[1:]))[:, None] + half * _NODES).ravel()
    weights = (half * _WEIGHTS).ravel()
    log_cdfs = logcdf((locs[a] + scales[a] * u - loc_b[:, None]) / scale_b[:, None]).sum(axis=0)
    return float(np.sum(weights * exp(log_cdfs + kernel(u))) / normaliser)


def gaussian_order_loglik_gradient(
    locs: Sequence[float], variances: Sequence[float], groups: Sequence[Sequence[int]]
) -> tuple[float, list[float]]:
    """log P(observed order) and ∂/∂loc_a for independent X_a ~ N(loc_a, variance_a).

    `groups` lists the team indices from the lowest performance (last place) to the
    highest; a group of several teams is a tie, modelled as the limit of a vanishing draw
    margin: the tied teams share one performance value, so the group contributes
    ∫ Π_{a∈group} f_a(x) (…) dx, and log P is defined up to the constant that limit drops
    (which does not depend on the locations, so the gradient is exact).

    The grid spans every team's mean ± 10 standard deviations (which also contains every
    posterior, since conditioning on an order pulls performances between the means) with
    spacing ≤ 0.05 of the narrowest density, unless that needs more than MAX_GRID points.
    """
    loc = np.asarray(locs, dtype=float)
    var = np.asarray(variances, dtype=float)
    sd = np.sqrt(var)
    group_sd = [1.0 / math.sqrt(float(np.sum(1.0 / var[list(g)]))) for g in groups]
    narrowest = min(float(np.min(sd)), min(group_sd))
    x, h = _grid(float(np.min(loc - 10.0 * sd)), float(np.max(loc + 10.0 * sd)), 0.05 * narrowest)
    points = len(x)
    log_f = -0.5 * (x[None, :] - loc[:, None]) ** 2 / var[:, None] - _LOG_SQRT_2PI - 0.5 * log(var)[:, None]
    log_group = [log_f[list(g)].sum(axis=0) for g in groups]

    # forward: below[g] = log ∫_{−∞}^{x} (groups 0..g−1 in order, all below x)
    below = [np.zeros(points)]
    for g in range(len(groups) - 1):
        log_alpha = log_group[g] + below[g]
        steps = np.concatenate(([_left_tail(log_alpha, h)], _interval_log_mass(log_alpha, h)))
        below.append(np.logaddexp.accumulate(steps))
    # backward: above[g] = log ∫_{x}^{∞} (groups g+1.. in order, all above x)
    above = [np.zeros(points) for _ in groups]
    for g in range(len(groups) - 1, 0, -1):
        log_beta = log_group[g] + above[g]
        steps = np.concatenate(([_right_tail(log_beta, h)], _interval_log_mass(log_beta, h)[::-1]))
        above[g - 1] = np.logaddexp.accumulate(steps)[::-1]

    weights = _log_trapezoid_weights(points, h)
    gradient = [0.0] * len(loc)
    log_p = 0.0
    for g, members in enumerate(groups):
        log_post = log_group[g] + below[g] + above[g] + weights
        norm = logsumexp(log_post)
        if g == len(groups) - 1:
            log_p = norm
        post = exp(log_post - norm)
        mean_x = float(weighted_sums(post, x) / post.sum())
        for a in members:
            gradient[a] = (mean_x - float(loc[a])) / float(var[a])
    return log_p, gradient
