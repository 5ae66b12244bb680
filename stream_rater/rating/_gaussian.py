"""Numerically stable standard-normal helpers: the package's one normal CDF (`cdf`, used by
every model) and TrueSkill's truncated-Gaussian corrections (Herbrich, Minka, Graepel 2006).

The moment-matching step of the paper (Table 1, bottom row) needs the mean shift ``V`` and
the variance factor ``W`` of a standard normal truncated to a half-line (a win,
``I(d > eps)``) or to an interval (a draw, ``I(|d| <= eps)``); see the four functions under
eq. (6) and Figure 2. The posterior variance of the performance difference is ``1 - W``
(in units of the prior variance), and that is the quantity that must stay accurate and
positive: in the far tails ``W`` rounds to 1 and ``1 - W`` computed by subtraction is noise.
So the hot-path functions here return ``(V, 1 - W)`` and compute ``1 - W`` directly:

- near the bulk with ``math.erfc`` (cheap, accurate there);
- in the far tail of a win with the Laplace continued fraction of the Mills ratio, written
  so that neither ``V - a`` nor ``1 - W`` is a difference of nearly equal numbers;
- for a draw whose window lies in a tail, as the window between two tails (same continued
  fraction), and for a narrow window by Gauss-Legendre quadrature of the window's shifted
  density, which has no cancellation at all.

Only the ``math`` module is used on the hot path: a scalar scipy ufunc call costs more than
the whole computation here.
"""

from __future__ import annotations

import math
from statistics import NormalDist

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

#: Below this truncation point the direct formulas lose less than ~1e-13 to cancellation;
#: above it the continued fraction converges in at most ~60 terms.
_TAIL = 4.0
#: Draw windows narrower than this (in standard units) use quadrature: the direct formula
#: would subtract two nearly equal tail masses.
_NARROW = 0.05
_UNIT = NormalDist()


