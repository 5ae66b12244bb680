"""Predictions against independent oracles: scipy's normal CDF for the closed forms, Monte
Carlo over sampled performances; and the vectorised predictions against the implementation
they replaced, for every model on random cases (`balance`: test_balance.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from stream_rater.rating import Rating, TrueSkill, _latent
from stream_rater.rating.elo import Elo
from stream_rater.rating.plackett_luce import PlackettLuce
from stream_rater.rating.predict import _trueskill_pairs as general_pairs
from stream_rater.rating.predict import (
    as_read,
    evenness,
    expected,
    pairwise,
    predict,
    ranking_probabilities,
)
from stream_rater.rating.registry import create_model
from stream_rater.rating.sph_elo import SphElo
from tests.unit.rating.ratings import MODELS, random_rating

TS = TrueSkill(draw_probability=0.10)
MU = st.floats(0, 50)
SIGMA = st.floats(0.5, 10)
TS_RATING = st.builds(Rating, MU, SIGMA)


def test_two_trueskill_teams_match_the_closed_form_and_sum_to_one():
    """P(win), P(loss), P(draw) are the margin's normal probabilities (scipy) and sum to 1."""
    a, b = [Rating(28.0, 4.0), Rating(22.0, 6.0)], [Rating(25.0, 3.0)]
    p = predict(TS, [a, b])
    c = math.sqrt(sum(r.sigma**2 + TS.tau**2 + TS.beta**2 for r in a + b))
    eps = norm.ppf((TS.draw_probability + 1) / 2) * TS.beta * math.sqrt(3)
    delta = 50.0 - 25.0
    assert p.win_probabilities == pytest.approx(
        [norm.cdf((delta - eps) / c), norm.cdf((-delta - eps) / c)], abs=1e-12
    )
    assert p.draw_probability == pytest.approx(
        norm.cdf((eps - delta) / c) - norm.cdf((-eps - delta) / c), abs=1e-12
    )
    assert sum(p.win_probabilities) + p.draw_probability == pytest.approx(1.0, abs=1e-12)


def test_two_trueskill_teams_agree_with_monte_carlo_of_the_performances():
    """Sampled performances (β noise per player, τ dynamics) beat, lose and draw (|d| ≤ ε) as
    often as predicted, within 4 standard errors."""
    a, b = [Rating(26.0, 5.0)], [Rating(24.0, 2.0)]
    p = predict(TS, [a, b])
    rng = np.random.default_rng(3)
    n = 200_000
    spread = lambda r: math.sqrt(r.sigma**2 + TS.tau**2 + TS.beta**2)  # noqa: E731
    d = rng.normal(a[0].mu, spread(a[0]), n) - rng.normal(b[0].mu, spread(b[0]), n)
    eps = TS.draw_margin(2)
    observed = [(d > eps).mean(), (d < -eps).mean(), (abs(d) <= eps).mean()]
    for q, o in zip([*p.win_probabilities, p.draw_probability], observed):
        assert abs(q - o) < 4 * math.sqrt(q * (1 - q) / n)


def test_three_trueskill_teams_first_place_agrees_with_monte_carlo():
    """With three teams, each team's probability of the highest performance matches sampling."""
    teams = [[Rating(27.0, 3.0)], [Rating(25.0, 6.0)], [Rating(24.0, 1.0)]]
    p = predict(TS, teams)
    rng = np.random.default_rng(4)
    n = 200_000
    perf = np.stack(
        [rng.normal(t[0].mu, math.sqrt(t[0].sigma ** 2 + TS.tau**2 + TS.beta**2), n) for t in teams]
    )
    observed = np.bincount(perf.argmax(axis=0), minlength=3) / n
    assert p.draw_probability is None
    for q, o in zip(p.win_probabilities, observed):
        assert abs(q - o) < 4 * math.sqrt(q * (1 - q) / n)


