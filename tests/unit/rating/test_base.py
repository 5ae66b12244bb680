"""`RatingModel.floored`, the ladder's ``rating_floor`` on one state, for every model family:
the display rating lands exactly on the floor, μ alone moves, and a state above it is kept."""

from __future__ import annotations

import pytest

from stream_rater.rating import registry
from stream_rater.rating.base import Rating

MODELS = ["trueskill", "elo", "sph-elo", "plackett-luce", "thurstonian", "duelling-elo", "glicko", "glicko2"]


@pytest.mark.parametrize("name", MODELS)
def test_a_state_below_the_floor_is_raised_onto_it_and_one_above_is_kept(name: str) -> None:
    """Below the floor: μ rises by the shortfall, σ and the extra stay, the display rating
    equals the floor. At or above it: the very same state."""
    model = registry.create_model(name)
    start = model.initial()
    floor = model.display(start) + 7.5
    raised = model.floored(start, floor)
    assert model.display(raised) == pytest.approx(floor, abs=1e-9)
    assert raised.mu == pytest.approx(start.mu + 7.5) and (raised.sigma, raised.extra) == (
        start.sigma,
        start.extra,
    )
    assert model.floored(raised._replace(mu=raised.mu + 1.0), floor).mu == raised.mu + 1.0
    assert model.floored(start, model.display(start) - 1.0) is start


def test_trueskill_floors_the_conservative_rating_not_mu() -> None:
    """TrueSkill: the floor is on μ − kσ, so μ is raised to floor + kσ."""
    model = registry.create_model("trueskill", {"k": 2})
    raised = model.floored(Rating(10.0, 4.0), 5.0)
    assert raised == Rating(13.0, 4.0)


def test_a_rating_built_without_its_extra_field_is_floored() -> None:
    """Models may build (μ, σ) by tuple.__new__ without the extra field; floored copes."""
    model = registry.create_model("elo")
    short = tuple.__new__(Rating, (1000.0, None))
    assert model.floored(short, 1200.0) == Rating(1200.0, None, None)
