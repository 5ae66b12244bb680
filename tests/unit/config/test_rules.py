"""Ladder rules (`config.rules`) through the processor on the in-memory store: provisional
flags, leaderboard eligibility, rated-game rules, season soft resets and peak ratings."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_rater.config.ladders import LadderConfigError, load_ladders
from stream_rater.config.rules import DAY, RuleError, Rules
from stream_rater.contracts import RatingChanged, ValidationError, parse_match
from stream_rater.processor import Processor
from stream_rater.queries import Queries, QueryError
from stream_rater.rating.base import Rating
from stream_rater.store.memory import MemoryStore
from tests.unit.config.rule_runs import T0, ladders, match, run


def season(match_id: str, at: float = T0, **params: float) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": "season", "match_id": match_id, "ladder": "l", "finished_at": at}
    if params:
        record["params"] = params
    return record


def test_rules_are_off_by_default_and_checked():
    """No rule parameter: nothing is provisional, everyone qualifies, every match is rated."""
    rules = Rules()
    assert rules.flags is None and not rules.filters_leaderboard and not rules.adjusts_states
    assert not rules.flagged(0, 1e9) and rules.qualifies(0, 1e9) and rules.active_since(T0) is None
    with pytest.raises(RuleError, match="provisional_games"):
        Rules.of({"provisional_games": -1})
    with pytest.raises(RuleError, match="season_shrink"):
        Rules(season_shrink=1.5)


def test_a_rule_gives_back_the_parameters_it_was_built_from():
    """`Rule.params` is the inverse of `Rule.of`: only the parameters set, by their names."""
    params = {"provisional_games": 3, "decay_after_days": 10.0, "decay_per_day": 2.0}
    plugins = Rules.of({**params, "leaderboard_active_days": 30.0}).plugins
    assert {k: v for rule in plugins for k, v in rule.params.items()} == params
    assert all(type(rule).of(rule.params) == rule for rule in plugins)


def test_rule_parameters_are_ladder_parameters_in_both_sources(tmp_path):
    """Rules are set like model parameters, in the ladders file and the environment, and a
    bad one names its place."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.mw4]\nmodel = "elo"\nprovisional_games = 10\n')
    table = load_ladders(str(path), {"STREAM_RATER_LADDER_MW4__LEADERBOARD_ACTIVE_DAYS": "7"})
    assert table["mw4"].rules == Rules.of({"provisional_games": 10, "leaderboard_active_days": 7})
    assert table["mw4"].rating_model.name == "elo"
    path.write_text('[ladders.mw4]\nmodel = "elo"\nseason_shrink = 2\n')
    with pytest.raises(LadderConfigError, match=r"ladders.toml:.*season_shrink=2"):
        load_ladders(str(path), {})


async def test_an_elo_player_with_one_game_is_not_ranked_until_eligible():
    """On an Elo ladder with ``leaderboard_min_games = 3`` a lucky one-game player is off the
    leaderboard (and has no rank) until their third game; everyone keeps a rating."""
    table = ladders(leaderboard_min_games=3)
    events = [match(f"m{i}", "a", "b") for i in range(3)] + [match("x1", "lucky", "a")]
    store, _ = await run(table, events)
    queries = Queries(store, table)
    board = await queries.leaderboard("l", 10, T0)
    assert [r["player_id"] for r in board["rows"]] == ["a", "b"]
    lucky = (await queries.players("l", ["lucky", "b"], T0))["players"]
    assert lucky[0]["rank"] is None and lucky[0]["rating"] > 1500 and lucky[0]["games"] == 1
    assert (lucky[1]["rank"], lucky[1]["percentile"]) == (2, 50.0)
    await run(table, [match("x2", "lucky", "b"), match("x3", "lucky", "b")], store)
    board = await queries.leaderboard("l", 10, T0)
    assert board["rows"][0]["player_id"] == "lucky"


