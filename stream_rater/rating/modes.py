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
from dataclasses import dataclass

from stream_rater.rating.base import Rating, RatingModel


def first_in_mode(model: RatingModel, others: Sequence[Rating], coupling: float) -> Rating:
    """The prior of a player's first match in a mode, given their states in the ladder's
    other modes (`others`) and the ladder's `coupling` ρ in [0, 1]. `offline.modes` (what
    ``evaluate``, ``tune`` and ``bench modes`` measure) passes the states in sorted mode order,
    each as read at the match's time (`RatingModel.as_of` with its idle time); the new state
    has no last-played time."""
    prior = model.initial()
    if not others or coupling == 0.0:
        return prior
    mu, sigma = _pooled(others)
    new_mu = prior.mu + coupling * (mu - prior.mu)
    if prior.sigma is None or sigma is None:
        return Rating(new_mu, prior.sigma, prior.extra)
    variance = prior.sigma**2 * (1.0 - coupling**2) + coupling**2 * sigma**2
    return Rating(new_mu, math.sqrt(variance), prior.extra)


def cross_update(other: Rating, before: Rating, after: Rating, coupling: float) -> Rating:
    """A player's state in another mode (`other`) after a match in mode M moved their M
    state from `before` (as the model rated it: aged by its idle time) to `after`.

    The modes' skills are taken as jointly Gaussian with correlation ρ = `coupling`: the
    cross-covariance is ``c = ρ σ_o σ_M``. The match's factors attach to ``s_M`` only, so by
    the seed's (6) the match sends ``s_M`` the message ``m(s_M) = p'(s_M) / p(s_M)`` (the
    model's posterior over its prior), and by (3)-(4) the other mode's new marginal is
    ``∫ N((s_M, s_o); μ, Σ) m(s_M) ds_M``: a Gaussian conditioned through ``s_M`` (a Kalman
    update), ``μ_o += ρ (σ_o / σ_M) (μ'_M − μ_M)`` and
    ``σ_o² ← σ_o² (1 − ρ² (1 − σ'_M² / σ_M²))``. The shrink factor is held in [0, 1] (a
    model's per-match dynamics may widen `after` beyond `before`: then nothing is learnt
    about σ). The correlation of the two states is assumed ρ again at every match (only the
    marginals are kept), so ρ = 0 leaves `other` as it is and ρ = 1 moves it as M moved.
    Without a σ (Elo models) the mean moves by ρ Δμ. Pure: a replay computes the same."""
    if coupling == 0.0:
        return other
    extra = other[2] if len(other) > 2 else None  # a model may build (mu, sigma) by tuple.__new__
    shift = after.mu - before.mu
    if other.sigma is None or before.sigma is None or after.sigma is None or before.sigma <= 0.0:
        return Rating(other.mu + coupling * shift, other.sigma, extra)
    learnt = min(1.0, max(0.0, 1.0 - (after.sigma / before.sigma) ** 2))
    mu = other.mu + coupling * other.sigma / before.sigma * shift
    return Rating(mu, other.sigma * math.sqrt(1.0 - coupling**2 * learnt), extra)


def _pooled(others: Sequence[Rating]) -> tuple[float, float | None]:
    """One state standing for several: precision-weighted when every state has a σ."""
    if any(state.sigma is None for state in others):
        return math.fsum(state.mu for state in others) / len(others), None
    precisions = [1.0 / state.sigma**2 for state in others if state.sigma is not None]
    total = math.fsum(precisions)
    mu = math.fsum(p * state.mu for p, state in zip(precisions, others)) / total
    return mu, math.sqrt(1.0 / total)


@dataclass(frozen=True, slots=True)
class Joint:
    """The richer form (TrueSkill 2's shared skill plus per-mode offsets): a player's skills
    ``x = (s, o_1, …, o_k)`` — a skill shared by every mode and an offset per mode played
    (`modes`, in the order first played) — jointly Gaussian with `mean` and covariance `cov`;
    their skill in mode ``m`` is ``s + o_m``. `last` is each component's last-update time (for
    time dynamics), None before its first. The covariance is kept whole: a mode's results
    only tell ``s + o_m``, so ``s`` and ``o_m`` become negatively correlated, and dropping
    that would make the player's other modes too sure of ``s``."""

    modes: tuple[str, ...]
    mean: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...]
    last: tuple[float | None, ...]


