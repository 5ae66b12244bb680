"""The vectorised predictions and balance against the implementations they replaced, for every
model on random cases: first-place probabilities against the per-team quadrature
(`_latent._first_place`, still the fallback), and `balance` against a brute force that
scores every split with `predict`, parties and their effects as the old search counted them."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from stream_rater.rating import _latent
from stream_rater.rating.base import Rating, RatingModel
from stream_rater.rating.predict import (
    EXHAUSTIVE_SPLITS,
    SlowBalance,
    _snake_draft,
    _splits,
    balance,
    labelled_splits,
    predict,
)
from stream_rater.rating.registry import MODEL_CLASSES, create_model

MODELS = sorted(MODEL_CLASSES)


def _rating(model: RatingModel, rng: np.random.Generator, spread: float) -> Rating:
    """A random rating around the model's prior: μ moved by up to `spread` prior σ's (or 100
    points), σ between a tenth and all of the prior's."""
    prior = model.initial()
    if prior.sigma is None:
        return Rating(prior.mu + float(rng.normal(0, 100 * spread)), None)
    return Rating(
        prior.mu + float(rng.normal(0, prior.sigma * spread)), prior.sigma * float(rng.uniform(0.1, 1))
    )


@pytest.mark.parametrize("name", MODELS)
def test_predict_equals_the_per_team_quadrature(name, monkeypatch):
    """3 to 9 teams of 1 to 3 players, close and far apart: the probabilities and quality equal
    those of the per-team integrals to 1e-12."""
    model = create_model(name)
    rng = np.random.default_rng(len(name))
    cases = []
    for k in range(12):
        spread = (0.2, 1.0, 4.0)[k % 3]
        sizes = rng.integers(1, 4, size=int(rng.integers(3, 10)))
        cases.append([[_rating(model, rng, spread) for _ in range(n)] for n in sizes])
    shared = [predict(model, teams) for teams in cases]
    monkeypatch.setattr(_latent, "_first_places", lambda *args: None)
    for teams, got in zip(cases, shared):
        want = predict(model, teams)
        assert got.win_probabilities == pytest.approx(want.win_probabilities, rel=1e-9, abs=1e-12)
        assert got.quality == pytest.approx(want.quality, rel=1e-9, abs=1e-12)


def _brute_force(model, pool, sizes, parties, effect) -> float:
    """The best `predict` quality over every split, a split party scoring −1 and each team's
    distinct whole-party sizes n >= 2 adding ``effect(n)`` as a member (the old `balance`)."""
    party_of = {i: k for k, party in enumerate(parties) for i in party}
    best = -1.0
    for split in _splits(list(range(len(pool))), list(sizes)):
        teams = []
        for team in split:
            counts = Counter(party_of[i] for i in team if i in party_of)
            if any(n != len(parties[k]) for k, n in counts.items()):
                break
            extra = [effect(n) for n in sorted({n for n in counts.values() if n >= 2})] if effect else []
            teams.append([pool[i] for i in team] + extra)
        else:
            best = max(best, predict(model, teams).quality)
    return best


@pytest.mark.parametrize("name", MODELS)
def test_balance_equals_a_brute_force_over_every_split(name):
    """Two, three and uneven teams, with and without parties and party effects: the best
    quality equals the brute force's to 1e-12, and is the quality of the split it names."""
    model = create_model(name)
    rng = np.random.default_rng(7 + len(name))
    shapes = [
        ([3, 3], [], False),
        ([4, 4], [[0, 5]], True),
        ([2, 2, 2], [[1, 2]], True),
        ([2, 3, 3], [], False),
    ]
    for sizes, parties, with_effect in shapes:
        pool = [_rating(model, rng, 1.0) for _ in range(sum(sizes))]
        effect_rating = _rating(model, rng, 0.5)
        effect = (lambda n, r=effect_rating: r) if with_effect else None
        found = balance(model, pool, sizes, parties=parties, party_effect=effect)
        assert found.exhaustive and found.search.startswith("exhaustive")
        assert found.quality == pytest.approx(
            _brute_force(model, pool, sizes, parties, effect), rel=1e-9, abs=1e-12
        )
        teams = [[pool[i] for i in team] for team in found.teams]
        for team, members in zip(teams, found.teams):
            whole = {len(p) for p in parties if set(p) <= set(members) and len(p) >= 2}
            team += [effect(n) for n in sorted(whole)] if effect else []
        assert predict(model, teams).quality == pytest.approx(found.quality, rel=1e-9, abs=1e-12)


def test_a_balance_past_the_exhaustive_limit_says_it_searched_locally():
    """18 players into three teams of six (17 million labelled splits): a local search that
    says so, and never worse than the snake draft it starts from."""
    model = create_model("trueskill")
    rng = np.random.default_rng(3)
    pool = [_rating(model, rng, 1.0) for _ in range(18)]
    assert labelled_splits([6, 6, 6]) > EXHAUSTIVE_SPLITS
    found = balance(model, pool, [6, 6, 6], budget=1.0)
    assert not found.exhaustive and found.search.startswith("local search")
    assert "17,153,136 labelled splits" in found.search and "until no swap improved it" in found.search
    snake = [[pool[i] for i in team] for team in _snake_draft(pool, [6, 6, 6])]
    assert found.quality >= predict(model, snake).quality - 1e-12
    assert sorted(itertools.chain(*found.teams)) == list(range(18))


def test_a_balance_too_slow_to_search_one_split_at_a_time_is_refused():
    """Elo scores splits one by one: 100 players into ten teams is refused, naming the model
    and what to ask instead; 16 players into four teams is searched locally."""
    model = create_model("elo")
    rng = np.random.default_rng(4)
    pool = [_rating(model, rng, 1.0) for _ in range(100)]
    with pytest.raises(SlowBalance, match=r"too slow to search with the elo model.*fewer players or teams"):
        balance(model, pool, [10] * 10)
    found = balance(model, pool[:16], [4, 4, 4, 4], budget=1.0)
    assert not found.exhaustive and found.search.startswith("local search")
