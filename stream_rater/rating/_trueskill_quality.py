"""TrueSkill's match quality (Herbrich, Minka, Graepel 2006, eq. 7), for `TrueSkill.quality`.

Eq. (7) is the draw probability of a match relative to its limit for ``eps -> 0``. Generalised
to teams as in the ``trueskill`` package: with ``d`` the vector of adjacent team-performance
differences, ``sqrt(det B / det S) * exp(-m' S^-1 m / 2)`` where ``m = E[d]``, ``S = Cov[d]``
and ``B`` its part due to ``beta`` alone. ``S`` is tridiagonal, so this is a linear-time LDL'
factorisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from stream_rater.rating._trueskill_graph import GaussianTeams


def match_quality(teams: GaussianTeams, rows: list[list[float]], beta2: float) -> float:
    """Eq. (7) for `teams` with partial-play weights `rows` (one per player) and performance
    noise ``beta**2``, from the ratings as given (no dynamics). In ``[0, 1]``; 1 only for
    identical certain teams."""
    means = [math.fsum(w * r.mu for w, r in zip(row, t)) for row, t in zip(rows, teams)]
    noise = [beta2 * math.fsum(w * w for w in row) for row in rows]
    spreads = [
        n + math.fsum(w * w * r.sigma * r.sigma for w, r in zip(row, t))
        for n, row, t in zip(noise, rows, teams)
    ]
    return float(quality_of_terms(means, noise, spreads))


def quality_of_terms(
    means: Sequence[Any],
    noise: Sequence[Any],
    spreads: Sequence[Any],
    log: Callable[[Any], Any] = math.log,
    exp: Callable[[Any], Any] = math.exp,
    minimum: Callable[[Any, Any], Any] = min,
) -> Any:
    """Eq. (7) from each team's weighted mean, β-noise and total spread (variance), in team
    order: the LDL' recurrence of `match_quality`. Each term is a float, or an array with one
    entry per candidate match (`rating.balance.balance` scores every split at once), with
    `_portable`'s `log` and `exp` and numpy's `minimum` then."""
    log_ratio: Any = 0.0
    quad_form: Any = 0.0
    ds = db = y = 0.0
    for f in range(len(means) - 1):
        m = means[f] - means[f + 1]
        if f == 0:
            ds = spreads[0] + spreads[1]
            db = noise[0] + noise[1]
            y = m
        else:
            ls = -spreads[f] / ds
            lb = -noise[f] / db
            ds = spreads[f] + spreads[f + 1] + ls * spreads[f]
            db = noise[f] + noise[f + 1] + lb * noise[f]
            y = m - ls * y
        log_ratio = log_ratio + log(db / ds)
        quad_form = quad_form + y * y / ds
    return minimum(1.0, exp(0.5 * log_ratio - 0.5 * quad_form))
