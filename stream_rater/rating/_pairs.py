"""Shared helpers of the Elo family (Elo, SPH Elo, Plackett-Luce, Thurstonian, duelling Elo).

Scalar helpers are pure Python floats (fast for the common two-team match); everything
that has to survive huge rating gaps goes through a numerically stable form
(`expit`, `gauss_hazard`, log-space sums; the normal CDF is `_gaussian.cdf`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from scipy.special import erfcx

from stream_rater.rating.base import Outcome, Rating, Teams

#: Default rating points per unit of the latent log-strength (Kerby's ρ): with this scale
#: the logistic model gives the chess convention P = 1 / (1 + 10^(−Δ/400)).
CHESS_SCALE = 400.0 / math.log(10.0)

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def expit(x: float) -> float:
    """The logistic function 1 / (1 + e^(−x)), without overflow for any finite x."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def gauss_hazard(z: float) -> float:
    """φ(z) / Φ(z) for any finite z (Kerby §2.2's gradient factor).

    Written as √(2/π) / erfcx(−z/√2), which neither underflows for z → −∞ (the ratio
    grows like −z) nor overflows for z → +∞ (the ratio tends to 0).
    """
    return _SQRT_2_OVER_PI / float(erfcx(-z / math.sqrt(2.0)))


def check_positive(name: str, value: float) -> float:
    """`value` as a float; ValueError unless it is finite and > 0."""
    value = float(value)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def check_finite(name: str, value: float) -> float:
    """`value` as a float; ValueError unless it is finite."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`; ValueError otherwise."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def pair_score(rank_a: float, rank_b: float) -> float:
    """Team a's result against team b from the ranks (lower is better): 1, 0.5 or 0."""
    if rank_a < rank_b:
        return 1.0
    if rank_a > rank_b:
        return 0.0
    return 0.5


def check_ranks(teams: Teams, outcome: Outcome) -> list[float]:
    """The outcome's ranks as floats; ValueError if there is not exactly one per team."""
    ranks = [float(r) for r in outcome.ranks]
    if len(ranks) != len(teams):
        raise ValueError(f"got {len(ranks)} ranks for {len(teams)} teams")
    return ranks


def team_sums(teams: Teams) -> list[float]:
    """Each team's rating: the exactly rounded sum of its members' ``mu`` (order-free)."""
    return [math.fsum(p.mu for p in team) for team in teams]


def apply_team_deltas(teams: Teams, deltas: Sequence[float]) -> list[list[Rating]]:
    """Posterior Elo-family states: every member of team t moves by ``deltas[t]``."""
    return [[Rating(p.mu + float(d), None) for p in team] for team, d in zip(teams, deltas)]


def unchanged(teams: Teams) -> list[list[Rating]]:
    """The priors as Elo-family states (``sigma=None``), same shape."""
    return [[Rating(p.mu, None) for p in team] for team in teams]


def antisymmetric(pair_delta: Callable[..., float], a: float, b: float, score: float, *args: float) -> float:
    """``pair_delta(a, b, score, *args)`` evaluated from the higher-rated side.

    The result for the other side is its exact negative, so pairwise updates are exactly
    zero-sum and do not depend on which of the two sides is listed first.
    """
    if a < b:
        return -pair_delta(b, a, 1.0 - score, *args)
    return pair_delta(a, b, score, *args)


def logaddexp(a: float, b: float) -> float:
    """log(e^a + e^b) without overflow; either argument may be −inf."""
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


def logsumexp(values: Sequence[float]) -> float:
    """log Σ e^v without overflow, for a non-empty sequence of finite floats."""
    top = max(values)
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def log_softmax_probabilities(logits: Sequence[float]) -> list[float]:
    """softmax(logits) computed in log space: finite and summing to 1 for any finite input."""
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    total = math.fsum(weights)
    return [w / total for w in weights]


def rank_groups(ranks: Sequence[float], best_first: bool) -> list[list[int]]:
    """Team indices grouped by equal rank (a group of several teams is a tie).

    Groups are listed best first when `best_first`, else worst first; inside a group the
    teams keep their input order (every model here treats a group symmetrically).
    """
    order = sorted(set(ranks), reverse=not best_first)
    return [[t for t, r in enumerate(ranks) if r == value] for value in order]


def center(values: Sequence[float]) -> list[float]:
    """`values` minus their mean: removes the rounding residue of a gradient that sums to 0."""
    mean = math.fsum(values) / len(values)
    return [v - mean for v in values]


def finite_or_zero(deltas: Sequence[float]) -> list[float]:
    """The deltas, or all zeros if any is not finite.

    A safety net, not a code path: it is reachable only for ratings far outside any
    realistic range (|rating| ≳ 1e150), where the match then leaves everybody unchanged
    instead of writing NaN or inf into a store.
    """
    if all(math.isfinite(d) for d in deltas):
        return [float(d) for d in deltas]
    return [0.0] * len(deltas)
