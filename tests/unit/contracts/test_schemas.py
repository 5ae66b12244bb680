"""The shipped JSON Schemas say what the hand-written validation does (stream_rater/contracts/schemas)."""

from __future__ import annotations

import copy
import json
from dataclasses import fields
from datetime import datetime
from importlib import resources
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import (
    Limits,
    MatchFinished,
    Player,
    RatingChanged,
    Team,
    ValidationError,
    parse_match,
    parse_timestamp,
)
from stream_rater.contracts.codecs import FORMATS, decode, encode
from stream_rater.contracts.correction_request import CorrectionRequest
from tests.helpers import RATING_CHANGED as CHANGED_EXAMPLE

LADDERS = Ladders([Ladder("halo2-ffa", "trueskill", {"draw_probability": 0.0}), Ladder("mw4", "sph-elo")])


def load(name: str) -> dict[str, Any]:
    text = (resources.files("stream_rater") / "contracts" / "schemas" / f"{name}.schema.json").read_text(
        encoding="utf-8"
    )
    return json.loads(text)  # type: ignore[no-any-return]


MATCH_SCHEMA = load("match_finished")
CHANGED_SCHEMA = load("rating_changed")
MATCH = Draft202012Validator(MATCH_SCHEMA)
CHANGED = Draft202012Validator(CHANGED_SCHEMA)


def we_accept(event: Any) -> bool:
    try:
        parse_match(event, LADDERS)
    except ValidationError:
        return False
    return True


def we_accept_changed(event: Any) -> bool:
    try:
        RatingChanged.from_dict(event)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("schema", [MATCH_SCHEMA, CHANGED_SCHEMA], ids=["match_finished", "rating_changed"])
def test_schemas_are_valid_draft_2020_12(schema: dict[str, Any]) -> None:
    """Both schema files ship as package data and are valid JSON Schema draft 2020-12."""
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_schema_fields_are_the_dataclass_fields() -> None:
    """Each schema object allows exactly the fields of its dataclass (plus the match's optional model)."""
    defs = MATCH_SCHEMA["$defs"]
    assert set(MATCH_SCHEMA["properties"]) == {f.name for f in fields(MatchFinished)} - {"season"} | {"model"}
    assert set(defs["team"]["properties"]) == {f.name for f in fields(Team)}
    assert set(defs["player"]["properties"]) == {f.name for f in fields(Player)}
    assert set(CHANGED_SCHEMA["properties"]) == {f.name for f in fields(RatingChanged)}
    assert set(CHANGED_SCHEMA["properties"]) - set(CHANGED_SCHEMA["required"]) == {
        "late",
        "kind",
        "correction",
        "provisional",
        "season",
        "cross",
        "expected",
        "rating_delta",  # absent only from events stored before they carried it
        "mode",  # only on a ladder with modes
    }


def test_schema_limits_are_the_default_limits() -> None:
    """The size limits written into the schema are the default Limits and the timestamp range of the code."""
    limits, defs, props = Limits(), MATCH_SCHEMA["$defs"], MATCH_SCHEMA["properties"]
    assert defs["id"]["maxLength"] == defs["name"]["maxLength"] == limits.max_id_length
    assert props["teams"]["maxItems"] == limits.max_teams
    assert defs["team"]["properties"]["players"]["maxItems"] == limits.max_players
    assert defs["team"]["properties"]["effects"]["maxItems"] == limits.max_effects
    epoch = props["finished_at"]["oneOf"][1]
    assert parse_timestamp(epoch["minimum"]) == epoch["minimum"]
    assert parse_timestamp(epoch["maximum"]) == epoch["maximum"]
    for outside in (epoch["minimum"] - 1, epoch["maximum"] + 1):
        with pytest.raises(ValidationError):
            parse_timestamp(outside)