def joint_prior(model: RatingModel, coupling: float) -> Joint:
    """A new player's `Joint`: ``s ~ N(μ₀, ρσ₀²)`` and no mode yet (each offset, once
    played, ``~ N(0, (1 − ρ)σ₀²)``, independent), so two modes correlate by ρ as in
    `first_in_mode`: ρ = 1 is one rating for all modes, ρ = 0 one per mode. Models with a σ."""
    prior = model.initial()
    if prior.sigma is None:
        raise ValueError(f"shared skill and per-mode offsets need a model with a σ, not {model.name!r}")
    return Joint((), (prior.mu,), ((coupling * prior.sigma**2,),), (None,))


def with_mode(joint: Joint, mode: str, model: RatingModel, coupling: float) -> Joint:
    """`joint` with an offset for `mode` (unchanged if it has one): ``N(0, (1 − ρ)σ₀²)``."""
    if mode in joint.modes:
        return joint
    sigma = model.initial().sigma
    assert sigma is not None
    cov = [(*row, 0.0) for row in joint.cov]
    cov.append((*(0.0 for _ in joint.mean), (1.0 - coupling) * sigma**2))
    return Joint((*joint.modes, mode), (*joint.mean, 0.0), tuple(cov), (*joint.last, None))


def in_mode(joint: Joint, mode: str) -> Rating:
    """The player's rating in `mode` (an offset of `joint`): ``s + o_m``."""
    k = 1 + joint.modes.index(mode)
    c = joint.cov
    return Rating(joint.mean[0] + joint.mean[k], math.sqrt(max(c[0][0] + c[k][k] + 2.0 * c[0][k], 0.0)))


def updated(joint: Joint, mode: str, before: Rating, after: Rating, at: float) -> Joint:
    """`joint` after a model's update of its `mode` rating from `before` (`in_mode`) to
    `after` at time `at`: the exact Gaussian update of all components given the model's
    message on ``s + o_m`` — with ``g = Cov(x, s + o_m)``, ``μ += g Δμ / σ²`` and
    ``Σ −= g gᵀ (σ² − σ'²) / σ⁴`` (a Kalman update)."""
    assert before.sigma is not None and after.sigma is not None
    k = 1 + joint.modes.index(mode)
    var = before.sigma**2
    gain = [row[0] + row[k] for row in joint.cov]
    shift, shrink = (after.mu - before.mu) / var, (var - after.sigma**2) / (var * var)
    mean = tuple(m + g * shift for m, g in zip(joint.mean, gain))
    cov = tuple(tuple(c - gi * gj * shrink for c, gj in zip(row, gain)) for row, gi in zip(joint.cov, gain))
    last = tuple(at if i in (0, k) else t for i, t in enumerate(joint.last))
    return Joint(joint.modes, mean, cov, last)


def aged(joint: Joint, mode: str, model: RatingModel, coupling: float, at: float) -> Joint:
    """`joint` read at `at` for a match in `mode`: the shared skill aged by ρ of the model's
    time dynamics since it last changed (any mode), the mode's offset by 1 − ρ since its
    last match in the mode, each capped at its share of the prior variance (`RatingModel.as_of`
    of the component scaled by 1/√share, scaled back)."""
    if not model.ages:
        return joint
    cov = [list(row) for row in joint.cov]
    k = 1 + joint.modes.index(mode)
    for i, share in ((0, coupling), (k, 1.0 - coupling)):
        then = joint.last[i]
        if then is None or share <= 0.0 or at <= then:
            continue
        scale = math.sqrt(share)
        read = model.as_of(Rating(0.0, math.sqrt(max(cov[i][i], 0.0)) / scale), at - then)
        assert read.sigma is not None
        cov[i][i] = (read.sigma * scale) ** 2
    return Joint(joint.modes, joint.mean, tuple(tuple(row) for row in cov), joint.last)
