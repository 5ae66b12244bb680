"""Evidence beyond the final order, for TrueSkill's `margin` and `player_scores` options.

Both are extra factors on the TrueSkill factor graph (Herbrich, Minka, Graepel 2006,
Figure 1) taken in the same single pass as the order, so a match's update stays a pure
function of the priors and the outcome (stream = replay).

**Score margins** (`margin_moments`). A decisive comparison of two adjacent teams already
has the factor ``I(d > eps)`` on their performance difference ``d``. With a margin the
winner's score minus the loser's, ``M > 0``, it gets a second factor, a Gaussian
observation ``y = margin * ln(1 + M) ~ N(d, margin_noise**2)``. Assumptions: a larger
win means a larger performance difference, with diminishing returns per point (``ln(1 +
M)``: a 10-0 against a minnow is not ten times a 1-0), and the noise of that reading does
not depend on the teams. Both factors sit on the same variable, so their product with the
cavity ``N(mean, c**2)`` (eq. 5) is a Gaussian times a truncation, whose moments are
exact: the Gaussian product first, then the truncated-Gaussian corrections V, W of eq.
(6) / Table 1. For two teams that is the exact EP posterior, as without a margin.
A draw, or a margin that disagrees with the ranks (``M <= 0``, e.g. scores absent and so
all 0), adds nothing.

**Per-player scores** (`score_evidence`), in the spirit of TrueSkill 2's individual
statistics (Minka, Cleven, Zaykov 2018), which make a player's kill counts depend on their
performance relative to the other players. Each player's score (per second played when
every player has a ``seconds_played``) is standardised over the match's players,
``z_i = (x_i - mean x) / sd x`` (means and sd weighted by each player's share of the
longest time played), so the evidence does not depend on the game's scoring unit and sums
to zero: it says who did better than whom, teammates and opponents alike, never how good
the match was as a whole. Read on the scale of the prior performances, ``z_i`` gives a
pseudo-observation of the player's performance (eq. 2's ``p_i ~ N(s_i, beta**2)``),
``m_i = mean mu + z_i * sqrt(var mu + beta**2)`` over the match's prior means, observed
with variance ``(beta**2 + score_noise**2) / f_i`` (``f_i`` the share of time played: part
of a match is less evidence). It is applied after the order factors, to each player's
posterior (assumed-density filtering): a Gaussian update, so sigma never grows. All-equal
scores (absent ones are all 0), non-finite rates or fewer than two players add nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stream_rater.rating._gaussian import truncate_win
from stream_rater.rating.base import Rating

#: Players with less than this share of the longest time played give no score evidence.
_MIN_SHARE = 1e-4


def margin_observation(scale: float, winner: float, loser: float) -> float | None:
    """The margin's reading of the winner-minus-loser performance difference,
    ``scale * ln(1 + M)`` with ``M = winner - loser``; None when ``M <= 0`` or not finite
    (no margin evidence)."""
    diff = winner - loser
    if not (diff > 0.0 and math.isfinite(diff)):
        return None
    return scale * math.log1p(diff)


def margin_moments(mean: float, c: float, eps: float, observed: float, noise2: float) -> tuple[float, float]:
    """``(V, 1 - W)`` of the posterior of a win ``d > eps`` whose difference was also
    observed as ``observed ~ N(d, noise2)``, under the cavity ``N(mean, c**2)``, in the
    cavity's units like `truncate_win`: the posterior mean is ``mean + c * V`` and its
    variance ``c**2 * (1 - W)``."""
    var = c * c
    joint_var = var * noise2 / (var + noise2)
    joint_mean = (mean * noise2 + observed * var) / (var + noise2)
    s = math.sqrt(joint_var)
    v, omw = truncate_win(joint_mean / s, eps / s)
    return (joint_mean + s * v - mean) / c, joint_var * omw / var


def score_evidence(
    means: Sequence[Sequence[float]],
    scores: Sequence[Sequence[float]],
    seconds: Sequence[Sequence[float]] | None,
    beta2: float,
    noise2: float,
) -> list[list[tuple[float, float] | None]]:
    """Per player of `means` (prior skill means, team by team): ``(m, v)``, the
    pseudo-observation ``N(m, v)`` of its performance that its score gives (module docs),
    or None for no evidence. A team's rows of `scores` and `seconds` may be shorter than
    its row of `means` (context effects, listed last, have no score): the players beyond
    the shorter row get None."""
    none: list[list[tuple[float, float] | None]] = [[None] * len(row) for row in means]
    at = [
        (t, p)
        for t, row in enumerate(scores)
        for p in range(min(len(row), len(means[t]), len(row) if seconds is None else len(seconds[t])))
    ]
    if len(at) < 2:
        return none
    played = None if seconds is None else [seconds[t][p] for t, p in at]
    if played is not None and all(s > 0.0 for s in played):
        longest = max(played)
        shares = [s / longest for s in played]
        rates = [scores[t][p] / s for (t, p), s in zip(at, played)]
    else:
        shares = [1.0] * len(at)
        rates = [scores[t][p] for t, p in at]
    used = [i for i, f in enumerate(shares) if f >= _MIN_SHARE]
    if len(used) < 2 or not all(math.isfinite(rates[i]) for i in used):
        return none
    total = math.fsum(shares[i] for i in used)
    centre = math.fsum(shares[i] * rates[i] for i in used) / total
    spread = max(abs(rates[i] - centre) for i in used)
    if not (spread > 0.0 and math.isfinite(spread)):
        return none
    unit = [(rates[i] - centre) / spread for i in used]  # in [-1, 1]: no overflow below
    sd = math.sqrt(math.fsum(shares[i] * u * u for i, u in zip(used, unit)) / total)
    mus = [means[at[i][0]][at[i][1]] for i in used]
    mu_bar = math.fsum(shares[i] * m for i, m in zip(used, mus)) / total
    mu_var = math.fsum(shares[i] * (m - mu_bar) ** 2 for i, m in zip(used, mus)) / total
    scale = math.sqrt(mu_var + beta2)
    if not math.isfinite(scale):
        return none
    for i, u in zip(used, unit):
        t, p = at[i]
        none[t][p] = (mu_bar + u / sd * scale, (beta2 + noise2) / shares[i])
    return none


def observe(mu: float, var: float, evidence: tuple[float, float]) -> tuple[float, float]:
    """A Gaussian skill ``N(mu, var)`` times the pseudo-observation ``N(m, v)`` of its
    performance: the Kalman step ``mu + k (m - mu)``, ``var (1 - k)``, ``k = var / (var + v)``."""
    m, v = evidence
    k = var / (var + v)
    return mu + k * (m - mu), var * v / (var + v)


def observed(
    posterior: Sequence[Sequence[Rating]], evidence: Sequence[Sequence[tuple[float, float] | None]]
) -> list[list[Rating]]:
    """Each rating of `posterior` times its player's `evidence` (`score_evidence`; None: kept
    as it is) by `observe`: a Gaussian update per player, so sigma never grows."""
    result = []
    for team, row in zip(posterior, evidence):
        updated = []
        for r, seen in zip(team, row):
            if seen is None or r.sigma is None:
                updated.append(r)
            else:
                mu, var = observe(r.mu, r.sigma * r.sigma, seen)
                updated.append(Rating(mu, math.sqrt(var)))
        result.append(updated)
    return result
