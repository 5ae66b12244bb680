"""`verify`'s comparison: every stored number of a state counts, within the tolerance."""

from __future__ import annotations

from stream_rater.offline.verify import differences
from stream_rater.store import PlayerState

GLICKO2 = PlayerState(1500.0, 200.0, 3, 1_700_000_000.0, 3, extra=0.06)


def test_equal_states_within_the_tolerance_do_not_differ() -> None:
    nudged = GLICKO2._replace(mu=GLICKO2.mu + 1e-12, extra=0.06 + 1e-12)
    assert differences({"a": GLICKO2}, {"a": nudged}, 1e-9) == []


def test_a_different_volatility_is_a_difference_and_is_shown() -> None:
    (found,) = differences({"a": GLICKO2}, {"a": GLICKO2._replace(extra=0.07)}, 1e-9)
    assert found.player_id == "a" and "extra=0.07" in found.line()


def test_extra_on_one_side_only_is_a_difference() -> None:
    assert differences({"a": GLICKO2}, {"a": GLICKO2._replace(extra=None)}, 1e-9)


def test_sigma_games_and_absence_count() -> None:
    live = {"a": GLICKO2, "b": GLICKO2}
    recomputed = {"a": GLICKO2._replace(sigma=201.0), "c": GLICKO2}
    assert [d.player_id for d in differences(live, recomputed, 1e-9)] == ["a", "b", "c"]
    assert differences({"a": GLICKO2}, {"a": GLICKO2._replace(games=4)}, 1e-9)
