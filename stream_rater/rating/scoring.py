"""How good one pre-match prediction was: the one definition of the prediction metrics, used
by `offline.evaluate` (a replay) and by the worker's live quality bookkeeping alike. Pure.

For a match whose teams are given as a read at the match's time sees them
(`rating.predict.as_read`) and its ranks:

- **wrong order**: each pair of teams with different ranks, 1 when the worse-ranked team had
  the higher win probability in `predict.probabilities` of the pair alone (for a two-team
  match: of the match), ½ when they were equal, else 0;
- **log-loss** and **Brier score** of a two-team match: with ``p`` the predicted probability
  of the observed outcome (first team wins, second wins, draw), ``-ln max(p, PROBABILITY_FLOOR)``
  and ``½ Σ (p_k − o_k)²``;
- **calibration**: each scored pair as (P(the first-listed team wins), whether it strictly
  did).

A model *predicts draws* when two newcomers get a draw probability above 0 (TrueSkill with
``draw_probability > 0``); otherwise (the Elo family: a draw is half a win) drawn pairs are
scored by nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from stream_rater.rating.base import RatingModel, Teams
from stream_rater.rating.predict import Pairs, probabilities

PROBABILITY_FLOOR = 1e-15
#: ``_new(MatchScore, values)`` skips the named tuple's Python-level ``__new__``.
_new = tuple.__new__


class MatchScore(NamedTuple):
    """One match's scores: `wrong` per decisive pair; `log_loss` and `brier` for a two-team
    match that is scored (None otherwise); `calibration` per scored pair. A named tuple: the
    worker makes one per match."""

    wrong: list[float]
    log_loss: float | None
    brier: float | None
    calibration: list[tuple[float, bool]]


def predicts_draws(model: RatingModel) -> bool:
    """Whether `model` gives two newcomers a draw probability above 0."""
    newcomer = [model.initial()]
    return bool(probabilities(model, [newcomer, newcomer])[1])


def score_match(
    model: RatingModel, draws: bool, teams: Teams, ranks: Sequence[float], pairs: Pairs | None = None
) -> MatchScore:
    """The scores of the prediction for a match of `teams` (as read at its time) that ended
    in `ranks`; `draws`: `predicts_draws` of `model`; `pairs`: `predict.pairwise` of `teams`,
    if known (else each pair scored is asked)."""
    n = len(teams)
    if n == 2:
        if pairs is None:
            (p_a, p_b), draw = probabilities(model, teams)
            return _score_two(draws, ranks[0], ranks[1], (p_a, p_b, draw or 0.0))
        return _score_two(draws, ranks[0], ranks[1], pairs[0, 1])
    wrong: list[float] = []
    calibration: list[tuple[float, bool]] = []
    for a in range(n):
        rank_a = ranks[a]
        for b in range(a + 1, n):
            decisive = rank_a != ranks[b]
            if not (decisive or draws):
                continue
            if pairs is None:
                (p_a, p_b), _ = probabilities(model, [teams[a], teams[b]])
            else:
                p_a, p_b, _ = pairs[a, b]
            a_won = rank_a < ranks[b]
            if decisive:
                wrong.append(0.5 if p_a == p_b else float((p_a > p_b) != a_won))
            calibration.append((p_a, a_won))
    return _new(MatchScore, (wrong, None, None, calibration))


def _score_two(draws: bool, rank_a: float, rank_b: float, pair: tuple[float, float, float]) -> MatchScore:
    """`score_match` of a two-team match whose `pair` is ``(P(a wins), P(b wins), P(draw))``:
    its wrong order, log-loss, Brier score and calibration pair."""
    decisive = rank_a != rank_b
    if not (decisive or draws):
        return _new(MatchScore, ([], None, None, []))
    p_a, p_b, draw = pair
    a_won = rank_a < rank_b
    wrong = [(0.5 if p_a == p_b else 1.0 if (p_a > p_b) != a_won else 0.0)] if decisive else []
    if a_won:  # p: the observed outcome's probability; o_*: 1.0 for the observed one
        p, o_a, o_b, o_draw = p_a, 1.0, 0.0, 0.0
    elif decisive:
        p, o_a, o_b, o_draw = p_b, 0.0, 1.0, 0.0
    else:
        p, o_a, o_b, o_draw = draw, 0.0, 0.0, 1.0
    log_loss = -math.log(PROBABILITY_FLOOR if p < PROBABILITY_FLOOR else p)  # `max(p, FLOOR)`
    brier = math.fsum(((p_a - o_a) ** 2, (p_b - o_b) ** 2, (draw - o_draw) ** 2)) / 2
    return _new(MatchScore, (wrong, log_loss, brier, [(p_a, a_won)]))


def calibration_bin(p: float, bins: int) -> int:
    """The equal-width bin of [0, 1] (of `bins`) probability `p` falls in; 1 in the last."""
    k = int(p * bins)
    return k if k < bins - 1 else bins - 1  # `min(k, bins - 1)` without the builtin's call