def event(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "match_id": "m1",
        "finished_at": "2004-08-06T18:13:50Z",
        "teams": [{"rank": 1, "players": [{"id": "p1"}]}, {"rank": 2, "players": [{"id": "p2"}]}],
    }
    return {**base, **changes}


def teams(*team_list: dict[str, Any]) -> dict[str, Any]:
    return event(teams=list(team_list))


def team(rank: Any = None, score: Any = None, players: Any = None, **extra: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"players": players if players is not None else [{"id": f"p{rank}{score}"}], **extra}
    if rank is not None:
        t["rank"] = rank
    if score is not None:
        t["score"] = score
    return t


VALID = {
    "design example": {
        "match_id": "h2-281884",
        "ladder": "halo2-ffa",
        "finished_at": "2004-08-06T18:13:50Z",
        "teams": [
            {"rank": 1, "players": [{"id": "p1"}, {"id": "p2", "weight": 0.5}]},
            {"rank": 2, "players": [{"id": "p3", "score": 12, "seconds_played": 840}]},
        ],
    },
    "epoch seconds": event(finished_at=1091816030.5),
    "negative epoch": event(finished_at=-3063744000),
    "offset and fraction": event(finished_at="2004-08-06t20:13:50.123456789+02:00"),
    "space separator": event(finished_at="2004-08-06 18:13:50z"),
    "nulls": event(ladder=None, model=None),
    "model named": event(model="trueskill"),
    "team scores": teams(team(score=3), team(score=1.5)),
    "player scores": teams(team(players=[{"id": "a", "score": 1}, {"id": "b", "score": 2}]), team(score=2)),
    "ranked team with score": teams(team(rank=1, score=0), team(rank=2)),
    "draw": teams(team(rank=1, players=[{"id": "a"}]), team(rank=1, players=[{"id": "b"}])),
    "effects": teams(team(rank=1, effects=["home", "side-a"]), team(rank=2, effects=[])),
    "full player": teams(
        team(rank=1, players=[{"id": "a", "weight": 1, "score": -3, "seconds_played": 0.5, "rated": False}]),
        team(rank=2),
    ),
    "sph ladder": event(
        ladder="mw4",
        teams=[
            {"rank": 1, "players": [{"id": "a", "score": 10, "seconds_played": 600}]},
            {
                "rank": 2,
                "players": [{"id": "b", "score": 4, "seconds_played": 900}, {"id": "c", "rated": False}],
            },
        ],
    ),
    "64 teams": event(teams=[team(rank=i) for i in range(64)]),
    "256 players": teams(team(rank=1, players=[{"id": f"a{i}"} for i in range(255)]), team(rank=2)),
    "128-character id": event(match_id="m" * 128),
}

