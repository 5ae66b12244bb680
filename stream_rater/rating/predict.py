"""Questions asked of ratings: who wins, how likely a draw is, how fair a match is (which split
of a pool into teams is fairest: `rating.balance`). Pure: models and `Rating`s in, numbers out.

- **Win probabilities** are each model's own (`RatingModel.win_probabilities`): the probability
  that a team's performance is the highest.
- **Two TrueSkill teams** (section 4.1 of the paper): performance difference ``d ~ N(Δ, c²)``
  with ``Δ = M₀ − M₁`` and ``c² = Σ (σ² + τ² + β²)`` over both teams, draw margin ``ε``;
  ``P(team 0 wins) = Φ((Δ − ε)/c)``, ``P(team 1 wins) = Φ((−Δ − ε)/c)`` and the draw takes the
  rest, so the three sum to 1. With more teams draws are not predicted (``None``).
- **Elo-family models** (Elo, SPH Elo, Plackett-Luce, Thurstonian, duelling Elo) have no draw
  outcome to predict: a draw is a result they score as half a win. Their draw probability is
  0 for two teams, and the two win probabilities sum to 1.
- **Expected outcome** of a match, per team (`expected`, carried by rating-changed events):
  for two teams the team's win probability and the draw probability, as `predict` gives them;
  for more, the probability of finishing ahead of each other team (`predict` of the pair
  alone, as `evaluate` scores pairs) averaged over the others, and the expected rank
  ``1 + Σ P(another team finishes ahead)`` (1 = first; a draw shares the better rank).
- **Match quality**: TrueSkill's is the paper's eq. (7) (`TrueSkill.quality`). For the other
  models it is the normalised entropy of the first-place distribution,
  ``−Σ p log p / log n`` — 1 when every team is equally likely to win, towards 0 as one
  team becomes certain; for two teams it orders splits as ``1 − |p₀ − p₁|`` does.
- **Calibration**: a model with a `Calibration` (the ladder parameter ``calibration``) has its
  win and draw probabilities mapped through it (`Calibration.apply`: the strength gap and the
  draw band in logits), in `predict` — the one function the read API, ``balance``,
  ``evaluate`` and the quality metrics ask. The quality of the non-TrueSkill models is then the
  evenness of the calibrated probabilities; TrueSkill's eq. (7) does not depend on it.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from stream_rater.rating._gaussian import cdf
from stream_rater.rating.base import GaussianPerformance, RatingModel, Teams

_MU = operator.attrgetter("mu")

#: Most teams `ranking_probabilities` answers for (24 orders of 4 teams).
MAX_RANKED_TEAMS = 4
#: Samples of the TrueSkill ranking estimate: a standard error below 0.0012 per order.
RANKING_SAMPLES = 200_000


@dataclass(frozen=True, slots=True)
class Prediction:
    """What `predict` says of a proposed match, teams in the order given."""

    win_probabilities: list[float]
    draw_probability: float | None
    quality: float


def predict(model: RatingModel, teams: Teams) -> Prediction:
    """Win probabilities, the draw probability (two teams) and the match quality of `teams`,
    the probabilities mapped through the model's `calibration` when it has one."""
    wins, draw = probabilities(model, teams)
    gaussian = model.gaussian()
    if gaussian is None:
        return Prediction(wins, draw, evenness(wins))
    return Prediction(wins, draw, gaussian.quality(teams))


def predict_raw(model: RatingModel, teams: Teams) -> Prediction:
    """`predict` as the model itself gives it, without its calibration (what one is fitted on)."""
    wins, draw = raw_probabilities(model, teams)
    quality = evenness(wins) if (gaussian := model.gaussian()) is None else gaussian.quality(teams)
    return Prediction(wins, draw, quality)


def probabilities(model: RatingModel, teams: Teams) -> tuple[list[float], float | None]:
    """`predict`'s win probabilities and draw probability (calibrated) without the match
    quality (which costs a TrueSkill 1v1 some 11 µs of the 13): what the processor asks of
    every match, for the events' `expected` and the live quality alike."""
    wins, draw = raw_probabilities(model, teams)
    calibration = model.calibration
    return (wins, draw) if calibration is None else calibration.apply(wins, draw)


