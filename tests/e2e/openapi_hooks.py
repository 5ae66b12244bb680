"""Schemathesis hooks of `test_openapi_contract` (loaded by the CLI through ``SCHEMATHESIS_HOOKS``).

Some rules of the read API cannot be stated in JSON Schema, so a request the schema allows may
break them and is rightly answered 400, as ``openapi.yaml`` documents: a player on two teams
(``predict``), team sizes that do not add up to the players (``balance``), parties naming a
player not in the query or one twice, or that fit in no split (``balance``), and a season that has
not ended (``leaderboard?season=N``; the test's ladders have had no season start, so every
season asked for is one), and ``around`` together with ``top`` or ``season``. The test's configuration lets those operations answer schema-valid
data with 400, and the check here keeps that narrow: such a 400 must come with a request that
really breaks the rule (positive ``predict`` and ``balance`` bodies are first made to keep
their rules, `positive_bodies_keep_the_unstated_rules`, lest a phase see them all refused).
Likewise ``leaderboard?around=P`` answers 404 for a player the ladder
has never seen (schemathesis makes up ids): such a 404 must say so; and 304 only to an
``If-None-Match`` that names the answer's ETag (or is ``*``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import schemathesis


def _player_on_two_teams(case: Any) -> bool:
    everyone = [player for team in case.body["teams"] for player in team]
    return len(set(everyone)) != len(everyone) or _bad_parties(case.body.get("parties"), everyone)


def _sizes_not_adding_up(case: Any) -> bool:
    sizes, players, parties = case.body["team_sizes"], case.body["players"], case.body.get("parties")
    return sum(sizes) != len(players) or _bad_parties(parties, players) or not _fits(parties or [], sizes)


def _bad_parties(parties: Any, players: list[str]) -> bool:
    """Parties naming a player not in the query, or one player twice."""
    named = [player for party in parties or [] for player in party]
    return bool(set(named) - set(players)) or len(set(named)) != len(named)


def _fits(parties: list[list[str]], sizes: list[int]) -> bool:
    """Whether every party can sit whole in one team of `sizes` (brute force)."""
    if not parties:
        return True
    first, rest = parties[0], parties[1:]
    for i, size in enumerate(sizes):
        if size >= len(first) and _fits(rest, [*sizes[:i], size - len(first), *sizes[i + 1 :]]):
            return True
    return False


def _season_not_ended_or_around_with_top(case: Any) -> bool:
    query = case.query or {}
    return "season" in query or ("around" in query and "top" in query)


def _before_without_an_archive(case: Any) -> bool:
    """``before`` pages the archive's history; the contract test's server has no archive."""
    return "before" in (case.query or {})


#: Path suffix → the unstated rule a schema-valid request to it may break.
UNSTATED_RULES: dict[str, Callable[[Any], bool]] = {
    "/players/{player}": _before_without_an_archive,
    "/predict": _player_on_two_teams,
    "/balance": _sizes_not_adding_up,
    "/leaderboard": _season_not_ended_or_around_with_top,
}


@schemathesis.hook("map_case")
def positive_bodies_keep_the_unstated_rules(context: Any, case: Any) -> Any:
    """Schema-valid bodies drawn at random often break the rules JSON Schema cannot state, so a
    phase could see every positive ``predict`` or ``balance`` request refused: a schemathesis
    warning, which fails the run (stop 63's CI, seed 333927198976568907046341754918550338876:
    ``balance`` of one player into two teams, over and over; ``predict`` shrinks to
    ``[["0"], ["0"]]`` as readily). So a positive case is made to keep them: a player on a
    second team renamed; the pool padded with new ids up to one per team and the sizes spread
    over it; each drawn party replaced by as many of the query's players, while it fits a team
    (any team, for ``predict``). tests/unit/service/test_query_api.py has the 400s of those
    rules, and `refuses_only_unstated_rules` still checks every 400 here."""
    body = case.body
    if case.meta is None or not case.meta.generation.mode.is_positive or not isinstance(body, dict):
        return case
    if case.path.endswith("/predict") and _lists(body.get("teams")):
        case.body = {**body, "teams": _distinct(body["teams"])}
        players = [player for team in case.body["teams"] for player in team]
        sizes = [len(players)]
    elif case.path.endswith("/balance") and _lists(body.get("team_sizes"), body.get("players")):
        teams = len(body["team_sizes"])
        pool, pads = _distinct([body["players"], ["pad"] * teams])
        players = pool + pads[: teams - len(pool)]
        sizes = [len(players) // teams + (i < len(players) % teams) for i in range(teams)]
        case.body = {**body, "players": players, "team_sizes": sizes}
    else:
        return case
    if isinstance(body.get("parties"), list):
        case.body["parties"] = _fitting_parties(body["parties"], players, sizes)
    return case


def _lists(*values: Any) -> bool:
    """Whether every value is a list, the first of two items or more."""
    return all(isinstance(value, list) for value in values) and len(values[0]) >= 2


def _distinct(groups: list[list[str]]) -> list[list[str]]:
    """`groups` with every id already taken by an earlier place renamed (a dash appended)."""
    taken: set[str] = set()
    renamed: list[list[str]] = []
    for group in groups:
        renamed.append([])
        for player in group:
            while player in taken:
                player += "-"
            taken.add(player)
            renamed[-1].append(player)
    return renamed


def _fitting_parties(parties: list[Any], players: list[str], sizes: list[int]) -> list[list[str]]:
    """Parties of the drawn parties' sizes made of `players`, each put in the first team it
    fits (one that fits none is left out), so they always fit a split of `sizes`."""
    room, pool, fitted = list(sizes), iter(players), []
    for party in parties:
        team = next((i for i, left in enumerate(room) if left >= len(party)), None)
        if party and team is not None:
            room[team] -= len(party)
            fitted.append([next(pool) for _ in party])
    return fitted


@schemathesis.check
def refuses_only_unstated_rules(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 400 to schema-valid data must be for breaking the operation's unstated rule."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 400:
        return None
    rule = next((rule for suffix, rule in UNSTATED_RULES.items() if case.path.endswith(suffix)), None)
    if rule is None or not rule(case):
        raise AssertionError(f"schema-valid request refused: {response.text}")
    return None


@schemathesis.check
def not_found_only_for_an_unknown_player(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 404 to schema-valid data from the leaderboard must be ``around`` a player the ladder
    has never seen (a history or a match the ladder has no trace of is 404 as documented), or
    for a ``mode`` the ladder does not have — the only 404 of players, predict, balance and
    quality."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 404:
        return None
    if "mode" in (case.query or {}) and response.json().get("error", "").startswith("mode: "):
        return None  # a mode of a ladder without modes (issue 48), documented as 404
    if case.path.endswith(("/players", "/predict", "/balance", "/quality")):
        raise AssertionError(f"schema-valid request not found: {response.text}")
    if not case.path.endswith("/leaderboard"):
        return None
    around = (case.query or {}).get("around")
    if (
        around is None
        or response.json().get("error", "")
        != f"{around} has not played on ladder {case.path_parameters['ladder']!r}"
    ):
        raise AssertionError(f"schema-valid request not found: {response.text}")
    return None


@schemathesis.check
def not_modified_only_for_its_etag(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 304 (leaderboard) must answer an ``If-None-Match`` naming the answer's ETag, or ``*``."""
    if response.status_code != 304:
        return None
    asked = {
        tag.strip().removeprefix("W/") for tag in (case.headers or {}).get("If-None-Match", "").split(",")
    }
    if not ({"*", response.headers.get("ETag")} & asked):
        raise AssertionError(
            f"304 to If-None-Match {asked!r}, the ETag being {response.headers.get('ETag')!r}"
        )
    return None
