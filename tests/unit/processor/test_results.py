"""`points_created`: the display-rating points a match created, the inflation monitor's
per-match figure — zero for Elo between established players, positive with a rating floor."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.offline.replay import replay
from stream_rater.processor import MatchResult, Processor, points_created
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel


def created(params: dict[str, Any], model: str = "elo") -> list[float]:
    """Points created by each of 30 duels that `a` wins against `b`, after both played 5 draws-free games."""
    ladders = Ladders([Ladder("l", model, params)])
    results: list[MatchResult] = []
    events = [duel(f"m{i}", "a", "b", ladder="l", at=1_700_000_000 + i) for i in range(30)]
    asyncio.run(
        replay(
            [parse_match(e, ladders) for e in events],
            Processor(ladders, MemoryStore()),
            on_result=results.append,
        )
    )
    display = ladders["l"].rating_model.display
    return [points_created(r, display) for r in results]


def test_plain_elo_creates_no_points_between_established_players() -> None:
    """Elo is zero-sum: every match's after − before sums to zero."""
    assert created({}) == pytest.approx([0.0] * 30, abs=1e-9)


def test_a_rating_floor_creates_the_points_it_lifts_the_loser_by() -> None:
    """With a floor the loser stops losing while the winner keeps gaining: those matches
    create points, exactly the winner's gain."""
    points = created({"rating_floor": 1450.0})
    assert points[0] == pytest.approx(0.0, abs=1e-9)
    assert points[-1] > 1.0 and sum(points) > 10.0
