"""Match-finished validation and the match dataclasses (stream_rater.contracts.match, its fast and full parse paths)."""

from __future__ import annotations

import copy
import pickle
import statistics
import time
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import (
    Limits,
    MatchFinished,
    Player,
    Team,
    ValidationError,
    parse_match,
)
from stream_rater.contracts import _match_fast as fast_path
from stream_rater.contracts import _match_parse as full_path

LADDERS = Ladders([Ladder("halo2-ffa", "trueskill", {"draw_probability": 0.0}), Ladder("mw4", "sph-elo")])


def one_v_one(**changes: Any) -> dict[str, Any]:
    """A valid 1v1 event on the default ladder, with top-level fields replaced."""
    event: dict[str, Any] = {
        "match_id": "m1",
        "finished_at": "2004-08-06T18:13:50Z",
        "teams": [{"rank": 1, "players": [{"id": "p1"}]}, {"rank": 2, "players": [{"id": "p2"}]}],
    }
    event.update(changes)
    return event


def with_player(**fields: Any) -> dict[str, Any]:
    """A valid 1v1 event whose second player has `fields` set (None deletes a field)."""
    event = one_v_one()
    player = event["teams"][1]["players"][0]
    player.update(fields)
    return event


def sph(*players: dict[str, Any]) -> dict[str, Any]:
    """An event on the SPH Elo ladder, one player per team."""
    return one_v_one(ladder="mw4", teams=[{"rank": i, "players": [p]} for i, p in enumerate(players)])


def rejection(obj: Any, limits: Limits = Limits()) -> str:
    with pytest.raises(ValidationError) as info:
        parse_match(obj, LADDERS, limits)
    return str(info.value)


def test_minimal_event_parses_with_defaults_filled_in() -> None:
    """A minimal 1v1 event becomes a MatchFinished on the default ladder with every optional field at its default."""
    assert parse_match(one_v_one(), LADDERS) == MatchFinished(
        match_id="m1",
        ladder="default",
        finished_at=1091816030.0,
        teams=(Team(players=(Player("p1"),), rank=1.0), Team(players=(Player("p2"),), rank=2.0)),
    )


def test_design_example_parses() -> None:
    """The documented match-finished example is valid and keeps every field it gives."""
    match = parse_match(
        {
            "match_id": "h2-281884",
            "ladder": "halo2-ffa",
            "finished_at": "2004-08-06T18:13:50Z",
            "teams": [
                {"rank": 1, "players": [{"id": "p1"}, {"id": "p2", "weight": 0.5}]},
                {"rank": 2, "players": [{"id": "p3", "score": 12, "seconds_played": 840}]},
            ],
        },
        LADDERS,
    )
    assert match.ladder == "halo2-ffa"
    assert match.teams[0].players[1] == Player("p2", weight=0.5)
    assert match.teams[1].players[0] == Player("p3", score=12.0, seconds_played=840.0)


def test_null_optional_fields_mean_absent() -> None:
    """Optional fields given as null parse exactly as if they were left out."""
    nulls = one_v_one(ladder=None, model=None)
    nulls["teams"][0].update(score=None, effects=None)
    nulls["teams"][0]["players"][0].update(weight=None, score=None, seconds_played=None, rated=None)
    assert parse_match(nulls, LADDERS) == parse_match(one_v_one(), LADDERS)


def test_numbers_are_stored_as_floats() -> None:
    """Integer ranks, weights, scores and times come out as floats, so equal values compare equal whatever their wire type."""
    match = parse_match(with_player(weight=1, score=3, seconds_played=60), LADDERS)
    player = match.teams[1].players[0]
    assert [type(x) for x in (match.teams[0].rank, player.weight, player.score, player.seconds_played)] == [
        float
    ] * 4


def test_model_equal_to_the_ladders_is_accepted() -> None:
    """An event may name its ladder's model."""
    assert parse_match(one_v_one(model="trueskill"), LADDERS) == parse_match(one_v_one(), LADDERS)


def test_effects_are_kept_on_a_ladder_that_supports_them() -> None:
    """Team effects are parsed into a tuple on a TrueSkill ladder."""
    event = one_v_one()
    event["teams"][0]["effects"] = ["home", "map-a"]
    assert parse_match(event, LADDERS).teams[0].effects == ("home", "map-a")


