"""`verify`'s comparison: every stored number of a state counts, within the tolerance."""

from __future__ import annotations

from stream_rater.offline.verify import VerifyReport, differences
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


def test_the_summary_says_none_differ_when_all_agree_and_how_many_when_not() -> None:
    """Not "7 players; 0 match" (issue #37): the count of players that differ, "none" for 0."""
    agree = VerifyReport("eu", 10, 7, [], ordered=True, rejected=0, caught_up=True)
    summary = (
        "ladder 'eu': 10 matches from the topic (0 invalid records skipped, 0 the model could not "
        "rate); 7 players, none differ from the replay"
    )
    assert agree.lines() == [summary]
    differ = differences({"a": GLICKO2}, {"a": GLICKO2._replace(games=4)}, 1e-9)
    two = VerifyReport("eu", 10, 7, differ * 2, ordered=True, rejected=0, caught_up=True)
    assert two.lines()[-1].endswith("; 7 players, 2 differ from the replay")
