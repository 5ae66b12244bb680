"""A player's first rating in one mode of a ladder, from their ratings in its other modes.

Issue 48: a ladder may rate players in several modes (duels, team games, free-for-all). A
player new to a mode is not new to the ladder. A player's skills in two modes are taken as
jointly Gaussian around the model's prior N(μ₀, σ₀²) with correlation ρ (the ladder's mode
`coupling`). Conditioning mode m's skill on a known mode-k state N(μₖ, σₖ²) gives

    μ = μ₀ + ρ (μₖ − μ₀),    σ² = σ₀² (1 − ρ²) + ρ² σₖ²,

so ρ = 0 is "modes independent" (the prior itself) and ρ = 1 carries the other mode over
whole. Several known modes are pooled first, by precision (by plain mean for models
without σ). Pure and deterministic, so a replay computes the same prior as the stream.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stream_rater.rating.base import Rating, RatingModel


def first_in_mode(model: RatingModel, others: Sequence[Rating], coupling: float) -> Rating:
    """The prior of a player's first match in a mode, given their states in the ladder's
    other modes (`others`, in any fixed order) and the ladder's `coupling` ρ in [0, 1]."""
    prior = model.initial()
    if not others or coupling == 0.0:
        return prior
    mu, sigma = _pooled(others)
    new_mu = prior.mu + coupling * (mu - prior.mu)
    if prior.sigma is None or sigma is None:
        return Rating(new_mu, prior.sigma, prior.extra)
    variance = prior.sigma**2 * (1.0 - coupling**2) + coupling**2 * sigma**2
    return Rating(new_mu, math.sqrt(variance), prior.extra)


def _pooled(others: Sequence[Rating]) -> tuple[float, float | None]:
    """One state standing for several: precision-weighted when every state has a σ."""
    if any(state.sigma is None for state in others):
        return math.fsum(state.mu for state in others) / len(others), None
    precisions = [1.0 / state.sigma**2 for state in others if state.sigma is not None]
    total = math.fsum(precisions)
    mu = math.fsum(p * state.mu for p, state in zip(precisions, others)) / total
    return mu, math.sqrt(1.0 / total)
