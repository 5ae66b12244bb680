"""The first rating in a mode, conditioned on the player's other modes (rating/modes.py)."""

import math

import pytest

from stream_rater.rating import create_model
from stream_rater.rating.base import Rating
from stream_rater.rating.modes import first_in_mode


@pytest.fixture
def trueskill():
    return create_model("trueskill")


def test_no_other_mode_or_no_coupling_is_the_prior(trueskill):
    assert first_in_mode(trueskill, [], 0.7) == trueskill.initial()
    assert first_in_mode(trueskill, [Rating(40.0, 2.0)], 0.0) == trueskill.initial()


def test_conditional_gaussian(trueskill):
    prior = trueskill.initial()
    got = first_in_mode(trueskill, [Rating(35.0, 2.0)], 0.5)
    assert got.mu == pytest.approx(prior.mu + 0.5 * (35.0 - prior.mu))
    assert got.sigma == pytest.approx(math.sqrt(prior.sigma**2 * 0.75 + 0.25 * 4.0))
    assert got.sigma < prior.sigma


def test_full_coupling_carries_the_other_mode_over(trueskill):
    assert first_in_mode(trueskill, [Rating(31.0, 3.0)], 1.0) == pytest.approx(Rating(31.0, 3.0))


def test_point_model_moves_its_mean_only():
    elo = create_model("elo")
    got = first_in_mode(elo, [Rating(1700.0), Rating(1500.0)], 0.5)
    assert got == Rating(elo.initial().mu + 0.5 * (1600.0 - elo.initial().mu), None)