def test_a_party_id_is_kept_and_written_back() -> None:
    """A player's ``party`` is parsed (null = absent) and `to_dict` writes it back."""
    match = parse_match(with_player(party="g1"), LADDERS)
    assert match.teams[1].players[0] == Player("p2", party="g1")
    assert parse_match(match.to_dict(), LADDERS) == match
    assert parse_match(with_player(party=None), LADDERS) == parse_match(one_v_one(), LADDERS)


@pytest.mark.parametrize(
    ("party", "message"),
    [
        (7, "teams[1].players[0].party: must be a string, got integer"),
        ("", "teams[1].players[0].party: must not be empty"),
        ("g" * 129, "teams[1].players[0].party: is 129 characters, limit 128"),
    ],
)
def test_a_bad_party_id_is_rejected_with_its_path(party: Any, message: str) -> None:
    """A party id is a non-empty string within the id length limit."""
    assert rejection(with_player(party=party)) == message


def test_unrated_player_needs_no_score_on_a_scores_ladder() -> None:
    """On a ladder whose model needs scores, an unrated player may omit score and seconds_played."""
    match = parse_match(
        sph({"id": "a", "score": 3, "seconds_played": 60}, {"id": "b", "rated": False}), LADDERS
    )
    assert match.teams[1].players[0] == Player("b", rated=False)


def _teams(n: int) -> list[dict[str, Any]]:
    return [{"rank": i, "players": [{"id": f"p{i}"}]} for i in range(n)]


def _bad_players(**fields: Any) -> list[dict[str, Any]]:
    return with_player(**fields)["teams"]


