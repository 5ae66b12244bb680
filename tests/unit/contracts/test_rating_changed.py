"""The rating-changed event: its wire form round-trips and a broken one is rejected naming the field (stream_rater.contracts.rating_changed)."""

from __future__ import annotations

from typing import Any

import pytest

from stream_rater.contracts import (
    RatingChanged,
    ValidationError,
)
from tests.helpers import RATING_CHANGED as CHANGED


def test_rating_changed_round_trips() -> None:
    """RatingChanged.from_dict(d).to_dict() == d for the documented example, Elo-style null sigmas too."""
    assert RatingChanged.from_dict(CHANGED).to_dict() == CHANGED
    elo = {
        **CHANGED,
        "before": {"mu": 500.0, "sigma": None, "rating": 500.0},
        "after": {"mu": 510.0, "sigma": None, "rating": 510.0},
        "rating": 510.0,
        "rating_delta": 10.0,
    }
    assert RatingChanged.from_dict(elo).to_dict() == elo


def test_expected_round_trips_on_a_match_and_is_refused_on_a_correction() -> None:
    """Both forms of ``expected`` round-trip; only a match's events may carry it."""
    for expected in ({"win": 0.4, "draw": 0.2}, {"ahead": 0.75, "rank": 1.5}):
        assert RatingChanged.from_dict({**CHANGED, "expected": expected}).to_dict() == {
            **CHANGED,
            "expected": expected,
        }
    cause = {"id": "rerate:l:1", "reason": "r", "voided": [], "unvoided": [], "params": {}}
    with pytest.raises(ValidationError, match="expected: only a match's events carry it"):
        RatingChanged.from_dict(
            {**CHANGED, "kind": "correction", "correction": cause, "expected": {"win": 0.5, "draw": 0.0}}
        )


def test_rating_changed_accepts_integral_numbers() -> None:
    """Integers for mu, rating and delta and an integral float for games are accepted (JSON does not tell them apart)."""
    changed = RatingChanged.from_dict(
        {
            **CHANGED,
            "before": {"mu": 25, "sigma": 8, "rating": 1},
            "after": {"mu": 27.6, "sigma": 7.2, "rating": 6},
            "rating": 6,
            "games": 3.0,
        }
    )
    assert (changed.before, changed.rating, changed.games) == (
        {"mu": 25.0, "sigma": 8.0, "rating": 1.0},
        6.0,
        3,
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"extra": 1}, "extra: unknown field"),
        ({"player_id": None}, "player_id: must be a string, got null"),
        ({"before": {"mu": 1.0}}, "before.sigma: is required"),
        ({"after": {"mu": 1.0, "sigma": 1.0, "x": 0}}, "after.x: unknown field"),
        ({"after": {"mu": float("nan"), "sigma": 1.0}}, "after.mu: must be a finite number"),
        ({"after": {"mu": 1.0, "sigma": -1.0}}, "after.sigma: must be >= 0"),
        (
            {"after": {"mu": 1.0, "sigma": None}},
            "after.sigma: must be null exactly when before.sigma is null",
        ),
        ({"games": 0}, "games: must be >= 1"),
        ({"rating_delta": None}, "rating_delta: must be present exactly when before.rating is"),
        (
            {"after": {"mu": 27.6, "sigma": 7.2}},
            "after.rating: must be present exactly when before.rating is",
        ),
        ({"after": {"mu": 27.6, "sigma": 7.2, "rating": 5.0}}, "after.rating: must equal rating"),
        (
            {"before": {"mu": 1.0, "sigma": 1.0}},
            "rating_delta: must be present exactly when before.rating is",
        ),
        ({"before": {"mu": 1.0, "sigma": 1.0, "rating": "x"}}, "before.rating: must be a number, got string"),
        ({"games": True}, "games: must be an integer, got boolean"),
        ({"rating": "6"}, "rating: must be a number, got string"),
        (
            {"expected": {"win": 0.5}},
            "expected: must have the fields win and draw, or ahead and rank; got ['win']",
        ),
        ({"expected": {"win": 1.5, "draw": 0.0}}, "expected.win: must be within [0.0, 1.0], got 1.5"),
        ({"expected": {"ahead": 0.5, "rank": 0.5}}, "expected.rank: must be within [1.0, inf], got 0.5"),
        ({"expected": [0.5]}, "expected: must be an object, got array"),
        (
            {"processed_at": "yesterday"},
            "processed_at: 'yesterday' is not an RFC 3339 date-time (like 2004-08-06T18:13:50Z)",
        ),
    ],
)
def test_invalid_rating_changed_is_rejected(changes: dict[str, Any], message: str) -> None:
    """RatingChanged.from_dict rejects a broken rating-changed object with the field path and reason."""
    with pytest.raises(ValidationError) as info:
        RatingChanged.from_dict({**CHANGED, **changes})
    assert str(info.value) == message


def test_missing_rating_changed_field_is_named() -> None:
    """A missing rating-changed field is reported as required."""
    with pytest.raises(ValidationError, match=r"^delta: is required$"):
        RatingChanged.from_dict({k: v for k, v in CHANGED.items() if k != "delta"})
