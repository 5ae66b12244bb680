"""What the rating models' tests share: single-player teams and the rating moves a match makes."""

from __future__ import annotations

from stream_rater.rating.base import Outcome, Rating


def solo(*mus: float) -> list[list[Rating]]:
    return [[Rating(m)] for m in mus]


def deltas(model, teams, ranks) -> list[float]:
    result = model.rate_match(teams, Outcome(ranks=ranks))
    return [new[0].mu - old[0].mu for new, old in zip(result, teams)]