REJECTIONS: list[tuple[str, Any, str]] = [
    ("not an object", [one_v_one()], "event: must be an object, got array"),
    ("unknown top-level field", one_v_one(winner="p1"), "winner: unknown field"),
    ("unknown odd key", one_v_one(**{"a b": 1}), "['a b']: unknown field"),
    ("missing match_id", {k: v for k, v in one_v_one().items() if k != "match_id"}, "match_id: is required"),
    ("null match_id", one_v_one(match_id=None), "match_id: must be a string, got null"),
    ("numeric match_id", one_v_one(match_id=7), "match_id: must be a string, got integer"),
    ("empty match_id", one_v_one(match_id=""), "match_id: must not be empty"),
    ("long match_id", one_v_one(match_id="x" * 129), "match_id: is 129 characters, limit 128"),
    ("lone surrogate", one_v_one(match_id="m\ud800"), "match_id: is not valid Unicode (lone surrogate)"),
    ("ladder not a string", one_v_one(ladder=True), "ladder: must be a string, got boolean"),
    (
        "unknown ladder",
        one_v_one(ladder="nope"),
        "ladder: unknown ladder 'nope' (configured: default, halo2-ffa, mw4)",
    ),
    (
        "model switch",
        one_v_one(model="sph-elo"),
        (
            "model: ladder 'default' uses model 'trueskill', the event says 'sph-elo'; "
            "an event may not switch a ladder's model"
        ),
    ),
    ("model not a string", one_v_one(model=3), "model: must be a string, got integer"),
    (
        "missing finished_at",
        {k: v for k, v in one_v_one().items() if k != "finished_at"},
        "finished_at: is required",
    ),
    (
        "boolean finished_at",
        one_v_one(finished_at=True),
        "finished_at: must be an RFC 3339 date-time string or epoch seconds, got boolean",
    ),
    (
        "no offset",
        one_v_one(finished_at="2004-08-06T18:13:50"),
        "finished_at: '2004-08-06T18:13:50' is not an RFC 3339 date-time (like 2004-08-06T18:13:50Z)",
    ),
    (
        "date only",
        one_v_one(finished_at="2004-08-06"),
        "finished_at: '2004-08-06' is not an RFC 3339 date-time (like 2004-08-06T18:13:50Z)",
    ),
    (
        "offset hours 24",
        one_v_one(finished_at="2004-08-06T18:13:50+24:00"),
        "finished_at: '2004-08-06T18:13:50+24:00' is not an RFC 3339 date-time (like 2004-08-06T18:13:50Z)",
    ),
    (
        "February 30",
        one_v_one(finished_at="2004-02-30T00:00:00Z"),
        "finished_at: '2004-02-30T00:00:00Z' is not a valid date-time: day is out of range for month",
    ),
    (
        "leap second",
        one_v_one(finished_at="2016-12-31T23:59:60Z"),
        "finished_at: '2016-12-31T23:59:60Z' is not a valid date-time: second must be in 0..59",
    ),
    (
        "before year 1",
        one_v_one(finished_at="0001-01-01T00:00:00+01:00"),
        "finished_at: is out of range (years 0001-9999)",
    ),
    ("epoch too large", one_v_one(finished_at=1e12), "finished_at: is out of range (years 0001-9999)"),
    ("NaN epoch", one_v_one(finished_at=float("nan")), "finished_at: must be a finite number"),
    ("teams not an array", one_v_one(teams={"a": 1}), "teams: must be an array, got object"),
    ("one team", one_v_one(teams=_teams(1)), "teams: needs at least 2 teams, got 1"),
    ("too many teams", one_v_one(teams=_teams(65)), "teams: has 65 teams, limit 64"),
    ("team not an object", one_v_one(teams=[_teams(1)[0], "b"]), "teams[1]: must be an object, got string"),
    (
        "unknown team field",
        one_v_one(teams=[{"rank": 1, "players": [{"id": "a"}], "colour": "red"}, _teams(2)[1]]),
        "teams[0].colour: unknown field",
    ),
    ("missing players", one_v_one(teams=[{"rank": 1}, _teams(2)[1]]), "teams[0].players: is required"),
    (
        "empty team",
        one_v_one(teams=[_teams(1)[0], {"rank": 2, "players": []}]),
        "teams[1].players: needs at least 1 player",
    ),
    (
        "player not an object",
        one_v_one(teams=[_teams(1)[0], {"rank": 2, "players": ["p2"]}]),
        "teams[1].players[0]: must be an object, got string",
    ),
    ("unknown player field", with_player(nick="x"), "teams[1].players[0].nick: unknown field"),
    (
        "missing id",
        one_v_one(teams=[_teams(1)[0], {"rank": 2, "players": [{"score": 1}]}]),
        "teams[1].players[0].id: is required",
    ),
    (
        "player twice",
        one_v_one(teams=[_teams(1)[0], {"rank": 2, "players": [{"id": "p9"}, {"id": "p0"}]}]),
        "teams[1].players[1].id: player 'p0' is already listed at teams[0].players[0]",
    ),
    (
        "player twice in a team",
        one_v_one(teams=[{"rank": 1, "players": [{"id": "a"}, {"id": "a"}]}, _teams(2)[1]]),
        "teams[0].players[1].id: player 'a' is already listed at teams[0].players[0]",
    ),
    (
        "boolean rank",
        one_v_one(teams=[{"rank": True, "players": [{"id": "a"}]}, _teams(2)[1]]),
        "teams[0].rank: must be a number, got boolean",
    ),
    (
        "string rank",
        one_v_one(teams=[{"rank": "1", "players": [{"id": "a"}]}, _teams(2)[1]]),
        "teams[0].rank: must be a number, got string",
    ),
    (
        "infinite rank",
        one_v_one(teams=[{"rank": float("inf"), "players": [{"id": "a"}]}, _teams(2)[1]]),
        "teams[0].rank: must be a finite number",
    ),
    (
        "huge integer score",
        one_v_one(
            teams=[{"score": 10**400, "players": [{"id": "a"}]}, {"score": 1, "players": [{"id": "b"}]}]
        ),
        "teams[0].score: must be a finite number",
    ),
    (
        "rank and score mixed",
        one_v_one(teams=[{"rank": 1, "players": [{"id": "a"}]}, {"score": 3, "players": [{"id": "b"}]}]),
        "teams[1].rank: is missing but teams[0] has one (all teams give a rank, or none does)",
    ),
    (
        "score then rank",
        one_v_one(teams=[{"score": 1, "players": [{"id": "a"}]}, {"rank": 3, "players": [{"id": "b"}]}]),
        "teams[0].rank: is missing but teams[1] has one (all teams give a rank, or none does)",
    ),
    (
        "neither rank nor score",
        one_v_one(
            teams=[
                {"score": 1, "players": [{"id": "a"}]},
                {"players": [{"id": "b", "score": 1}, {"id": "c"}]},
            ]
        ),
        "teams[1]: needs a rank or a score (or a score for every player)",
    ),
    ("zero weight", with_player(weight=0), "teams[1].players[0].weight: must be > 0 and <= 1"),
    ("negative weight", with_player(weight=-0.5), "teams[1].players[0].weight: must be > 0 and <= 1"),
    ("weight above 1", with_player(weight=1.5), "teams[1].players[0].weight: must be > 0 and <= 1"),
    ("boolean weight", with_player(weight=True), "teams[1].players[0].weight: must be a number, got boolean"),
    ("NaN score", with_player(score=float("nan")), "teams[1].players[0].score: must be a finite number"),
    ("zero time", with_player(seconds_played=0), "teams[1].players[0].seconds_played: must be > 0"),
    ("negative time", with_player(seconds_played=-1.5), "teams[1].players[0].seconds_played: must be > 0"),
    ("rated as integer", with_player(rated=1), "teams[1].players[0].rated: must be a boolean, got integer"),
    ("rated as string", with_player(rated="yes"), "teams[1].players[0].rated: must be a boolean, got string"),
    (
        "effects not an array",
        one_v_one(teams=[{"rank": 1, "effects": "home", "players": [{"id": "a"}]}, _teams(2)[1]]),
        "teams[0].effects: must be an array, got string",
    ),
    (
        "effect not a string",
        one_v_one(teams=[{"rank": 1, "effects": ["home", 2], "players": [{"id": "a"}]}, _teams(2)[1]]),
        "teams[0].effects[1]: must be a string, got integer",
    ),
    (
        "empty effect",
        one_v_one(teams=[{"rank": 1, "effects": [""], "players": [{"id": "a"}]}, _teams(2)[1]]),
        "teams[0].effects[0]: must not be empty",
    ),
    (
        "effect twice",
        one_v_one(
            teams=[{"rank": 1, "effects": ["home", "side", "home"], "players": [{"id": "a"}]}, _teams(2)[1]]
        ),
        "teams[0].effects[2]: effect 'home' is listed twice",
    ),
    (
        "too many effects",
        one_v_one(
            teams=[
                {"rank": 1, "effects": [f"e{i}" for i in range(9)], "players": [{"id": "a"}]},
                _teams(2)[1],
            ]
        ),
        "teams[0].effects: has 9 effects, limit 8",
    ),
    (
        "effects where unsupported",
        one_v_one(
            ladder="mw4",
            teams=[
                {"rank": 1, "effects": ["home"], "players": [{"id": "a", "score": 1, "seconds_played": 9}]},
                {"rank": 2, "players": [{"id": "b", "score": 1, "seconds_played": 9}]},
            ],
        ),
        "teams[0].effects: ladder 'mw4' (model 'sph-elo') does not support effects",
    ),
    (
        "score missing on SPH ladder",
        sph({"id": "a", "score": 1, "seconds_played": 9}, {"id": "b", "seconds_played": 9}),
        "teams[1].players[0].score: is required by ladder 'mw4' (model 'sph-elo')",
    ),
    (
        "time missing on SPH ladder",
        sph({"id": "a", "score": 1}, {"id": "b", "score": 1, "seconds_played": 9}),
        "teams[0].players[0].seconds_played: is required by ladder 'mw4' (model 'sph-elo')",
    ),
    (
        "too many players",
        one_v_one(
            teams=[
                {"rank": 1, "players": [{"id": f"a{i}"} for i in range(200)]},
                {"rank": 2, "players": [{"id": f"b{i}"} for i in range(57)]},
            ]
        ),
        "teams: have more than 256 players in all",
    ),
    (
        "team too large",
        one_v_one(teams=[{"rank": 1, "players": [{"id": f"a{i}"} for i in range(300)]}, _teams(2)[1]]),
        "teams[0].players: has 300 players, limit 256",
    ),
]