INVALID = {
    "array": [event()],
    "missing match_id": {k: v for k, v in event().items() if k != "match_id"},
    "missing finished_at": {k: v for k, v in event().items() if k != "finished_at"},
    "missing teams": {k: v for k, v in event().items() if k != "teams"},
    "unknown field": event(winner="p1"),
    "null match_id": event(match_id=None),
    "empty match_id": event(match_id=""),
    "long match_id": event(match_id="m" * 129),
    "number as match_id": event(match_id=1),
    "upper-case ladder": event(ladder="Default"),
    "upper-case model": event(model="TrueSkill"),
    "boolean finished_at": event(finished_at=False),
    "naive finished_at": event(finished_at="2004-08-06T18:13:50"),
    "date only": event(finished_at="2004-08-06"),
    "offset +24:00": event(finished_at="2004-08-06T18:13:50+24:00"),
    "epoch too large": event(finished_at=253402300800),
    "epoch too small": event(finished_at=-62135596801),
    "one team": event(teams=[team(rank=1)]),
    "65 teams": event(teams=[team(rank=i) for i in range(65)]),
    "team not an object": event(teams=[team(rank=1), 2]),
    "unknown team field": teams(team(rank=1, colour="red"), team(rank=2)),
    "no players": teams(team(rank=1), {"rank": 2}),
    "empty team": teams(team(rank=1), team(rank=2, players=[])),
    "257 in one team": teams(team(rank=1, players=[{"id": f"a{i}"} for i in range(257)]), team(rank=2)),
    "unknown player field": teams(team(rank=1, players=[{"id": "a", "nick": "x"}]), team(rank=2)),
    "missing player id": teams(team(rank=1, players=[{"score": 1}]), team(rank=2)),
    "boolean rank": teams(team(rank=True), team(rank=2)),
    "string score": teams(team(score="3"), team(score=1)),
    "mixed rank and score": teams(team(rank=1), team(score=1)),
    "null rank beside a rank": teams(team(rank=1), {"rank": None, "players": [{"id": "b"}]}),
    "neither rank nor score": teams(team(score=1), team(players=[{"id": "b", "score": 1}, {"id": "c"}])),
    "zero weight": teams(team(rank=1, players=[{"id": "a", "weight": 0}]), team(rank=2)),
    "weight above 1": teams(team(rank=1, players=[{"id": "a", "weight": 1.01}]), team(rank=2)),
    "string weight": teams(team(rank=1, players=[{"id": "a", "weight": "0.5"}]), team(rank=2)),
    "zero time": teams(team(rank=1, players=[{"id": "a", "seconds_played": 0}]), team(rank=2)),
    "negative time": teams(team(rank=1, players=[{"id": "a", "seconds_played": -1}]), team(rank=2)),
    "integer rated": teams(team(rank=1, players=[{"id": "a", "rated": 0}]), team(rank=2)),
    "effects not a list": teams(team(rank=1, effects="home"), team(rank=2)),
    "effect twice": teams(team(rank=1, effects=["home", "home"]), team(rank=2)),
    "empty effect": teams(team(rank=1, effects=[""]), team(rank=2)),
    "nine effects": teams(team(rank=1, effects=[f"e{i}" for i in range(9)]), team(rank=2)),
}


@pytest.mark.parametrize("name", VALID)
def test_valid_examples_pass_schema_and_validator(name: str) -> None:
    """Every valid example is accepted by the schema and by parse_match."""
    assert (MATCH.is_valid(VALID[name]), we_accept(VALID[name])) == (True, True)


@pytest.mark.parametrize("name", INVALID)
def test_invalid_examples_fail_schema_and_validator(name: str) -> None:
    """Every invalid example is rejected by the schema and by parse_match alike."""
    assert (MATCH.is_valid(INVALID[name]), we_accept(INVALID[name])) == (False, False)


BEYOND_SCHEMA = {
    "player twice": teams(team(rank=1, players=[{"id": "a"}]), team(rank=2, players=[{"id": "a"}])),
    "257 players in all": teams(
        team(rank=1, players=[{"id": f"a{i}"} for i in range(200)]),
        team(rank=2, players=[{"id": f"b{i}"} for i in range(57)]),
    ),
    "infinite score": teams(team(score=float("inf")), team(score=1)),
    "February 30": event(finished_at="2004-02-30T00:00:00Z"),
    "lone surrogate": event(match_id="m\ud800"),
    "unconfigured ladder": event(ladder="nope"),
    "model switch": event(model="sph-elo"),
    "effects on SPH ladder": event(
        ladder="mw4",
        teams=[
            {"rank": 1, "effects": ["home"], "players": [{"id": "a", "score": 1, "seconds_played": 9}]},
            {"rank": 2, "players": [{"id": "b", "score": 1, "seconds_played": 9}]},
        ],
    ),
    "SPH player without score": event(
        ladder="mw4",
        teams=[
            {"rank": 1, "players": [{"id": "a", "seconds_played": 9}]},
            {"rank": 2, "players": [{"id": "b", "score": 1, "seconds_played": 9}]},
        ],
    ),
}


