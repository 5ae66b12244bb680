"""What the rating models' tests share: single-player teams, the rating moves a match makes,
and random ratings around any registered model's prior."""

from __future__ import annotations

import numpy as np

from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.rating.registry import MODEL_CLASSES

#: Every registered model's name, for tests parametrized over all of them.
MODELS = sorted(MODEL_CLASSES)


def solo(*mus: float) -> list[list[Rating]]:
    return [[Rating(m)] for m in mus]


def deltas(model, teams, ranks) -> list[float]:
    result = model.rate_match(teams, Outcome(ranks=ranks))
    return [new[0].mu - old[0].mu for new, old in zip(result, teams)]


def random_rating(model: RatingModel, rng: np.random.Generator, spread: float) -> Rating:
    """A random rating around the model's prior: μ moved by up to `spread` prior σ's (or 100
    points), σ between a tenth and all of the prior's."""
    prior = model.initial()
    if prior.sigma is None:
        return Rating(prior.mu + float(rng.normal(0, 100 * spread)), None)
    return Rating(
        prior.mu + float(rng.normal(0, prior.sigma * spread)), prior.sigma * float(rng.uniform(0.1, 1))
    )