@pytest.mark.parametrize(("event", "message"), [r[1:] for r in REJECTIONS], ids=[r[0] for r in REJECTIONS])
def test_invalid_event_is_rejected_with_path_and_reason(event: Any, message: str) -> None:
    """Each way of breaking the contract is rejected with the exact field path and reason."""
    assert rejection(event) == message


def test_error_carries_path_and_reason() -> None:
    """ValidationError exposes path and reason separately and survives pickling."""
    with pytest.raises(ValidationError) as info:
        parse_match(with_player(seconds_played=0), LADDERS)
    error = pickle.loads(pickle.dumps(info.value))
    assert (error.path, error.reason) == ("teams[1].players[0].seconds_played", "must be > 0")
    assert str(error) == "teams[1].players[0].seconds_played: must be > 0"


def test_limits_are_configurable() -> None:
    """Custom limits tighten the team, player, id and effect checks."""
    limits = Limits(max_teams=2, max_players=2, max_id_length=3, max_effects=1)
    assert rejection(one_v_one(teams=_teams(3)), limits) == "teams: has 3 teams, limit 2"
    assert rejection(one_v_one(match_id="abcd"), limits) == "match_id: is 4 characters, limit 3"
    three = one_v_one(teams=[{"rank": 1, "players": [{"id": "a"}, {"id": "b"}]}, _teams(2)[1]])
    assert rejection(three, limits) == "teams: have more than 2 players in all"
    two_effects = one_v_one()
    two_effects["teams"][0]["effects"] = ["x", "y"]
    assert rejection(two_effects, limits) == "teams[0].effects: has 2 effects, limit 1"