def test_trueskill_quality_is_the_papers_equation_7_for_two_players():
    """Two players: sqrt(2β²/c²)·exp(−Δ²/2c²) with c² = 2β² + σ₁² + σ₂² (eq. 7)."""
    a, b = Rating(30.0, 4.0), Rating(25.0, 3.0)
    c2 = 2 * TS.beta**2 + a.sigma**2 + b.sigma**2
    expected = math.sqrt(2 * TS.beta**2 / c2) * math.exp(-((a.mu - b.mu) ** 2) / (2 * c2))
    assert predict(TS, [[a], [b]]).quality == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("model", [Elo(), PlackettLuce(), SphElo()], ids=["elo", "plackett-luce", "sph-elo"])
def test_elo_family_predicts_no_draw_and_its_own_win_probabilities(model):
    """Elo-family models: win probabilities are the model's, the draw 0, quality the evenness."""
    teams = [[Rating(1600.0)], [Rating(1500.0)]]
    p = predict(model, teams)
    assert p.win_probabilities == list(model.win_probabilities(teams))
    assert p.draw_probability == 0.0 and sum(p.win_probabilities) == pytest.approx(1.0)
    assert p.quality == pytest.approx(evenness(p.win_probabilities))
    assert predict(model, [[Rating(1500.0)], [Rating(1500.0)]]).quality == pytest.approx(1.0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(TS_RATING, min_size=1, max_size=3), min_size=2, max_size=4))
def test_probabilities_are_a_distribution_and_follow_the_teams(teams):
    """Probabilities lie in [0, 1] and sum to 1; reversing the teams reverses them."""
    p = predict(TS, teams)
    total = sum(p.win_probabilities) + (p.draw_probability or 0.0)
    assert total == pytest.approx(1.0, abs=1e-9)
    assert all(0.0 <= x <= 1.0 for x in p.win_probabilities) and 0.0 <= p.quality <= 1.0
    flipped = predict(TS, teams[::-1])
    assert flipped.win_probabilities == pytest.approx(p.win_probabilities[::-1], abs=1e-9)


def test_as_of_adds_the_idle_time_to_sigma_and_is_capped():
    """A time-scaled ladder's read adds γ²·Δt to σ² (capped at the prior); others are unchanged."""
    timed = TrueSkill(time_tau=1.0, time_unit="days")
    r = Rating(30.0, 2.0)
    assert timed.as_of(r, 3 * 86400).sigma == pytest.approx(math.sqrt(4.0 + 3.0))
    assert timed.as_of(r, 10**9).sigma == pytest.approx(timed.sigma)
    assert TS.as_of(r, 3 * 86400) == r and Elo().as_of(Rating(1500.0), 10**6) == Rating(1500.0)


def test_trueskill_ranking_probabilities_sum_to_one_and_match_the_first_place_ones():
    """Summed over the orders a team leads, the ranking probabilities give its first-place
    probability (the quadrature, an independent computation) within the sampling error."""
    teams = [[Rating(27.0, 3.0)], [Rating(25.0, 6.0)], [Rating(24.0, 1.0)], [Rating(20.0, 2.0)]]
    rankings = ranking_probabilities(TS, teams)
    assert len(rankings) == 24 and sum(rankings.values()) == pytest.approx(1.0)
    firsts = TS.win_probabilities(teams)
    for team, p in enumerate(firsts):
        assert sum(q for order, q in rankings.items() if order[0] == team) == pytest.approx(p, abs=0.005)


@pytest.mark.parametrize("model", [PlackettLuce(), Elo()], ids=["plackett-luce", "elo"])
def test_elo_family_rankings_are_a_distribution_with_the_models_first_place_marginals(model):
    """Sequential choice: the orders' probabilities sum to 1 and, summed over the orders a team
    leads, give exactly the model's own first-place probability."""
    teams = [[Rating(1600.0)], [Rating(1500.0)], [Rating(1450.0)]]
    rankings = ranking_probabilities(model, teams)
    assert len(rankings) == 6 and sum(rankings.values()) == pytest.approx(1.0, abs=1e-12)
    for team, p in enumerate(model.win_probabilities(teams)):
        assert sum(q for order, q in rankings.items() if order[0] == team) == pytest.approx(p, abs=1e-12)