async def test_provisional_flips_at_exactly_n_games():
    """``provisional_games = 3``: the events of a player's first two games say provisional,
    the third and later do not; lookups agree."""
    table = ladders(provisional_games=3)
    store, results = await run(table, [match(f"m{i}", "a", "b") for i in range(4)])
    flags = [e["provisional"] for r in results for e in r.events if e["player_id"] == "a"]
    assert flags == [True, True, False, False]
    assert RatingChanged.from_dict(results[0].events[0]).provisional is True
    found = (await Queries(store, table).players("l", ["a", "new"], T0))["players"]
    assert [p["provisional"] for p in found] == [False, True]


async def test_provisional_flips_at_exactly_sigma_s_on_trueskill():
    """``provisional_sigma = S`` on TrueSkill: each event's flag is exactly σ_after > S, and
    the flag flips from true to false within the run."""
    table = ladders("trueskill", provisional_sigma=5.0)
    rng = random.Random(3)
    events = [match(f"m{i}", "a", rng.choice("bcd")) for i in range(12)]
    _, results = await run(table, events)
    seen = [
        (e["after"]["sigma"], e["provisional"]) for r in results for e in r.events if e["player_id"] == "a"
    ]
    assert all(flag == (sigma > 5.0) for sigma, flag in seen)
    assert seen[0][1] and not seen[-1][1]


async def test_no_rule_no_provisional_field():
    """A ladder without the provisional rule emits events as before: no ``provisional``."""
    _, results = await run(ladders(), [match("m1", "a", "b")])
    assert all("provisional" not in e for e in results[0].events)


@pytest.mark.parametrize(
    ("params", "extra", "reason"),
    [
        ({}, {"rated": False}, "declared"),
        ({"min_duration": 300}, {"duration": 299.5}, "min_duration"),
        ({"min_players": 3}, {}, "min_players"),
    ],
)
async def test_an_unrated_match_is_recorded_once_and_changes_nothing(params, extra, reason):
    """An unrated match (declared, too short, too few players) gets no events and changes no
    state, is recorded (a redelivery is a duplicate), and says why."""
    table = ladders(**params)
    first = match("m1", "a", "b")
    first["teams"].append({"rank": 2, "players": [{"id": "c"}]})
    store, results = await run(table, [first, match("m2", "a", "b", **extra)])
    assert results[1].unrated == reason and results[1].events == [] and not results[1].duplicate
    before = dict(await store.players("l"))
    _, again = await run(table, [match("m2", "a", "b", **extra)], store)
    assert again[0].duplicate and again[0].unrated is None
    assert await store.players("l") == before and before["a"].games == 1


async def test_a_match_long_enough_or_without_duration_is_rated():
    """The duration rule lets through matches at the minimum and those that give none."""
    table = ladders(min_duration=300)
    _, results = await run(table, [match("m1", "a", "b", duration=300), match("m2", "a", "b")])
    assert [r.unrated for r in results] == [None, None]
    assert all(r.events for r in results)


def test_match_fields_rated_and_duration_are_validated():
    """``rated`` must be a boolean, ``duration`` a number >= 0; both round-trip."""
    table = ladders()
    with pytest.raises(ValidationError, match="rated: must be a boolean"):
        parse_match(match("m", "a", "b", rated="no"), table)
    with pytest.raises(ValidationError, match="duration: must be >= 0"):
        parse_match(match("m", "a", "b", duration=-1), table)
    parsed = parse_match(match("m", "a", "b", rated=False, duration=61.5), table)
    assert parse_match(parsed.to_dict(), table) == parsed


async def test_peak_is_the_highest_display_rating_and_when():
    """The peak is the highest rating after any match, with that match's time."""
    table = ladders()
    events = [
        match("m1", "a", "b", at=T0),
        match("m2", "a", "b", at=T0 + 60),
        match("m3", "b", "a", at=T0 + 120),
    ]
    store, results = await run(table, events)
    a = (await store.players("l"))["a"]
    ratings = [e["rating"] for r in results for e in r.events if e["player_id"] == "a"]
    assert a.peak == max(ratings) == ratings[1] and a.peak_at == T0 + 60 and a.mu < a.peak
    row = (await Queries(store, table).leaderboard("l", 5, T0))["rows"]
    assert {r["player_id"]: r["peak"] for r in row}["a"] == a.peak


