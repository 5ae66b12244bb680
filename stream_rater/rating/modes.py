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


def parts_prior(model: RatingModel, coupling: float) -> tuple[Rating, Rating]:
    """The richer form's prior (TrueSkill 2's shared skill plus per-mode offsets): a player's
    skill in a mode is ``s + o`` with ``s ~ N(μ₀, ρσ₀²)`` shared by every mode and
    ``o ~ N(0, (1 − ρ)σ₀²)`` its own, independent, so that two modes correlate by ρ as in
    `first_in_mode`; the (shared, offset) pair. Models with a σ only."""
    prior = model.initial()
    if prior.sigma is None:
        raise ValueError(f"shared skill and per-mode offsets need a model with a σ, not {model.name!r}")
    return (
        Rating(prior.mu, prior.sigma * math.sqrt(coupling)),
        Rating(0.0, prior.sigma * math.sqrt(1.0 - coupling)),
    )


def in_mode(shared: Rating, offset: Rating) -> Rating:
    """The player's rating in a mode: the sum of their shared skill and the mode's offset."""
    assert shared.sigma is not None and offset.sigma is not None
    return Rating(shared.mu + offset.mu, math.sqrt(shared.sigma**2 + offset.sigma**2))


def split(shared: Rating, offset: Rating, before: Rating, after: Rating) -> tuple[Rating, Rating]:
    """Share a model's update of the sum (`before` → `after`, `before` = `in_mode`) between
    the two parts, each by its share of the variance: the exact Gaussian update of ``s`` and
    ``o`` given the model's message on ``s + o`` (a Kalman gain ``k = σₚ²/σ²`` per part:
    ``μₚ += k Δμ``, ``σₚ² −= k² (σ² − σ'²)``); the new (shared, offset)."""
    assert before.sigma is not None and after.sigma is not None
    var, shrink, shift = before.sigma**2, before.sigma**2 - after.sigma**2, after.mu - before.mu
    new = []
    for part in (shared, offset):
        assert part.sigma is not None
        gain = part.sigma**2 / var
        new.append(Rating(part.mu + gain * shift, math.sqrt(max(part.sigma**2 - gain * gain * shrink, 0.0))))
    return new[0], new[1]


def aged(model: RatingModel, part: Rating, share: float, idle_seconds: float) -> Rating:
    """A part holding `share` of the prior's variance, `idle_seconds` after it last changed:
    aged by `share` of the model's time dynamics and capped at `share` of the prior variance
    (`RatingModel.as_of` of the part scaled by 1/√share, scaled back)."""
    if share <= 0.0 or part.sigma is None or not model.ages:
        return part
    scale = math.sqrt(share)
    read = model.as_of(Rating(part.mu, part.sigma / scale), idle_seconds)
    assert read.sigma is not None
    return Rating(part.mu, read.sigma * scale)