def test_two_team_rankings_fold_the_draw_by_the_side_the_performances_fell():
    """What README and openapi.yaml say of a 2v2: the ranking [0, 1] is P(d > 0) — team 0's
    win (d > eps) plus the part of the draw band where it did better, P(0 < d <= eps) —
    computed here from the closed form, not from the sampler."""
    model = TrueSkill()
    teams = [[Rating(27.0, 4.0), Rating(24.0, 5.0)], [Rating(25.0, 3.0), Rating(24.5, 6.0)]]
    answer, ranked = predict(model, teams), ranking_probabilities(model, teams)
    delta = 27.0 + 24.0 - 25.0 - 24.5
    c = math.sqrt(sum(v for row in model.performance_variances(teams) for v in row))
    eps = model.draw_margin(4)
    in_band_better = norm.cdf(eps / c - delta / c) - norm.cdf(-delta / c)
    assert ranked[(0, 1)] == pytest.approx(answer.win_probabilities[0] + in_band_better, abs=0.004)
    assert ranked[(1, 0)] == pytest.approx(
        answer.win_probabilities[1] + answer.draw_probability - in_band_better, abs=0.004
    )
    assert ranked[(0, 1)] - answer.win_probabilities[0] > 0.01  # the fold is not nothing


def test_expected_of_two_teams_is_predict_and_of_more_the_pairs_averaged():
    """Two teams: each team's win probability and the shared draw probability of `predict`.
    Three: ``ahead`` is the mean of the pairs' `predict` win probabilities and the ranks of a
    model without draws add up to 1 + 2 + 3."""
    a, b, c = [Rating(30.0, 2.0)], [Rating(25.0, 4.0)], [Rating(20.0, 6.0)]
    p = predict(TS, [a, b])
    assert expected(TS, [a, b]) == [
        {"win": p.win_probabilities[0], "draw": p.draw_probability},
        {"win": p.win_probabilities[1], "draw": p.draw_probability},
    ]
    pairs = {
        (i, j): predict(TS, [t, u]).win_probabilities[0]
        for (i, t), (j, u) in itertools.permutations(enumerate([a, b, c]), 2)
    }
    three = expected(TS, [a, b, c])
    assert three[0]["ahead"] == pytest.approx((pairs[0, 1] + pairs[0, 2]) / 2)
    assert three[2]["rank"] == pytest.approx(1 + pairs[0, 2] + pairs[1, 2])
    elo = Elo()
    ranks = [
        e["rank"]
        for e in expected(elo, [[Rating(1500.0, None)], [Rating(1600.0, None)], [Rating(1400.0, None)]])
    ]
    assert sum(ranks) == pytest.approx(6.0) and ranks[1] < ranks[0] < ranks[2]


@settings(max_examples=200, deadline=None)
@given(
    st.builds(Rating, st.floats(-200, 200), st.floats(0.01, 50)),
    st.builds(Rating, st.floats(-200, 200), st.floats(0.01, 50)),
    st.sampled_from(["", "platt:0.8,0.1 draw:1.3"]),
    st.sampled_from([TS, TrueSkill(draw_probability=0.0, tau=0.0)]),
)
def test_a_duels_pair_is_bit_identical_to_the_per_team_form(a, b, calibration, model):
    """`pairwise` asks a 1v1 of `duel_probabilities`: to the bit what the per-team form of any
    other match gives the pair, calibrated or not."""
    model = _calibrated(model, calibration) if calibration else model
    assert pairwise(model, [[a], [b]]) == general_pairs(model, [[a], [b]])