async def test_a_season_start_pulls_every_player_toward_the_prior():
    """Elo with ``season_shrink = 0.5``: each rating moves halfway to 1500 at the season
    record, later matches build on the reset states, the ending season's leaderboard stays
    readable, and one season event per changed player is emitted."""
    table = ladders(season_shrink=0.5)
    store, results = await run(
        table,
        [match("m1", "a", "b"), match("m2", "a", "c"), season("s2"), match("m3", "b", "c")],
        batch_size=2,
    )
    resets = results[2].events
    assert {e["player_id"] for e in resets} == {"a", "b", "c"}
    for e in resets:
        assert e["kind"] == "season" and RatingChanged.from_dict(e).season == {"id": "s2", "params": {}}
        assert math.isclose(e["after"]["mu"] - 1500, 0.5 * (e["before"]["mu"] - 1500))
    old = await store.leaderboard("l", 10, season=1)
    assert [p for p, _ in old] == ["a", "c", "b"] or [p for p, _ in old] == ["a", "b", "c"]
    a = (await store.players("l"))["a"]
    assert math.isclose(a.mu - 1500, 0.5 * (max(dict(old).values()) - 1500)) and a.games == 2
    board = await Queries(store, table).leaderboard("l", 10, T0)
    assert board["season"] == 2
    assert (await Queries(store, table).leaderboard("l", 10, T0, season=1))["rows"][0]["player_id"] == "a"
    with pytest.raises(QueryError, match="season"):
        await Queries(store, table).leaderboard("l", 10, T0, season=2)


async def test_a_season_is_exact_for_any_batching_and_applied_once():
    """A season record in the middle of a stream gives the same states whatever the batch
    size; redelivering it resets nobody again."""
    table = ladders("trueskill", season_shrink=0.7, season_sigma=2.0)
    rng = random.Random(5)
    events = [match(f"m{i}", *rng.sample("abcdef", 2), at=T0 + i) for i in range(40)]
    events.insert(17, season("s2", at=T0 + 17))
    states = []
    for size in (1, 7, 1000):
        store, _ = await run(table, events, batch_size=size)
        states.append({p: s._replace(version=0) for p, s in (await store.players("l")).items()})
    assert states[0] == states[1] == states[2]
    _, again = await run(table, [season("s2")], store)
    assert (
        again[0].duplicate
        and {p: s._replace(version=0) for p, s in (await store.players("l")).items()} == states[2]
    )
    assert await store.seasons("l") == ["s2"]


def test_the_season_reset_grows_sigma_toward_the_prior_only():
    """σ grows as √(σ² + s²), capped at σ0; μ shrinks by k; an override wins."""
    table = ladders("trueskill", season_shrink=0.5, season_sigma=3.0)
    model, rules = table["l"].rating_model, table["l"].rules
    prior = model.initial()
    reset = rules.season_reset(model, Rating(prior.mu + 10, 1.0), {})
    assert math.isclose(reset.mu, prior.mu + 5) and math.isclose(reset.sigma, math.sqrt(10.0))
    assert rules.season_reset(model, Rating(prior.mu, 8.0), {}).sigma == prior.sigma
    assert rules.season_reset(model, Rating(prior.mu + 10, 1.0), {"season_shrink": 1.0}).mu == prior.mu + 10


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdefgh"), st.sampled_from("abcdefgh"), st.integers(0, 30)), max_size=30
    )
)
async def test_active_ranks_count_only_recently_active_players(games):
    """With ``leaderboard_active_days = 10`` the top list, each rank (tied players sharing one)
    and each percentile are those of the leaderboard restricted to players whose last match
    lies within 10 days of the read (a brute-force oracle)."""
    table = ladders(leaderboard_active_days=10)
    events = [match(f"m{i}", a, b, at=T0 + day * DAY) for i, (a, b, day) in enumerate(games) if a != b]
    store, _ = await run(table, events)
    now = T0 + 30 * DAY
    states = await store.players("l")
    ordered = await store.leaderboard("l", 100)
    eligible = [p for p, _ in ordered if states[p].last_played >= now - 10 * DAY]
    score = dict(ordered)
    queries = Queries(store, table)
    board = await queries.leaderboard("l", 5, now)
    found = (await queries.players("l", list("abcdefgh"), now))["players"]
    assert [r["player_id"] for r in board["rows"]] == eligible[:5]
    for p in found:
        pid = p["player_id"]
        # standard competition ranking: 1 + the eligible players rated strictly higher
        expected = 1 + sum(score[q] > score[pid] for q in eligible) if pid in eligible else None
        assert p["rank"] == expected
        if expected is not None:
            assert p["percentile"] == 100.0 * (len(eligible) - expected + 1) / len(eligible)


