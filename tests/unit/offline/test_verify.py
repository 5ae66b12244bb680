"""`verify`'s comparison: every stored number of a state counts, within the tolerance."""

from __future__ import annotations

import math
from dataclasses import replace

from stream_rater.config.ladders import Ladders
from stream_rater.kafka import LadderHistory
from stream_rater.offline.verify import VerifyReport, board_differences, compare, differences
from stream_rater.processor import Processor
from stream_rater.store import PlayerState
from stream_rater.store.memory import MemoryStore
from tests.unit.moding import arena, arena_ladders, mixed
from tests.unit.processing import fixed_clock
from tests.unit.shadowing import SHADOWED, duels

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


def test_a_split_ladder_is_named_with_its_partitions_and_the_order_each_side_applied() -> None:
    """A ladder read from two partitions: `verify` names it a split ladder, its partitions,
    the order the workers applied (theirs) and the order it recomputed (broker timestamp)."""
    split = VerifyReport("eu", 10, 7, [], ordered=False, rejected=0, caught_up=True, partitions=[0, 3])
    [warning, _] = split.lines()
    assert warning.startswith("warning: split ladder 'eu': its match records are on partitions [0, 3]")
    assert "in the order they took them" in warning and "by broker timestamp" in warning
    assert "rerate makes the ladder equal" in warning


async def test_compare_checks_each_shadow_and_names_the_one_that_differs() -> None:
    """A store whose shadow was rated with other parameters than configured: the live ladder
    and the other shadow match their recomputation, the differing shadow's players are named."""
    matches = duels(25)
    drifted = Ladders(
        [
            replace(
                SHADOWED["duel"],
                shadows=(
                    replace(SHADOWED["duel"].shadows[0], params={"beta": 12.0}),
                    SHADOWED["duel"].shadows[1],
                ),
            )
        ]
    )
    for rated_with, differing in ((SHADOWED, set()), (drifted, {"wide"})):
        store = MemoryStore()
        await Processor(rated_with, store).process(matches)
        live = await store.players("duel"), await store.players("duel", effects=True)
        shadows = {s.name: (await store.players(s.name), {}) for s in SHADOWED["duel"].shadows}
        history = LadderHistory("duel", matches)
        report = await compare(store, SHADOWED, history, live, shadows=shadows)
        assert {d.shadow for d in report.differences} == differing
        assert report.shadows == ["duel~elo", "duel~wide"]
    assert report.differences[0].line().startswith("shadow wide: player ")
    assert "(shadows duel~elo, duel~wide included)" in report.lines()[-1]


async def test_by_default_a_last_bit_difference_is_a_difference() -> None:
    """A replay computes the worker's bits exactly (docs: "The same bits on every machine"), so
    `compare` without a tolerance names a state one ulp off, which a tolerance of 1e-9 hides."""
    matches = duels(10)
    store = MemoryStore()
    await Processor(SHADOWED, store).process(matches)
    players = await store.players("duel")
    pid, state = sorted(players.items())[0]
    players[pid] = state._replace(mu=math.nextafter(state.mu, math.inf))
    live = players, await store.players("duel", effects=True)
    history = LadderHistory("duel", matches)
    exact = await compare(store, SHADOWED, history, live, shadows={})
    assert {d.player_id for d in exact.differences} == {pid}, [d.line() for d in exact.differences]
    assert (await compare(store, SHADOWED, history, live, 1e-9, shadows={})).differences == []


async def test_each_modes_board_is_checked_and_a_drifted_row_is_named():
    """A ladder with modes (issue 48): each mode's board against its mode's states, a drifted
    row named by its stored id."""
    store = MemoryStore()
    await Processor(arena_ladders(), store, clock=fixed_clock).process(mixed(40))
    states = await store.players("arena")
    assert await board_differences(store, arena(), states, fixed_clock(), 1e-9) == []
    store._generation("arena", None).scores["ffa@p3"] += 1.0  # the board row drifts from the state
    found = await board_differences(store, arena(), states, fixed_clock(), 1e-9)
    assert [d.player_id for d in found] == ["ffa@p3"]
