"""`explain_match`: a match's rating changes found by id, per player, with what was expected,
what happened, and idle-time growth, season resets and corrections besides the result."""

from __future__ import annotations

import pytest

from stream_rater.contracts import correction_changed, parse_match
from stream_rater.explain import UnknownMatch, explain_match
from stream_rater.processor import Processor
from stream_rater.rating.base import Rating
from stream_rater.rating.predict import predict
from stream_rater.store import Commit
from stream_rater.store.memory import MemoryStore
from tests.unit.processing import LADDERS, fixed_clock, match

DAY = 86_400.0


async def applied(*matches) -> MemoryStore:
    store = MemoryStore()
    await Processor(LADDERS, store, clock=fixed_clock).process(list(matches))
    return store


async def test_a_duel_is_explained_from_its_events_with_what_was_expected():
    """Before/after/expected are the match's events; actual says who won; expected is the
    read API's answer from the priors (a first match between newcomers: even odds)."""
    store = await applied(match("m1", ["a"], ["b"]), match("m2", ["b"], ["a"]))
    answer = await explain_match(store, LADDERS.get("default"), "m2", 100)
    events = {e["player_id"]: e for e in await store.history("default", "b", 1)}
    b, a = answer["players"]
    assert (b["player_id"], b["actual"], a["actual"]) == (
        "b",
        {"result": "win", "rank": 1},
        {"result": "loss", "rank": 2},
    )
    assert b["before"] == events["b"]["before"] and b["after"] == events["b"]["after"]
    assert b["rating_delta"] == events["b"]["rating_delta"] == b["rating"] - b["before"]["rating"]
    model = LADDERS.get("default").rating_model
    prior = [Rating(e["before"]["mu"], e["before"]["sigma"]) for e in (b, a)]
    expected = predict(model, [[prior[0]], [prior[1]]])
    assert b["expected"] == {
        "win": pytest.approx(expected.win_probabilities[0]),
        "draw": pytest.approx(expected.draw_probability),
    }
    assert a["expected"]["win"] == pytest.approx(expected.win_probabilities[1])
    first = await explain_match(store, LADDERS.get("default"), "m1", 100)
    assert first["players"][0]["expected"]["win"] == pytest.approx(first["players"][1]["expected"]["win"])
    assert (b["idle"], b["season_reset"], b["corrections"]) == (None, None, [])


async def test_idle_sigma_growth_is_shown_on_a_time_scaled_ladder():
    """On a ladder with time dynamics the σ the model used grew from the stored one by the
    days since the player's previous match."""
    store = await applied(
        match("m1", ["a"], ["b"], ladder="timed", at=1_000_000.0),
        match("m2", ["a"], ["b"], ladder="timed", at=1_000_000.0 + 10 * DAY),
    )
    answer = await explain_match(store, LADDERS.get("timed"), "m2", 100)
    idle = answer["players"][0]["idle"]
    stored = answer["players"][0]["before"]["sigma"]
    assert idle["seconds"] == 10 * DAY and idle["sigma_stored"] == stored
    assert idle["sigma_as_of_match"] == pytest.approx((stored**2 + 10.0) ** 0.5)
    assert (await explain_match(store, LADDERS.get("timed"), "m1", 100))["players"][0]["idle"] is None


async def test_corrections_since_are_listed_and_a_void_of_the_match_is_flagged():
    """A correction event after the match's event names its id and whether it voided it."""
    store = await applied(match("m1", ["a"], ["b"]))
    cause = {"id": "rerate:default:1", "reason": "cheater", "voided": ["m1"], "unvoided": [], "params": {}}
    fix = correction_changed(
        "rerate:default:1",
        "default",
        "a",
        "trueskill",
        (1.0, 1.0),
        (25.0, 8.3),
        0.0,
        0,
        "2024-01-01T00:00:00Z",
        cause,
    )
    await store.commit(Commit("default", [], {"fix": []}, {"a": [fix]}))
    [a, b] = (await explain_match(store, LADDERS.get("default"), "m1", 100))["players"]
    assert a["corrections"] == [{"id": "rerate:default:1", "reason": "cheater", "voided_this_match": True}]
    assert b["corrections"] == []


async def test_more_teams_give_ahead_and_rank_and_a_forgotten_event_is_not_found():
    """Three teams: actual and expected are the ahead/rank form; a player whose history no
    longer holds the event is listed as not found."""
    store = await applied(match("m1", ["a"], ["b"], ["c"]))
    [a, b, c] = (await explain_match(store, LADDERS.get("default"), "m1", 100))["players"]
    assert (a["actual"], c["actual"]) == ({"rank": 1, "ahead": 1.0}, {"rank": 3, "ahead": 0.0})
    assert set(a["expected"]) == {"ahead", "rank"}
    assert sum(p["expected"]["rank"] for p in (a, b, c)) < 6.0 + 1e-9  # 1 + 2 + 3 less the draws
    [gone, *_] = (await explain_match(store, LADDERS.get("default"), "m1", 0))["players"]
    assert gone == {"player_id": "a", "found": False, "actual": {"rank": 1, "ahead": 1.0}}


async def test_an_unknown_match_is_a_404():
    store = await applied(match("m1", ["a"], ["b"]))
    with pytest.raises(UnknownMatch, match="no match 'nope' on ladder 'default'") as raised:
        await explain_match(store, LADDERS.get("default"), "nope", 100)
    assert raised.value.status == 404


async def test_actual_rank_is_one_based_whatever_ranks_the_match_gave():
    """The match's own ranks (here 5, 5 and 9, as floats on the wire) become 1-based integer
    places like ``expected.rank`` and the leaderboard's: drawn teams share the better one."""
    teams = [{"rank": r, "players": [{"id": p}]} for r, p in ((5.0, "a"), (5.0, "b"), (9.0, "c"))]
    raw = {"match_id": "m1", "finished_at": 1_000_000, "teams": teams}
    store = await applied(parse_match(raw, LADDERS))
    [a, b, c] = (await explain_match(store, LADDERS.get("default"), "m1", 100))["players"]
    assert [p["actual"] for p in (a, b, c)] == [
        {"rank": 1, "ahead": 1.0},
        {"rank": 1, "ahead": 1.0},
        {"rank": 2, "ahead": 0.0},
    ]
    assert all(type(p["actual"]["rank"]) is int for p in (a, b, c))