def test_validation_does_not_modify_its_input() -> None:
    """parse_match leaves the decoded object untouched."""
    event = with_player(weight=0.5, score=2)
    before = copy.deepcopy(event)
    parse_match(event, LADDERS)
    assert event == before


def _scored(*team_scores: Any) -> MatchFinished:
    teams = []
    for i, score in enumerate(team_scores):
        if isinstance(score, list):
            teams.append({"players": [{"id": f"t{i}p{j}", "score": s} for j, s in enumerate(score)]})
        else:
            teams.append({"score": score, "players": [{"id": f"t{i}"}]})
    return parse_match(one_v_one(teams=teams), LADDERS)


def test_ranks_are_the_given_ranks() -> None:
    """ranks() returns the teams' own ranks when they give them, draws included."""
    event = one_v_one(
        teams=[{"rank": r, "players": [{"id": f"p{i}"}]} for i, r in enumerate([2, 1, 2, -1.5])]
    )
    assert parse_match(event, LADDERS).ranks() == [2.0, 1.0, 2.0, -1.5]


def test_ranks_from_scores_are_competition_ranks() -> None:
    """Without ranks, higher scores rank better and equal scores share a rank (9, 5, 5, 1 → 1, 2, 2, 4)."""
    assert _scored(5, 9, 1, 5).ranks() == [2.0, 1.0, 4.0, 2.0]


def test_team_score_defaults_to_sum_of_player_scores() -> None:
    """A team without its own score is ranked by the sum of its players' scores."""
    assert _scored([4, 4], 7, [10, -2]).ranks() == [1.0, 3.0, 1.0]


def test_ranked_team_may_carry_a_score_that_does_not_decide_the_order() -> None:
    """When teams give ranks, a team score is kept but the ranks decide."""
    event = one_v_one(
        teams=[
            {"rank": 2, "score": 3, "players": [{"id": "a"}]},
            {"rank": 1, "score": 0, "players": [{"id": "b"}]},
        ]
    )
    match = parse_match(event, LADDERS)
    assert (match.ranks(), match.teams[0].score) == ([2.0, 1.0], 3.0)


def test_to_dict_is_the_canonical_wire_form() -> None:
    """to_dict leaves defaults out, writes integral numbers as ints and finished_at as an RFC 3339 Z string."""
    event = {
        "match_id": "m1",
        "ladder": "halo2-ffa",
        "finished_at": "2004-08-06T20:13:50.5+02:00",
        "teams": [
            {
                "rank": 1.0,
                "effects": ["home"],
                "players": [{"id": "a", "weight": 1.0, "rated": True}, {"id": "b", "weight": 0.25}],
            },
            {
                "rank": 2,
                "score": 7.5,
                "players": [{"id": "c", "score": 3.0, "seconds_played": 60.5, "rated": False}],
            },
        ],
    }
    assert parse_match(event, LADDERS).to_dict() == {
        "match_id": "m1",
        "ladder": "halo2-ffa",
        "finished_at": "2004-08-06T18:13:50.5Z",
        "teams": [
            {"rank": 1, "effects": ["home"], "players": [{"id": "a"}, {"id": "b", "weight": 0.25}]},
            {
                "rank": 2,
                "score": 7.5,
                "players": [{"id": "c", "score": 3, "seconds_played": 60.5, "rated": False}],
            },
        ],
    }