def test_as_read_grows_each_rating_by_its_idle_time_only():
    timed = TrueSkill(time_tau=1.0, time_unit="days")
    teams = [[Rating(25.0, 3.0), Rating(25.0, 3.0)], [Rating(20.0, 3.0)]]
    read = as_read(timed, teams, [[86_400.0 * 7, None], [0.0]])
    assert (
        read[0][0].sigma == pytest.approx(math.sqrt(9.0 + 7.0))
        and read[0][1] == teams[0][1]
        and read[1] == teams[1]
    )
    assert as_read(timed, teams, None) is teams


def _calibrated(model, text):
    """A copy of `model` carrying the calibration `text` (what a ladder's parameter does)."""
    import copy

    from stream_rater.rating.calibration import Calibration

    twin = copy.copy(model)
    twin.calibration = Calibration.parse(text)
    return twin


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_calibrated_trueskill_prediction_differs_exactly_by_the_map():
    """Two TrueSkill teams: the quality is the model's; the win, loss and draw probabilities are
    ``σ(x' − w')``, ``σ(−x' − w')`` and the rest, with the raw gap and band in logits mapped by
    ``x' = a·x + b``, ``w' = e·w``."""
    teams = [[Rating(29.0, 3.0)], [Rating(24.0, 2.0)]]
    raw = predict(TS, teams)
    cal = predict(_calibrated(TS, "platt:0.8,0.1 draw:1.3"), teams)
    u, v = (math.log(p / (1 - p)) for p in raw.win_probabilities)
    gap, band = 0.8 * (u - v) / 2 + 0.1, 1.3 * -(u + v) / 2
    first, second = _sigmoid(gap - band), _sigmoid(-gap - band)
    assert cal.win_probabilities == pytest.approx([first, second], abs=1e-12)
    assert cal.draw_probability == pytest.approx(1 - first - second, abs=1e-12)
    assert cal.draw_probability > raw.draw_probability
    assert cal.quality == raw.quality


def test_calibrated_elo_prediction_and_quality_use_the_mapped_probabilities():
    """An Elo pair: ``p' = sigmoid(logit p / T)``, no draw, and the quality is the evenness of p'."""
    elo = Elo()
    teams = [[Rating(1700.0)], [Rating(1500.0)]]
    raw = predict(elo, teams)
    cal = predict(_calibrated(elo, "temperature:2"), teams)
    q = raw.win_probabilities[0]
    p = _sigmoid(math.log(q / (1 - q)) / 2)
    assert cal.win_probabilities == pytest.approx([p, 1 - p], abs=1e-12)
    assert cal.quality == pytest.approx(evenness([p, 1 - p]), abs=1e-12) and cal.quality > raw.quality
    assert cal.draw_probability == 0.0


# The vectorised predictions against the implementation they replaced, for every model on
# random cases: first-place probabilities against the per-team quadrature
# (`_latent._first_place`, still the fallback).


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
        cases.append([[random_rating(model, rng, spread) for _ in range(n)] for n in sizes])
    shared = [predict(model, teams) for teams in cases]
    monkeypatch.setattr(_latent, "_first_places", lambda *args: None)
    for teams, got in zip(cases, shared):
        want = predict(model, teams)
        assert got.win_probabilities == pytest.approx(want.win_probabilities, rel=1e-9, abs=1e-12)
        assert got.quality == pytest.approx(want.quality, rel=1e-9, abs=1e-12)


def test_a_model_that_says_it_is_gaussian_has_the_gaussian_capability():
    """`RatingModel.gaussian` is the model itself exactly when it has `GaussianPerformance`'s
    methods (TrueSkill), None for every other model."""
    from stream_rater.rating.base import GaussianPerformance

    for name in MODELS:
        model = create_model(name, {})
        assert (model.gaussian() is model) == model.GAUSSIAN == (name == "trueskill")
        assert not model.GAUSSIAN or isinstance(model, GaussianPerformance)
