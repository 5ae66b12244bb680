"""Live prediction quality: what the processor keeps with each commit equals `evaluate`'s
figures on the same stream (cumulative and over the last N matches), counted once per match."""

from __future__ import annotations

import random

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.offline.evaluate import Scorer
from stream_rater.processor import Processor
from stream_rater.processor.quality import LIVE, over_time, summary
from stream_rater.store.memory import MemoryStore
from tests.helpers import parsed_match

LADDERS = Ladders(
    [
        Ladder("ts", "trueskill", {"draw_probability": 0.1, "time_tau": 1.0, "time_unit": "days"}),
        Ladder("elo", "elo"),
    ]
)


def stream(ladder: str, n: int, seed: int = 3):
    rng = random.Random(seed)
    players = [f"p{i}" for i in range(12)]
    matches = []
    for i in range(n):
        teams = [[p] for p in rng.sample(players, rng.choice([2, 2, 3]))]
        ranks = [rng.choice([0, 0, 1]) if len(teams) == 2 else r for r in range(len(teams))]
        matches.append(
            parsed_match(LADDERS, f"m{i}", *teams, ladder=ladder, ranks=ranks, at=1_000_000.0 + 3600 * i)
        )
    return matches


def same(live: dict, replayed) -> None:
    expected = replayed.to_dict()
    for name in ("matches", "pairs", "two_team"):
        assert live[name] == expected[name]
    for name in ("wrong_order", "log_loss", "brier"):
        assert live[name] == pytest.approx(expected[name], rel=1e-12)
    for got, want in zip(live["calibration"], expected["calibration"], strict=True):
        assert got["count"] == want["count"]
        for name in ("mean_predicted", "observed"):
            assert got[name] == (want[name] and pytest.approx(want[name], rel=1e-12))


@pytest.mark.parametrize("ladder", ["ts", "elo"])
async def test_live_quality_equals_evaluate_and_a_redelivery_counts_nothing(ladder):
    matches = stream(ladder, 300)
    store = MemoryStore()
    processor = Processor(LADDERS, store)
    for i in range(0, len(matches), 37):
        await processor.process(matches[i : i + 37])
    await processor.process(matches[:50])  # redelivered: already applied
    whole, recent = Scorer(LADDERS), Scorer(LADDERS)
    replay = Processor(
        LADDERS,
        MemoryStore(),
        observe=lambda m, t, o: (
            whole.observe(m, t, o),
            recent.observe(m, t, o) if int(m.match_id[1:]) >= 200 else None,
        ),
    )
    await replay.process(matches)
    sums, window = await store.quality(ladder, LIVE, 100)
    same(summary(sums), whole.summary())
    same(summary({}, window), recent.summary())
    assert summary(sums)["matches"] == 300 and len(window) == 100


def test_over_time_splits_the_window_oldest_first():
    """Ten stretches of equal size, oldest first, each summed as `summary` sums."""
    window = [[1, float(i % 2), None, None, []] for i in range(20)]  # newest first
    stretches = over_time(window)
    assert len(stretches) == 10 and all(s["matches"] == 2 and s["pairs"] == 2 for s in stretches)
    assert [s["wrong_order"] for s in stretches] == [0.5] * 10
    assert over_time(window[:3]) == [
        {"matches": 1, "pairs": 1, "wrong_order": w, "log_loss": None} for w in (0.0, 1.0, 0.0)
    ]
