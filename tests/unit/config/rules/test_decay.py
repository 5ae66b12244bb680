"""The inactivity decay rule (`config.rules.decay`): its parameters, its arithmetic, and through
the processor: replay-exact (the same states whatever the batching) and on the leaderboard."""

from __future__ import annotations

import random

import pytest

from stream_rater.config.rules import DAY, RuleError, Rules, Standing
from stream_rater.config.rules.decay import Decay
from stream_rater.queries import Queries
from stream_rater.rating.base import Rating
from stream_rater.rating.registry import create_model
from tests.unit.config.rule_runs import T0, ladders, match, run

DECAY = {"decay_after_days": 10, "decay_per_day": 5.0}


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"decay_after_days": 10}, "decay_after_days"),
        ({"decay_per_day": 5.0}, "decay_per_day"),
        ({"decay_after_days": -1, "decay_per_day": 5.0}, "decay_after_days"),
        ({"decay_after_days": 10, "decay_per_day": "5"}, "decay_per_day"),
    ],
)
def test_decay_needs_both_parameters_as_numbers(params, named):
    with pytest.raises(RuleError, match=named):
        Rules.of(params)
    assert Rules.of(DECAY).adjusts_states and not Rules.of({}).adjusts_states


@pytest.mark.parametrize(
    ("idle_days", "start", "bound", "after"),
    [
        (10.9, 1600.0, 1500.0, 1600.0),  # not yet past D whole days
        (11.0, 1600.0, 1500.0, 1595.0),  # one further day: R
        (14.5, 1600.0, 1500.0, 1580.0),  # whole days only
        (400.0, 1600.0, 1500.0, 1500.0),  # stops at the bound
        (400.0, 1450.0, 1500.0, 1450.0),  # below the bound already: kept
    ],
)
def test_a_player_idle_past_d_days_loses_r_a_day_never_below_the_bound(idle_days, start, bound, after):
    model = create_model("elo", {})
    rule = Decay(decay_after_days=10, decay_per_day=5.0)
    rating = Rating(start, None)
    decayed = rule.adjusted(model, rating, Standing(5, None, T0), T0 + idle_days * DAY, bound)
    assert model.display(decayed) == pytest.approx(after)


def test_only_ranked_players_decay_and_the_floor_bounds_it():
    model = create_model("elo", {})
    idle = Standing(2, None, T0)
    rating, later = Rating(1700.0, None), T0 + 100 * DAY
    assert Rules.of({**DECAY, "leaderboard_min_games": 3}).adjusted(model, rating, idle, later) is rating
    assert Rules.of(DECAY).adjusted(model, rating, idle, later).mu == pytest.approx(1500.0)  # the start
    floored = Rules.of({**DECAY, "rating_floor": 1650.0}).adjusted(model, rating, idle, later)
    assert floored.mu == pytest.approx(1650.0)


def _comeback() -> list[dict]:
    """`a` wins five matches, then is idle 40 days while the others play; then beats `c`."""
    rng = random.Random(3)
    events = [match(f"w{i}", "a", rng.choice("bcd"), at=T0 + i * DAY) for i in range(5)]
    events += [match(f"o{i}", *rng.sample("bcd", 2), at=T0 + (5 + i) * DAY) for i in range(40)]
    return [*events, match("back", "a", "c", at=T0 + 45 * DAY)]


@pytest.mark.parametrize("model", ["elo", "trueskill"])
async def test_decay_is_replay_exact_and_shown_on_the_leaderboard(model):
    """The same states whatever the batching (the decay is a function of the log alone); the
    comeback match starts from the decayed rating, which the event, the stored state and the
    leaderboard show; an idle player's ``rating_now`` shows the decay accrued by the read."""
    table, events = ladders(model, **DECAY), _comeback()
    states = []
    for size in (1, 7, 1000):
        store, results = await run(table, events, batch_size=size)
        states.append({p: s._replace(version=0) for p, s in (await store.players("l")).items()})
    assert states[0] == states[1] == states[2]
    _, plain_results = await run(ladders(model), events)
    display = table["l"].rating_model.display

    def comeback(found):
        return next(e for e in found[-1].events if e["player_id"] == "a")

    decayed, undecayed = comeback(results), comeback(plain_results)
    assert (
        decayed["before"]["rating"] < undecayed["before"]["rating"] - 1.0
        and decayed["rating"] < undecayed["rating"]
    )
    assert decayed["before"]["rating"] >= display(table["l"].rating_model.initial()) - 1e-9
    board = {
        r["player_id"]: r for r in (await Queries(store, table).leaderboard("l", 10, T0 + 45 * DAY))["rows"]
    }
    stored = (await store.players("l"))["a"]
    assert board["a"]["rating"] == pytest.approx(decayed["rating"])
    assert board["a"]["rating"] == pytest.approx(display(Rating(stored.mu, stored.sigma)))
    now, start = T0 + 80 * DAY, display(table["l"].rating_model.initial())
    with_rule = {r["player_id"]: r for r in (await Queries(store, table).leaderboard("l", 10, now))["rows"]}
    without = {
        r["player_id"]: r for r in (await Queries(store, ladders(model)).leaderboard("l", 10, now))["rows"]
    }
    loss = min(5.0 * 25, board["a"]["rating"] - start)  # 35 idle days: 25 past D
    assert loss > 1.0 and with_rule["a"]["rating"] == without["a"]["rating"] == board["a"]["rating"]
    assert without["a"]["rating_now"] - with_rule["a"]["rating_now"] == pytest.approx(loss)