@pytest.mark.parametrize("name", BEYOND_SCHEMA)
def test_checks_beyond_the_schema_are_the_documented_ones(name: str) -> None:
    """The only events the schema accepts but the service rejects are the kinds its $comment lists."""
    assert (MATCH.is_valid(BEYOND_SCHEMA[name]), we_accept(BEYOND_SCHEMA[name])) == (True, False)


# --- generated events ------------------------------------------------------------------

IDS = st.text(min_size=1, max_size=12)
FINITE = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**15), 10**15)


@st.composite
def rfc3339(draw: st.DrawFn) -> str:
    moment = draw(st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)))
    text = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}{draw(st.sampled_from('Tt '))}"
    text += f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    if moment.microsecond:
        text += f".{moment.microsecond:06d}" + draw(st.text("0123456789", max_size=3))
    offset = draw(st.integers(-(23 * 60 + 59), 23 * 60 + 59))
    if offset == 0 and draw(st.booleans()):
        return text + draw(st.sampled_from("Zz"))
    hours, minutes = divmod(abs(offset), 60)
    return text + f"{'-' if offset < 0 else '+'}{hours:02d}:{minutes:02d}"


@st.composite
def valid_events(draw: st.DrawFn) -> dict[str, Any]:
    """Any match-finished event the contract allows, on one of the test ladders."""
    ladder = draw(st.sampled_from([None, "default", "halo2-ffa", "mw4"]))
    sph = ladder == "mw4"
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=4))
    ids = draw(st.lists(IDS, min_size=sum(sizes), max_size=sum(sizes), unique=True))
    mode = draw(st.sampled_from(["rank", "team score", "player scores"]))
    out_teams = []
    for size in sizes:
        players = []
        for _ in range(size):
            player: dict[str, Any] = {"id": ids.pop()}
            rated = draw(st.sampled_from([None, True, False]))
            if rated is not None:
                player["rated"] = rated
            if draw(st.booleans()):
                player["weight"] = draw(st.floats(0, 1, exclude_min=True) | st.none())
            if mode == "player scores" or (sph and rated is not False) or draw(st.booleans()):
                player["score"] = draw(FINITE)
            if (sph and rated is not False) or draw(st.booleans()):
                player["seconds_played"] = draw(st.floats(0, 1e6, exclude_min=True) | st.integers(1, 10**6))
            players.append(player)
        t: dict[str, Any] = {"players": players}
        if mode == "rank":
            t["rank"] = draw(FINITE)
        if mode == "team score" or (draw(st.booleans()) and mode == "rank"):
            t["score"] = draw(FINITE)
        if not sph and draw(st.booleans()):
            t["effects"] = draw(st.lists(IDS, max_size=3, unique=True))
        out_teams.append(t)
    result: dict[str, Any] = {
        "match_id": draw(IDS),
        "finished_at": draw(rfc3339() | st.floats(-6e10, 2.5e11) | st.integers(-(6 * 10**10), 25 * 10**10)),
        "teams": out_teams,
    }
    if ladder is not None or draw(st.booleans()):
        result["ladder"] = ladder
    if draw(st.booleans()):
        result["model"] = LADDERS.get(ladder or "default").model
    return result


@given(valid_events())
def test_generated_valid_events_pass_schema_and_validator(event: dict[str, Any]) -> None:
    """Any contract-conforming event is accepted by both the schema and parse_match."""
    assert MATCH.is_valid(event)
    assert we_accept(event)


@given(valid_events(), st.sampled_from(FORMATS))
def test_generated_events_round_trip(event: dict[str, Any], fmt: str) -> None:
    """A parsed event's canonical form is schema-valid and survives encode, decode and parse unchanged."""
    match = parse_match(event, LADDERS)
    wire = match.to_dict()
    assert MATCH.is_valid(wire)
    assert parse_match(decode(encode(wire, fmt)), LADDERS) == match