def raw_probabilities(model: RatingModel, teams: Teams) -> tuple[list[float], float | None]:
    """The model's own win and draw probabilities of `teams`, before any calibration."""
    if len(teams) < 2 or not all(teams):
        raise ValueError("a match needs at least two teams, each with a player")
    gaussian = model.gaussian()
    if gaussian is None:
        return list(model.win_probabilities(teams)), 0.0 if len(teams) == 2 else None
    if len(teams) != 2:
        return gaussian.win_probabilities(teams), None
    delta = math.fsum(r.mu for r in teams[0]) - math.fsum(r.mu for r in teams[1])
    c = math.sqrt(math.fsum(v for row in gaussian.performance_variances(teams) for v in row))
    eps = gaussian.draw_margin(len(teams[0]) + len(teams[1]))
    wins = [cdf((delta - eps) / c), cdf((-delta - eps) / c)]
    return wins, max(0.0, 1.0 - wins[0] - wins[1])


def as_read(model: RatingModel, teams: Teams, elapsed: Sequence[Sequence[float | None]] | None) -> Teams:
    """`teams` as a read at the match's time sees them: each rating `RatingModel.as_of` its
    idle time in `elapsed` (None: no previous match, or no idle time known); `teams` itself
    when nothing changes them (no `elapsed`, or a model whose `as_of` changes no rating)."""
    if elapsed is None or not model.ages:
        return teams
    return [
        [r if gap is None else model.as_of(r, gap) for r, gap in zip(team, gaps)]
        for team, gaps in zip(teams, elapsed)
    ]


#: (team i, team j) with i < j → the pair's `probabilities` asked alone: P(i wins), P(j
#: wins), P(draw) (0 for a model without draws).
Pairs = dict[tuple[int, int], tuple[float, float, float]]


def pairwise(model: RatingModel, teams: Teams) -> Pairs:
    """`probabilities` of every pair of `teams` asked alone (of the match, for two teams):
    what `expected` and `rating.scoring.score_match` both read, computed once per match."""
    gaussian = model.gaussian()
    if gaussian is not None and len(teams) == 2 and len(teams[0]) == 1 == len(teams[1]):
        (a,), (b,) = teams  # a 1v1, the commonest match: `GaussianPerformance.duel_probabilities`
        win_a, win_b, tie = gaussian.duel_probabilities(a, b)
        return {
            (0, 1): (win_a, win_b, tie)
            if gaussian.calibration is None
            else _calibrated(gaussian, win_a, win_b, tie)
        }
    if gaussian is not None and len(teams) >= 2 and all(teams):
        return _trueskill_pairs(gaussian, teams)
    pairs: Pairs = {}
    for i, j in itertools.combinations(range(len(teams)), 2):
        (p_i, p_j), draw = probabilities(model, [teams[i], teams[j]])
        pairs[i, j] = (p_i, p_j, draw or 0.0)
    return pairs


def _trueskill_pairs(model: GaussianPerformance, teams: Teams) -> Pairs:
    """`pairwise` of TrueSkill, each pair as `raw_probabilities` computes it (section 4.1,
    the same operations on the same numbers, so the same bits), each team's mean and
    performance variances computed once instead of once per pair it is in. (`pairwise`
    asks a 1v1 of `GaussianPerformance.duel_probabilities`: the same without the lists.)"""
    variances = model.performance_variances(teams)
    means = [math.fsum(map(_MU, team)) for team in teams]
    pairs: Pairs = {}
    for i, j in ((0, 1),) if len(teams) == 2 else itertools.combinations(range(len(teams)), 2):
        var = math.fsum(variances[i] + variances[j])
        pairs[i, j] = _pair(model, means[i] - means[j], var, len(teams[i]) + len(teams[j]))
    return pairs


def _pair(model: GaussianPerformance, delta: float, var: float, players: int) -> tuple[float, float, float]:
    """P(i wins), P(j wins) and P(draw) of a pair of teams with mean difference `delta`,
    performance variance `var` in all and `players` players (`_trueskill_pairs`)."""
    c, eps = math.sqrt(var), model.draw_margin(players)
    win_i, win_j = cdf((delta - eps) / c), cdf((-delta - eps) / c)
    rest = 1.0 - win_i - win_j
    draw = rest if rest > 0.0 else 0.0  # `max(0.0, rest)` without the call
    if model.calibration is None:  # no list of the wins to make
        return (win_i, win_j, draw)
    return _calibrated(model, win_i, win_j, draw)


