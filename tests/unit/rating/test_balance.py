"""`balance`: the split of a pool into teams with the highest match quality, against brute
forces that score every split (and, past the exhaustive limit, random deals), with parties and
their effects as the old search counted them."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from stream_rater.rating import Rating, TrueSkill
from stream_rater.rating._splits import labelled_splits
from stream_rater.rating._splits import splits as _splits
from stream_rater.rating.balance import EXHAUSTIVE_SPLITS, SlowBalance, _snake_draft, balance
from stream_rater.rating.predict import predict
from stream_rater.rating.registry import create_model
from tests.unit.rating.ratings import MODELS, random_rating

TS = TrueSkill(draw_probability=0.10)


def test_balance_of_ten_is_exhaustive_and_equals_a_brute_force():
    """5 v 5 from 10 players: the same best quality as scoring every one of the 252 deals."""
    rng = np.random.default_rng(5)
    pool = [Rating(float(m), float(s)) for m, s in zip(rng.normal(25, 6, 10), rng.uniform(1, 5, 10))]
    found = balance(TS, pool, [5, 5])
    best = max(
        TS.quality([[pool[i] for i in team], [pool[i] for i in range(10) if i not in team]])
        for team in itertools.combinations(range(10), 5)
    )
    assert found.exhaustive and found.quality == pytest.approx(best, rel=1e-12)
    assert sorted(i for team in found.teams for i in team) == list(range(10))


def test_balance_beyond_the_exhaustive_limit_comes_close_to_the_best():
    """Four teams of four (63 million deals): the heuristic's quality is within 5 % of the best
    of 3,000 random deals."""
    rng = np.random.default_rng(6)
    pool = [Rating(float(m), 2.0) for m in rng.normal(25, 8, 16)]
    heuristic = balance(TS, pool, [4, 4, 4, 4], budget=2.0)
    assert not heuristic.exhaustive
    assert sorted(len(t) for t in heuristic.teams) == [4, 4, 4, 4]
    best = best_of_random_deals(pool, [4, 4, 4, 4], tries=3000, seed=7)
    assert heuristic.quality >= 0.95 * best


def best_of_random_deals(pool: list[Rating], sizes: list[int], tries: int, seed: int) -> float:
    """The best quality among many random deals: a lower bound of the optimum, independent of
    `balance`'s search."""
    rng = np.random.default_rng(seed)
    best = 0.0
    for _ in range(tries):
        order = rng.permutation(len(pool))
        teams, start = [], 0
        for size in sizes:
            teams.append([pool[i] for i in order[start : start + size]])
            start += size
        best = max(best, TS.quality(teams))
    return best


def test_balance_keeps_parties_together_and_counts_their_effect():
    """A pair that queued together stays on one team, exhaustively and in the heuristic; with
    a party effect the best split is the brute-force best over the splits that keep the pair,
    scored with the effect as an extra member of the pair's team."""
    rng = np.random.default_rng(8)
    pool = [Rating(float(m), 2.0) for m in rng.normal(25, 6, 6)]
    effect = Rating(6.0, 1.0)
    found = balance(TS, pool, [3, 3], parties=[[0, 5]], party_effect=lambda n: effect)
    assert any({0, 5} <= set(team) for team in found.teams)
    best = max(
        TS.quality([[pool[i] for i in team] + [effect], [pool[i] for i in range(6) if i not in team]])
        for team in itertools.combinations(range(6), 3)
        if {0, 5} <= set(team)
    )
    assert found.quality == pytest.approx(best, rel=1e-12)
    big = [Rating(float(m), 2.0) for m in rng.normal(25, 8, 16)]
    heuristic = balance(TS, big, [4, 4, 4, 4], budget=0.3, parties=[[0, 1, 2], [3, 4]])
    assert not heuristic.exhaustive
    assert any({0, 1, 2} <= set(t) for t in heuristic.teams) and any(
        {3, 4} <= set(t) for t in heuristic.teams
    )
    with pytest.raises(ValueError, match="parties: a party of 3 fits in no team"):
        balance(TS, pool[:4], [2, 2], parties=[[0, 1, 2]])
    with pytest.raises(ValueError, match="parties: they fit in no split"):
        balance(TS, pool, [3, 3], parties=[[0, 1], [2, 3], [4, 5]])


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
        pool = [random_rating(model, rng, 1.0) for _ in range(sum(sizes))]
        effect_rating = random_rating(model, rng, 0.5)
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
    pool = [random_rating(model, rng, 1.0) for _ in range(18)]
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
    pool = [random_rating(model, rng, 1.0) for _ in range(100)]
    with pytest.raises(SlowBalance, match=r"too slow to search with the elo model.*fewer players or teams"):
        balance(model, pool, [10] * 10)
    found = balance(model, pool[:16], [4, 4, 4, 4], budget=1.0)
    assert not found.exhaustive and found.search.startswith("local search")
