"""What a read-API request names, checked: the ladder, player ids, teams, parties, the
sizes of a read; and the errors a read answers with (`QueryError` and its HTTP status)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.rules import party_effects
from stream_rater.contracts.match import Player

#: Rows a leaderboard read returns unless asked otherwise.
LEADERBOARD_TOP = 25
#: Most rows one leaderboard read returns.
MAX_LEADERBOARD_TOP = 500
#: Rows above and below the player an around-me read returns unless asked otherwise, and at most.
AROUND_N = 5
MAX_AROUND_N = 100


class QueryError(ValueError):
    """A query that cannot be answered; `status` is its HTTP status."""

    status = 400


class UnknownLadder(QueryError):
    status = 404


class TooManyPlayers(QueryError):
    status = 413


class UnknownPlayer(QueryError):
    """A player the ladder has never seen, where only a known one can be answered."""

    status = 404


class NotRanked(QueryError):
    """A known player the ladder's eligibility rules leave off the leaderboard."""

    status = 409


def ladder_of(ladders: Ladders, name: str) -> Ladder:
    """The configured ladder `name` or shadow (``<ladder>~<shadow>``: `Ladders.lookup`), or
    `UnknownLadder`."""
    try:
        return ladders.lookup(name)
    except KeyError as exc:
        raise UnknownLadder(str(exc)) from None


def player_ids(value: Any, field: str, limit: int) -> list[str]:
    """A JSON array of distinct player-id strings (at most `limit`), or `QueryError` naming the field."""
    if not isinstance(value, list) or not value:
        raise QueryError(f"{field}: must be a non-empty array of player ids")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise QueryError(f"{field}[{i}]: must be a non-empty string")
    if len(value) > limit:
        raise TooManyPlayers(f"{field}: {len(value)} players, at most {limit} per query")
    if len(set(value)) != len(value):
        twice = next(p for p, n in Counter(value).items() if n > 1)
        raise QueryError(f"{field}: names {twice!r} twice")
    return list(value)


def whole_number(value: Any) -> int:
    """`value` as an integer: an int (not a bool) or a string of ASCII decimal digits (from a
    URL); -1 for anything else. Python's ``int`` of a string also takes whitespace, a sign,
    underscores and other scripts' digits, which the API's integer parameters do not."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return -1


def top_of(value: Any) -> int:
    """``top``: an integer (or its decimal string, from a URL) from 1 to `MAX_LEADERBOARD_TOP`."""
    top = whole_number(value)
    if not 1 <= top <= MAX_LEADERBOARD_TOP:
        raise QueryError(f"top: must be an integer from 1 to {MAX_LEADERBOARD_TOP}")
    return top


def limit_of(value: Any, field: str, default: int, maximum: int) -> int:
    """A positive integer (or its decimal string, from a URL), capped at `maximum`; `default`
    (capped too) when absent."""
    if value is None:
        return min(default, maximum)
    limit = whole_number(value)
    if limit < 1:
        raise QueryError(f"{field}: must be a positive integer")
    return min(limit, maximum)


def n_of(value: Any) -> int:
    """``n``: an integer (or its decimal string, from a URL) from 0 to `MAX_AROUND_N`."""
    n = whole_number(value)
    if not 0 <= n <= MAX_AROUND_N:
        raise QueryError(f"n: must be an integer from 0 to {MAX_AROUND_N}")
    return n


def teams_of(value: Any, limit: int) -> list[list[str]]:
    """``teams``: an array of 2+ arrays of player ids, no player twice, at most `limit` in all."""
    if not isinstance(value, list) or len(value) < 2:
        raise QueryError("teams: must be an array of at least two teams")
    teams = [player_ids(team, f"teams[{i}]", limit) for i, team in enumerate(value)]
    everyone = [p for team in teams for p in team]
    if len(everyone) > limit:
        raise TooManyPlayers(f"teams: {len(everyone)} players, at most {limit} per query")
    team_of: dict[str, int] = {}
    for i, team in enumerate(teams):
        for p in team:
            if team_of.setdefault(p, i) != i:
                raise QueryError(f"teams[{i}]: player {p!r} is on two teams (also teams[{team_of[p]}])")
    return teams


def parties_of(value: Any, players: Sequence[str], limit: int) -> list[list[str]]:
    """``parties``: absent/null, or an array of arrays of ids of `players` who queued
    together (a premade party each; at most `limit` ids each), no player in two parties; else
    `QueryError`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise QueryError("parties: must be an array of arrays of player ids")
    parties = [player_ids(party, f"parties[{i}]", limit) for i, party in enumerate(value)]
    known, seen = set(players), set()
    for i, party in enumerate(parties):
        for p in party:
            if p not in known:
                raise QueryError(f"parties[{i}]: {p!r} is not one of the players")
            if p in seen:
                raise QueryError(f"parties[{i}]: {p!r} is in two parties")
            seen.add(p)
    return parties


def party_effect_names(
    ladder: Ladder, teams: Sequence[Sequence[str]], parties: Sequence[Sequence[str]]
) -> list[list[str]]:
    """Per team, the ``party:<size>`` effects the ladder's ``party_effects`` rule gives it
    (none when the rule is off), as rating the match would (`config.rules.party_effects`)."""
    if not ladder.rules.party_effects:
        return [[] for _ in teams]
    label = {p: str(i) for i, party in enumerate(parties) for p in party}
    return [party_effects(Player(p, party=label.get(p)) for p in team) for team in teams]


def season_of(value: Any, ended: int) -> int:
    """``season``: the number (or its decimal string, from a URL) of an ended season."""
    try:
        season = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else 0
    except ValueError:
        season = 0
    if not 1 <= season <= ended:
        raise QueryError(
            f"season: must be an ended season of the ladder, from 1 to {ended}"
            if ended
            else "season: the ladder has had no season start yet (only the current season exists)"
        )
    return season


def team_arguments(arguments: Sequence[str]) -> list[list[str]]:
    """CLI teams: one argument per team, player ids joined by commas."""
    return [[p for p in argument.split(",") if p] for argument in arguments]