def _break(event: dict[str, Any], how: str, where: int) -> dict[str, Any]:
    """`event` broken in a way the schema can express."""
    broken = copy.deepcopy(event)
    t = broken["teams"][where % len(broken["teams"])]
    p = t["players"][0]
    if how == "drop required":
        owner, key = [(broken, "match_id"), (broken, "finished_at"), (broken, "teams"), (p, "id")][where % 4]
        del owner[key]
    elif how == "unknown field":
        [broken, t, p][where % 3]["surprise"] = 1
    elif how == "boolean number":
        (t if where % 2 else p)["score" if where % 2 else "weight"] = True
    elif how == "bad weight":
        p["weight"] = [0, -0.5, 1.5][where % 3]
    elif how == "bad time":
        p["seconds_played"] = [0, -1][where % 2]
    elif how == "one team":
        broken["teams"] = broken["teams"][:1]
    elif how == "empty team":
        t["players"] = []
    elif how == "mixed ranking":
        ranked = "rank" in broken["teams"][0]
        broken["teams"][0 if ranked else 1].pop("rank", None)
        if ranked:
            broken["teams"][1].setdefault("rank", 1)
        else:
            broken["teams"][0]["rank"] = 1
    elif how == "bad timestamp":
        broken["finished_at"] = ["2004-08-06T18:13:50", "yesterday", 1e12, None][where % 4]
    return broken


BREAKAGES = [
    "drop required",
    "unknown field",
    "boolean number",
    "bad weight",
    "bad time",
    "one team",
    "empty team",
    "mixed ranking",
    "bad timestamp",
]


@given(valid_events(), st.sampled_from(BREAKAGES), st.integers(0, 11))
def test_generated_broken_events_fail_schema_and_validator(
    event: dict[str, Any], how: str, where: int
) -> None:
    """A valid event broken in any schema-expressible way is rejected by both the schema and parse_match."""
    broken = _break(event, how, where)
    assert (MATCH.is_valid(broken), we_accept(broken)) == (False, False)


# --- rating-changed ----------------------------------------------------------------------

CHANGED_INVALID = {
    "missing games": {k: v for k, v in CHANGED_EXAMPLE.items() if k != "games"},
    "unknown field": {**CHANGED_EXAMPLE, "extra": 1},
    "empty player_id": {**CHANGED_EXAMPLE, "player_id": ""},
    "games zero": {**CHANGED_EXAMPLE, "games": 0},
    "games fractional": {**CHANGED_EXAMPLE, "games": 1.5},
    "boolean rating": {**CHANGED_EXAMPLE, "rating": True},
    "negative sigma": {**CHANGED_EXAMPLE, "after": {"mu": 1.0, "sigma": -1.0}},
    "state without sigma": {**CHANGED_EXAMPLE, "after": {"mu": 1.0}},
    "sigma lost": {**CHANGED_EXAMPLE, "after": {"mu": 1.0, "sigma": None}},
    "sigma gained": {**CHANGED_EXAMPLE, "before": {"mu": 1.0, "sigma": None}},
    "naive processed_at": {**CHANGED_EXAMPLE, "processed_at": "2004-08-06T18:13:51"},
    "epoch finished_at": {**CHANGED_EXAMPLE, "finished_at": 1091816030},
    "correction without cause": {**CHANGED_EXAMPLE, "kind": "correction"},
    "cause without correction": {
        **CHANGED_EXAMPLE,
        "correction": {"id": "rerate:1", "reason": "", "voided": [], "unvoided": [], "params": {}},
    },
    "unknown kind": {**CHANGED_EXAMPLE, "kind": "refund"},
    "rating_delta without before.rating": {**CHANGED_EXAMPLE, "before": {"mu": 25.0, "sigma": 8.333}},
    "before.rating without rating_delta": {k: v for k, v in CHANGED_EXAMPLE.items() if k != "rating_delta"},
    "non-numeric before.rating": {**CHANGED_EXAMPLE, "before": {**CHANGED_EXAMPLE["before"], "rating": "0"}},
    "after without rating": {**CHANGED_EXAMPLE, "after": {"mu": 27.6, "sigma": 7.2}},
}
CORRECTION_EXAMPLE = {
    **CHANGED_EXAMPLE,
    "event_id": "rerate:3:p1",
    "match_id": "rerate:3",
    "games": 0,
    "kind": "correction",
    "correction": {
        "id": "rerate:3",
        "reason": "win-trading",
        "voided": ["h2-281884"],
        "unvoided": [],
        "params": {},
    },
}
CHANGED_INVALID["correction voided not ids"] = {
    **CORRECTION_EXAMPLE,
    "correction": {**CORRECTION_EXAMPLE["correction"], "voided": [1]},
}
#: A cross event (a ladder with modes): p1's match in ``duel`` moved their ``ffa`` rating.
CROSS_EXAMPLE = {
    **CHANGED_EXAMPLE,
    "event_id": "h2-281884:ffa@p1",
    "kind": "cross",
    "cross": {"mode": "duel"},
    "mode": "ffa",
}
CHANGED_INVALID["cross without mode"] = {k: v for k, v in CROSS_EXAMPLE.items() if k != "mode"}
CHANGED_INVALID["cross without its cause"] = {k: v for k, v in CROSS_EXAMPLE.items() if k != "cross"}
CHANGED_INVALID["cross on a match event"] = {**CHANGED_EXAMPLE, "cross": {"mode": "duel"}}
CHANGED_INVALID["cross mode not a mode"] = {**CROSS_EXAMPLE, "cross": {"mode": "Duel Mode"}}


