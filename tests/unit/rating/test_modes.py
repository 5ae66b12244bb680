"""The first rating in a mode, conditioned on the player's other modes, and the other modes'
moves after a match in one (rating/modes.py)."""

import math

import numpy as np
import pytest

from stream_rater.rating import create_model
from stream_rater.rating.base import Rating
from stream_rater.rating.modes import cross_update, first_in_mode, in_mode, joint_prior, updated, with_mode


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


def test_joint_at_full_coupling_is_one_rating(trueskill):
    joint = with_mode(joint_prior(trueskill, 1.0), "duel", trueskill, 1.0)
    assert in_mode(joint, "duel") == pytest.approx(trueskill.initial())
    before, after = in_mode(joint, "duel"), Rating(29.0, 6.0)
    joint = with_mode(updated(joint, "duel", before, after, 10.0), "team", trueskill, 1.0)
    assert in_mode(joint, "team") == pytest.approx(after)  # the other mode knows it all


def test_joint_at_no_coupling_keeps_modes_apart(trueskill):
    joint = with_mode(joint_prior(trueskill, 0.0), "duel", trueskill, 0.0)
    joint = updated(joint, "duel", in_mode(joint, "duel"), Rating(29.0, 6.0), 10.0)
    assert in_mode(with_mode(joint, "team", trueskill, 0.0), "team") == pytest.approx(trueskill.initial())


def test_joint_update_keeps_the_correlation(trueskill):
    """A mode's results tell s + o only: the other mode learns ρ of the move and keeps the
    uncertainty the sum leaves about s (no diagonal approximation)."""
    rho = 0.8
    joint = with_mode(joint_prior(trueskill, rho), "large", trueskill, rho)
    for _ in range(40):  # the large mode's rating becomes nearly certain
        before = in_mode(joint, "large")
        joint = updated(joint, "large", before, Rating(35.0, before.sigma * 0.9), 0.0)
    small = in_mode(with_mode(joint, "small", trueskill, rho), "small")
    prior = trueskill.initial()
    assert small.mu == pytest.approx(prior.mu + rho * (in_mode(joint, "large").mu - prior.mu), rel=1e-3)
    assert small.sigma == pytest.approx(prior.sigma * math.sqrt(1 - rho**2), rel=0.02)  # = first_in_mode's


def test_joint_needs_a_sigma():
    with pytest.raises(ValueError, match="σ"):
        joint_prior(create_model("elo"), 0.5)


def test_cross_update_is_the_joint_gaussian_posterior():
    """The other mode's marginal of the bivariate Gaussian (correlation ρ) times the match's
    message on M (posterior over prior, in canonical parameters: the seed's Table 1 and (6))."""
    rho, before, after, other = 0.7, Rating(27.0, 5.0), Rating(30.0, 4.0), Rating(22.0, 3.0)
    cov = np.array([[25.0, rho * 5.0 * 3.0], [rho * 5.0 * 3.0, 9.0]])
    precision = np.linalg.inv(cov) + np.diag([1 / 16 - 1 / 25, 0.0])
    shift = np.linalg.inv(cov) @ [27.0, 22.0] + [30.0 / 16 - 27.0 / 25, 0.0]
    posterior_cov = np.linalg.inv(precision)
    mean = posterior_cov @ shift
    assert mean[0] == pytest.approx(after.mu) and posterior_cov[0, 0] == pytest.approx(16.0)
    got = cross_update(other, before, after, rho)
    assert got == pytest.approx(Rating(mean[1], math.sqrt(posterior_cov[1, 1])))


def test_cross_update_spans_apart_and_one_rating():
    before, after = Rating(25.0, 8.0), Rating(29.0, 6.0)
    assert cross_update(Rating(20.0, 3.0), before, after, 0.0) == Rating(20.0, 3.0)
    assert cross_update(before, before, after, 1.0) == pytest.approx(after)


def test_cross_update_learns_no_certainty_from_a_wider_posterior():
    got = cross_update(Rating(20.0, 3.0), Rating(25.0, 2.0), Rating(26.0, 2.5), 0.8)
    assert got == pytest.approx(Rating(20.0 + 0.8 * 1.5, 3.0))


def test_cross_update_of_a_point_model_moves_the_mean_by_rho():
    assert cross_update(Rating(1500.0, None), Rating(1600.0, None), Rating(1620.0, None), 0.5) == Rating(
        1510.0, None
    )