def test_to_dict_parses_back_to_the_same_match() -> None:
    """parse_match(m.to_dict()) == m for a match that uses every field."""
    match = parse_match(
        sph({"id": "a", "score": 2.5, "seconds_played": 61.25, "weight": 0.5}, {"id": "b", "rated": False}),
        LADDERS,
    )
    assert parse_match(match.to_dict(), LADDERS) == match


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
PATHS = [
    (),
    ("match_id",),
    ("ladder",),
    ("model",),
    ("finished_at",),
    ("teams",),
    ("teams", 0),
    ("teams", 1, "rank"),
    ("teams", 0, "players"),
    ("teams", 0, "effects"),
    ("teams", 1, "players", 0),
    ("teams", 1, "players", 0, "id"),
    ("teams", 1, "players", 0, "weight"),
    ("teams", 1, "players", 0, "rated"),
]


@given(st.sampled_from(PATHS), JSON, st.sampled_from(["default", "mw4"]))
def test_parse_match_raises_only_validation_errors(path: tuple[Any, ...], value: Any, ladder: str) -> None:
    """Whatever value replaces any part of a valid event, parse_match returns a match or raises ValidationError, nothing else."""
    event: Any = one_v_one(ladder=ladder)
    if not path:
        event = value
    else:
        target = event
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    try:
        parse_match(event, LADDERS)
    except ValidationError:
        pass


def test_common_events_take_the_fast_path() -> None:
    """A plain event (ranks, player ids, numeric or RFC 3339 time) is built by the fast path, equal to the full validation's."""
    plain = [
        one_v_one(),
        one_v_one(finished_at=1091816030.25, ladder="halo2-ffa", model="trueskill"),
        one_v_one(teams=_teams(5)),
    ]
    for event in plain:
        fast = fast_path._parse_plain(event, LADDERS, Limits())
        assert fast is not None
        assert repr(fast) == repr(full_path._parse_any(event, LADDERS, Limits()))


def test_fast_builders_set_every_field() -> None:
    """The fast path's slot-by-slot builders make the same objects as the dataclass constructors, every field set."""

    def values(obj: Any) -> list[Any]:
        return [getattr(obj, f.name) for f in fields(obj)]  # AttributeError for a field left unset

    player, team = fast_path._new_player("p"), fast_path._new_team((Player("p"),), 2.0)
    match = fast_path._new_match("m", "default", 1.0, (team, team))
    assert values(player) == values(Player("p"))
    assert values(team) == values(Team((Player("p"),), 2.0))
    assert values(match) == values(MatchFinished("m", "default", 1.0, (team, team)))
    assert hash(match) == hash(MatchFinished("m", "default", 1.0, (team, team)))
    assert not any(
        hasattr(cls, "__post_init__") for cls in (Player, Team, MatchFinished)
    )  # they skip __init__


PLAIN_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**60), 2**60),
    st.floats(),
    st.sampled_from(["", "p1", "p2", "é", "x" * 129, "trueskill", "mw4", "2004-08-06T18:13:50Z"]),
    st.lists(st.just({"id": "q"}), max_size=2),
    st.just({"id": "p1"}),
    st.just({}),
)
PLAIN_PATHS = [*PATHS, ("teams", 0, "players", 1), ("teams", 2), ("extra",)]


@given(st.sampled_from(PLAIN_PATHS), PLAIN_VALUES, st.sampled_from(["default", "mw4", "halo2-ffa", None]))
def test_fast_path_accepts_only_what_the_full_validation_accepts_equally(
    path: tuple[Any, ...], value: Any, ladder: str | None
) -> None:
    """Whatever replaces a part of a plain event, the fast path either declines or builds exactly what the full validation builds."""
    event: Any = one_v_one(ladder=ladder)
    target = event
    for key in path[:-1]:
        target = target[key]
    if not path:
        event = value
    elif isinstance(target, list) and path[-1] >= len(target):
        target.append(value)
    else:
        target[path[-1]] = value
    fast = fast_path._parse_plain(event, LADDERS, Limits())
    if fast is not None:
        assert repr(fast) == repr(full_path._parse_any(event, LADDERS, Limits()))


def test_validation_is_fast() -> None:
    """Validating a 1v1 event takes well under 100 µs (a guard against slow checks creeping in; ~25 µs on the 2-core CI box)."""
    event = one_v_one()
    samples = []
    for _ in range(50):
        start = time.perf_counter()
        for _ in range(100):
            parse_match(event, LADDERS)
        samples.append((time.perf_counter() - start) / 100)
    assert statistics.median(samples) < 100e-6