def test_rating_changed_example_passes_schema_and_validator() -> None:
    """The README's rating-changed example, its Elo form with null sigmas, and an event stored
    before events carried ``before.rating`` and ``rating_delta`` pass both checks."""
    elo = {
        **CHANGED_EXAMPLE,
        "before": {"mu": 500, "sigma": None, "rating": 500},
        "after": {"mu": 510, "sigma": None, "rating": 510},
        "rating": 510,
        "rating_delta": 10,
    }
    older = {k: v for k, v in CHANGED_EXAMPLE.items() if k != "rating_delta"} | {
        "before": {"mu": 25.0, "sigma": 8.333},
        "after": {"mu": 27.6, "sigma": 7.2},
    }
    for example in (CHANGED_EXAMPLE, elo, CORRECTION_EXAMPLE, older, CROSS_EXAMPLE):
        assert (CHANGED.is_valid(example), we_accept_changed(example)) == (True, True)
    assert RatingChanged.from_dict(CORRECTION_EXAMPLE).to_dict() == CORRECTION_EXAMPLE
    assert RatingChanged.from_dict(CROSS_EXAMPLE).to_dict() == CROSS_EXAMPLE


@pytest.mark.parametrize("name", CHANGED_INVALID)
def test_invalid_rating_changed_fails_schema_and_validator(name: str) -> None:
    """Every invalid rating-changed example is rejected by the schema and by from_dict alike."""
    assert (CHANGED.is_valid(CHANGED_INVALID[name]), we_accept_changed(CHANGED_INVALID[name])) == (
        False,
        False,
    )


@st.composite
def rating_changes(draw: st.DrawFn) -> dict[str, Any]:
    """Any rating-changed event the contract allows."""
    sigma = st.none() if draw(st.booleans()) else st.floats(0, 1e6) | st.integers(0, 10**6)
    state = st.fixed_dictionaries({"mu": FINITE, "sigma": sigma})
    when = st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)).map(
        lambda t: t.isoformat() + "Z"
    )
    text = st.text(min_size=1, max_size=20)
    return draw(
        st.fixed_dictionaries(
            {
                "event_id": text,
                "match_id": text,
                "ladder": text,
                "player_id": text,
                "model": text,
                "before": state,
                "after": state,
                "rating": FINITE,
                "delta": FINITE,
                "games": st.integers(1, 10**9),
                "finished_at": when,
                "processed_at": when,
            },
            optional={"late": st.just(True)},
        )
    )