def _calibrated(
    model: GaussianPerformance, win_i: float, win_j: float, draw: float
) -> tuple[float, float, float]:
    """A pair's P(i wins), P(j wins) and P(draw) mapped through the model's calibration."""
    assert model.calibration is not None  # (the callers' test)
    (win_i, win_j), calibrated = model.calibration.apply([win_i, win_j], draw)
    return (win_i, win_j, calibrated or 0.0)


def expected(model: RatingModel, teams: Teams, pairs: Pairs | None = None) -> list[dict[str, float]]:
    """Per team, what `predict` expected of it: ``{"win", "draw"}`` for two teams,
    ``{"ahead", "rank"}`` for more (see the module docstring); `pairs`: `pairwise` of
    `teams`, if known."""
    if pairs is None:
        pairs = pairwise(model, teams)
    if len(teams) == 2:
        p_0, p_1, draw = pairs[0, 1]
        return [{"win": p_0, "draw": draw}, {"win": p_1, "draw": draw}]
    n = len(teams)
    ahead = [[0.0] * n for _ in range(n)]  # ahead[i][j]: P(team i finishes ahead of team j)
    for (i, j), (p_i, p_j, _) in pairs.items():
        ahead[i][j], ahead[j][i] = p_i, p_j
    return [
        {"ahead": math.fsum(row) / (n - 1), "rank": 1.0 + math.fsum(column)}
        for row, column in zip(ahead, zip(*ahead))  # column i: P(each team finishes ahead of i)
    ]


def ranking_probabilities(model: RatingModel, teams: Teams, seed: int = 0) -> dict[tuple[int, ...], float]:
    """P(each full strict ranking), best team first, for up to `MAX_RANKED_TEAMS` teams.

    TrueSkill: team performances are sampled (``RANKING_SAMPLES``, seeded, so an answer is
    reproducible) as ``N(M_j, S_j²)`` with ``S_j² = Σ (σ² + τ² + β²)``; draws are not counted.
    Other models: sequential choice, ``Π_k P(team π_k first among π_k…π_n)`` with the model's
    own first-place probabilities — an approximation (the Elo variants define first-place and
    pairwise probabilities, not a distribution over full rankings) whose first-place
    marginals are exactly the model's.
    """
    if not 2 <= len(teams) <= MAX_RANKED_TEAMS:
        raise ValueError(f"ranking probabilities are given for 2 to {MAX_RANKED_TEAMS} teams")
    orders = list(itertools.permutations(range(len(teams))))
    gaussian = model.gaussian()
    if gaussian is not None:
        import numpy as np  # only here: the worker imports this module for every match, never this

        means = [math.fsum(r.mu for r in team) for team in teams]
        stds = [math.sqrt(math.fsum(row)) for row in gaussian.performance_variances(teams)]
        draws = np.random.default_rng(seed).normal(means, stds, size=(RANKING_SAMPLES, len(teams)))
        ranked = np.argsort(-draws, axis=1)
        codes = (ranked * len(teams) ** np.arange(len(teams))).sum(axis=1)
        counts = np.bincount(codes, minlength=len(teams) ** len(teams))
        base = [len(teams) ** k for k in range(len(teams))]
        return {order: counts[sum(t * b for t, b in zip(order, base))] / RANKING_SAMPLES for order in orders}
    result: dict[tuple[int, ...], float] = {}
    for order in orders:
        p = 1.0
        for k in range(len(order) - 1):
            p *= model.win_probabilities([teams[t] for t in order[k:]])[0]
        result[order] = p
    return result


def evenness(probabilities: Sequence[float]) -> float:
    """Normalised entropy of a distribution over n ≥ 2 outcomes, in [0, 1]."""
    total = math.fsum(probabilities)
    entropy = -math.fsum(p / total * math.log(p / total) for p in probabilities if p > 0)
    return min(1.0, max(0.0, entropy / math.log(len(probabilities))))