async def test_predict_names_the_provisional_players_of_each_team():
    """``predict`` lists each team's provisional players (a new player too) beside its chance."""
    table = ladders(provisional_games=2)
    store, _ = await run(table, [match("m1", "a", "b"), match("m2", "a", "c")])
    answer = await Queries(store, table).predict("l", [["a"], ["b"], ["new"]], T0)
    assert [t["provisional"] for t in answer["teams"]] == [[], ["b"], ["new"]]


def test_a_rerate_may_not_override_a_rule():
    """Rules come from the configuration, where reads find them: a correction that tries to
    set one is refused, naming it."""
    from stream_rater.corrections.rerate import Correction

    with pytest.raises(ValueError, match=r"params\.provisional_games: a ladder rule"):
        Correction("rerate", "l", params={"provisional_games": 10})
    Correction("rerate", "l", params={"beta": 2.0})


class _FailsOnce(MemoryStore):
    """A store whose first read of every player (a season start's) fails, as a connection
    error would."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def players(self, ladder, effects=False, generation=None, only=None):
        if only is None and not effects and not self.failed:
            self.failed = True
            raise ConnectionError("lost")
        return await super().players(ladder, effects, generation, only)


async def test_matches_committed_before_a_failed_season_still_count_as_applied_on_the_retry():
    """A batch split at a season record: the part before it commits, the season's read fails;
    the retry reports those matches as newly applied (not duplicates), as for any batch."""
    table = ladders(season_shrink=0.5)
    store = _FailsOnce()
    processor = Processor(table, store)
    batch = [parse_match(e, table) for e in (match("m1", "a", "b"), season("s2"), match("m2", "a", "b"))]
    with pytest.raises(ConnectionError):
        await processor.process(batch)
    again = await processor.process(batch)
    assert [r.duplicate for r in again.results] == [False, False, False]
    assert await store.seasons("l") == ["s2"]


def team_match(match_id: str, first: list[dict[str, Any]], second: list[dict[str, Any]]) -> dict[str, Any]:
    """A two-team match on ladder ``l``, the first team winning."""
    return {
        "match_id": match_id,
        "ladder": "l",
        "finished_at": T0,
        "teams": [{"rank": 1, "players": first}, {"rank": 2, "players": second}],
    }


def test_party_effects_name_each_distinct_party_size_of_a_team():
    """``party_effects``: a team's parties of two or more become ``party:<size>``, one per
    distinct size, after the team's own effects; off, the match is unchanged."""
    table = ladders("trueskill", party_effects=True)
    players = [{"id": "a", "party": "x"}, {"id": "b", "party": "x"}, {"id": "c", "party": "y"}]
    players += [{"id": "d", "party": "z"}, {"id": "e", "party": "z"}, {"id": "f", "party": "z"}]
    event = team_match("m1", players, [{"id": "g", "party": "x"}, {"id": "h"}])
    event["teams"][0]["effects"] = ["home"]
    parsed = parse_match(event, table)
    seen = table["l"].rules.with_parties(parsed)
    assert [t.effects for t in seen.teams] == [("home", "party:2", "party:3"), ()]
    assert ladders("trueskill").get("l").rules.with_parties(parsed) is parsed
    with pytest.raises(RuleError, match="party_effects"):
        Rules(party_effects=1)  # type: ignore[arg-type]