@given(rating_changes())
def test_generated_rating_changes_pass_schema_and_round_trip(event: dict[str, Any]) -> None:
    """Any contract-conforming rating-changed event passes both checks and survives from_dict/to_dict."""
    assert CHANGED.is_valid(event)
    assert RatingChanged.from_dict(event).to_dict() == event


REQUEST_SCHEMA = load("correction_request")
REQUEST = Draft202012Validator(REQUEST_SCHEMA)

REQUESTS = {
    "void": ({"kind": "void", "ladder": "football", "match_ids": ["m1", "m2"], "reason": "cheater"}, True),
    "unvoid": ({"kind": "unvoid", "ladder": "football", "match_ids": ["m1"], "request_id": "ticket-7"}, True),
    "rerate": ({"kind": "rerate", "ladder": "football", "params": {"beta": 2.5, "dynamics": True}}, True),
    "rerate, no params": ({"kind": "rerate", "ladder": "football"}, True),
    "void, no match": ({"kind": "void", "ladder": "football"}, False),
    "void, empty list": ({"kind": "void", "ladder": "football", "match_ids": []}, False),
    "void with params": ({"kind": "void", "ladder": "l", "match_ids": ["m"], "params": {"beta": 1}}, False),
    "rerate with matches": ({"kind": "rerate", "ladder": "l", "match_ids": ["m"]}, False),
    "unknown kind": ({"kind": "delete", "ladder": "l", "match_ids": ["m"]}, False),
    "no ladder": ({"kind": "rerate"}, False),
    "empty match id": ({"kind": "void", "ladder": "l", "match_ids": [""]}, False),
    "long match id": ({"kind": "void", "ladder": "l", "match_ids": ["x" * 129]}, False),
    "param is a list": ({"kind": "rerate", "ladder": "l", "params": {"beta": [1]}}, False),
    "unknown field": ({"kind": "rerate", "ladder": "l", "force": True}, False),
    "reason not text": ({"kind": "rerate", "ladder": "l", "reason": 3}, False),
    "not an object": (["rerate"], False),
}


def we_accept_request(request: Any) -> bool:
    try:
        CorrectionRequest.from_dict(request)
    except ValidationError:
        return False
    return True


def test_correction_request_schema_is_valid_and_has_the_dataclass_fields() -> None:
    """The correction-request schema ships beside the others and allows the dataclass's fields."""
    Draft202012Validator.check_schema(REQUEST_SCHEMA)
    assert set(REQUEST_SCHEMA["properties"]) == {f.name for f in fields(CorrectionRequest)}


@pytest.mark.parametrize("name", REQUESTS)
def test_correction_request_examples_agree_with_the_schema(name: str) -> None:
    """Schema and validator accept and refuse the same requests; accepted ones round-trip."""
    request, valid = REQUESTS[name]
    assert REQUEST.is_valid(request) is valid
    assert we_accept_request(request) is valid
    if valid:
        assert CorrectionRequest.from_dict(request).to_dict() == request


@given(
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["void", "unvoid", "rerate", "other"]), "ladder": st.text(max_size=3)},
        optional={
            "match_ids": st.lists(st.text(max_size=3), max_size=2),
            "params": st.dictionaries(
                st.text(max_size=3), st.integers() | st.text(max_size=2) | st.none(), max_size=2
            ),
            "reason": st.text(max_size=3) | st.integers(),
        },
    )
)
def test_generated_correction_requests_get_the_same_verdict(request: dict[str, Any]) -> None:
    """On generated requests the schema and the validator agree."""
    assert REQUEST.is_valid(request) is we_accept_request(request)