def _gauss_legendre(n: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Nodes and weights of n-point Gauss-Legendre quadrature on [-1, 1].

    Each node is a root of the Legendre polynomial P_n, found by Newton's method from the
    Chebyshev-like start ``cos(pi (i + 3/4) / (n + 1/2))``; the weight is
    ``2 / ((1 - x**2) P_n'(x)**2)``.
    """
    nodes, weights = [], []
    for i in range(n):
        x = math.cos(math.pi * (i + 0.75) / (n + 0.5))
        for _ in range(100):
            p0, p1 = 1.0, x  # P_0, P_1, then the three-term recurrence up to P_n
            for k in range(2, n + 1):
                p0, p1 = p1, ((2 * k - 1) * x * p1 - (k - 1) * p0) / k
            slope = n * (x * p1 - p0) / (x * x - 1.0)
            step = p1 / slope
            x -= step
            if abs(step) < 1e-16:
                break
        nodes.append(x)
        weights.append(2.0 / ((1.0 - x * x) * slope * slope))
    return tuple(nodes), tuple(weights)


_LEGENDRE_NODES, _LEGENDRE_WEIGHTS = _gauss_legendre(12)


def pdf(x: float) -> float:
    """Standard normal density N(x) of the paper."""
    return _INV_SQRT_2PI * math.exp(-0.5 * x * x)


def cdf(x: float) -> float:
    """Standard normal cumulative distribution Phi(x), accurate in the lower tail."""
    return 0.5 * math.erfc(-x / _SQRT2)


def ppf(p: float) -> float:
    """Inverse of `cdf` for ``0 < p < 1`` (the draw margin of section 4.1 needs it)."""
    return _UNIT.inv_cdf(p)


def _mills_fractions(a: float) -> tuple[float, float]:
    """The tails ``K1, K2`` of the Laplace continued fraction of the Mills ratio at ``a``.

    ``R(a) = Q(a) / N(a) = 1 / (a + K1)`` with ``K_n = n / (a + K_{n+1})``, so the mean of a
    standard normal truncated to ``[a, inf)`` is ``a + K1`` and its variance is
    ``K1 * (K2 - K1)``: both without cancellation. For ``a >= _TAIL`` the backward
    recurrence with ``10 + 800 / a**2`` terms is accurate to ~1e-14 relative.
    """
    k1 = k2 = 0.0
    for n in range(10 + int(800.0 / (a * a)), 0, -1):
        k2 = k1
        k1 = n / (a + k1)
    return k1, k2


def truncate_win(t: float, eps: float) -> tuple[float, float]:
    """``(V_win(t, eps), 1 - W_win(t, eps))`` of the paper, stable for any finite input.

    ``t`` is the standardised mean of the winner-minus-loser performance difference and
    ``eps`` the standardised draw margin. ``V = N(t-eps) / Phi(t-eps)`` is the posterior mean
    shift and ``1 - W`` the posterior variance factor (in ``(0, 1]``) of a unit normal
    truncated to ``(eps - t, inf)`` after centring. (The EP chain of
    `stream_rater.rating._trueskill_graph` inlines the branch away from the tail.)
    """
    x = t - eps
    if x > -_TAIL:
        v = _INV_SQRT_2PI * math.exp(-0.5 * x * x) / (0.5 * math.erfc(-x / _SQRT2))  # pdf / cdf
        return v, 1.0 - v * (v + x)
    k1, k2 = _mills_fractions(-x)
    return k1 - x, k1 * (k2 - k1)


def _narrow_window(p: float, width: float) -> tuple[float, float]:
    """Mean offset from ``p`` and variance of a unit normal truncated to ``[p, p + width]``.

    Gauss-Legendre quadrature of the shifted density ``exp(-p*s - s*s/2)`` on
    ``[0, width]``; used only where ``width`` and ``|p| * width`` are small, where the
    integrand is nearly polynomial and 12 nodes are exact to rounding.
    """
    half = 0.5 * width
    nodes = [half * (x + 1.0) for x in _LEGENDRE_NODES]
    masses = [w * math.exp(-s * (p + 0.5 * s)) for s, w in zip(nodes, _LEGENDRE_WEIGHTS)]
    total = math.fsum(masses)
    mean = math.fsum(m * s for m, s in zip(masses, nodes)) / total
    var = math.fsum(m * (s - mean) ** 2 for m, s in zip(masses, nodes)) / total
    return mean, var


def _tail_window(p: float, q: float, t_eps: float) -> tuple[float, float]:
    """Mean offset from ``p`` and variance of a unit normal truncated to ``[p, q]``, p >= _TAIL.

    The window is the tail beyond ``p`` minus the tail beyond ``q``: with ``rho`` the mass
    beyond ``q`` relative to the mass beyond ``p`` (``t_eps = t*eps = (q*q - p*p) / 4``),
    the window's moments follow from both tails' moments by the law of total variance.
    Used when ``p * (q - p) > 2``, so ``rho < e**-2`` and nothing cancels badly.
    """
    k1p, k2p = _mills_fractions(p)
    k1q, k2q = _mills_fractions(q)
    rho = math.exp(-2.0 * t_eps) * (p + k1p) / (q + k1q)
    inside = 1.0 - rho
    beyond_q = q - p + k1q  # mean of the tail beyond q, measured from p
    offset = (k1p - rho * beyond_q) / inside
    var = (k1p * (k2p - k1p) - rho * k1q * (k2q - k1q) - inside * rho * (offset - beyond_q) ** 2) / inside
    return offset, var


def truncate_draw(t: float, eps: float) -> tuple[float, float]:
    """``(V_draw(t, eps), 1 - W_draw(t, eps))`` of the paper, stable for any finite input.

    A unit normal with mean ``t`` truncated to ``[-eps, eps]``: ``V`` is the posterior mean
    shift (odd in ``t``) and ``1 - W`` the posterior variance factor (even in ``t``).
    ``eps = 0`` (draw probability 0) is the limit: the difference is pinned at 0.
    """
    a = abs(t)
    if eps <= 0.0:
        return -t, 0.0
    # Reflected so that the window [p, q] = [|t| - eps, |t| + eps] lies at or above -eps.
    p = a - eps
    width = 2.0 * eps
    if p > _TAIL and p * width > 2.0:
        offset, var = _tail_window(p, a + eps, a * eps)
    elif width < _NARROW or p > _TAIL:
        offset, var = _narrow_window(p, width)
    else:
        q = a + eps
        if p >= 0.0:
            mass = 0.5 * (math.erfc(p / _SQRT2) - math.erfc(q / _SQRT2))
        else:
            mass = 0.5 * (math.erf(q / _SQRT2) - math.erf(p / _SQRT2))
        dp = _INV_SQRT_2PI * math.exp(-0.5 * p * p)  # pdf(p), pdf(q) without the calls
        dq = _INV_SQRT_2PI * math.exp(-0.5 * q * q)
        mean = (dp - dq) / mass
        var = 1.0 + (p * dp - q * dq) / mass - mean * mean
        offset = mean - p
    if a == 0.0:
        return 0.0, var  # exactly odd: an even match drawn moves nobody
    shift = p + offset  # E[X'] with X' = |t| - y, so V = E[y] - t = -sign(t) * E[X']
    return (shift if t < 0.0 else -shift), var