def test_party_effects_need_a_model_with_effects():
    """A ladder whose model learns no effects (SPH Elo) refuses ``party_effects``."""
    with pytest.raises(LadderConfigError, match="party_effects: model 'sph-elo' does not support effects"):
        load_ladders(
            None, {"STREAM_RATER_LADDER_MW4": "sph-elo", "STREAM_RATER_LADDER_MW4__PARTY_EFFECTS": "true"}
        )


@pytest.mark.parametrize("model", ["trueskill", "elo", "glicko2"])
async def test_a_party_effect_is_learned_and_stream_equals_replay(model):
    """A pair that queued together and keeps winning: the ladder learns ``party:2`` as an
    effect (positive, never on the leaderboard), identically in batches of 1 and of 1000."""
    table = ladders(model, party_effects=True)
    rng = random.Random(5)
    events = []
    for i in range(60):
        a, b, c, d = rng.sample("abcdefgh", 4)
        events.append(
            team_match(f"m{i}", [{"id": a, "party": "p"}, {"id": b, "party": "p"}], [{"id": c}, {"id": d}])
        )
    one, _ = await run(table, events, batch_size=1)
    many, _ = await run(table, events)
    effects = await many.players("l", effects=True)
    assert list(effects) == ["party:2"] and effects["party:2"].mu > 0

    def values(states):
        return {k: (s.mu, s.sigma, s.games) for k, s in states.items()}

    assert values(effects) == values(await one.players("l", effects=True))
    assert values(await many.players("l")) == values(await one.players("l"))
    assert "party:2" not in dict(await many.leaderboard("l", 100))


@pytest.mark.parametrize(("model", "floor"), [("elo", 1490.0), ("trueskill", 2.0), ("glicko", 1450.0)])
async def test_no_state_goes_below_the_rating_floor(model, floor):
    """``rating_floor``: a player who loses every match stops at the floor (display rating
    equal to it, never below), in events and stored states; without the floor they sink below
    it, and the floor leaves them above where they would have been (points created)."""
    events = [match(f"m{i}", "w", "loser") for i in range(40)]
    table = ladders(model, rating_floor=floor)
    store, results = await run(table, events)
    display = table["l"].rating_model.display
    ratings = [e["rating"] for r in results for e in r.events if e["player_id"] == "loser"]
    assert min(ratings) == pytest.approx(floor) and all(r >= floor - 1e-9 for r in ratings)
    stored = (await store.players("l"))["loser"]
    assert display(Rating(stored.mu, stored.sigma)) >= floor - 1e-9
    plain, unfloored = await run(ladders(model), events)
    assert min(e["rating"] for r in unfloored for e in r.events if e["player_id"] == "loser") < floor - 1.0
    assert (await plain.players("l"))["loser"].mu < stored.mu


async def test_a_season_reset_respects_the_rating_floor():
    """A season's soft reset that grows σ would push μ − kσ under the floor: it stops there."""
    table = ladders("trueskill", rating_floor=0.0, season_sigma=8.0)
    store, _ = await run(table, [match(f"m{i}", "a", "b") for i in range(20)] + [season("s1")])
    for state in (await store.players("l")).values():
        assert state.mu - 3 * state.sigma >= -1e-9
    unfloored, _ = await run(
        ladders("trueskill", season_sigma=8.0), [match(f"m{i}", "a", "b") for i in range(20)] + [season("s1")]
    )
    assert min(s.mu - 3 * s.sigma for s in (await unfloored.players("l")).values()) < -1.0
