"""The fast path of `parse_match`: the common shape of a match-finished event, validated
without the bookkeeping that names a field, and built slot by slot."""

from __future__ import annotations

import functools
from dataclasses import fields
from typing import Any, TypeGuard

from stream_rater.contracts._checks import _EXACT_INT, ValidationError
from stream_rater.contracts._match_limits import LadderTable, Limits
from stream_rater.contracts._match_types import DEFAULT_LADDER, MatchFinished, Player, Team
from stream_rater.contracts.timestamps import _timestamp

#: The only fields of an event the fast path takes.
PLAIN_FIELDS = frozenset({"match_id", "ladder", "finished_at", "teams", "model"})


def _parse_plain(obj: Any, ladders: LadderTable, limits: Limits) -> MatchFinished | None:
    """`parse_match` of the common shape at half the cost, or None for anything else.

    The shape: no fields but ``match_id``, ``ladder``, ``model`` (the ladder's) and
    ``finished_at``; ``teams`` of exactly ``rank`` and ``players``; players of just an
    ``id``; ASCII ids; a ladder whose model needs no scores and that has no modes. It checks the same rules as
    `_match_parse._parse_any` (which accepts such an event with an equal result), without the
    bookkeeping that names a field; it never raises, so `_parse_any` reports every error.
    """
    if type(obj) is not dict or not PLAIN_FIELDS.issuperset(obj):
        return None
    id_limit = limits.max_id_length
    match_id = obj.get("match_id")
    name = obj.get("ladder")
    if name is None:
        name = DEFAULT_LADDER
    if not (_is_plain_id(match_id, id_limit) and _is_plain_id(name, id_limit)):
        return None
    ladder = ladders.get(name, None)
    if ladder is None or ladder.model_class.needs_scores or ladder.modes:
        return None
    model = obj.get("model")
    if model is not None and model != ladder.model:
        return None
    try:
        finished_at = _timestamp(obj.get("finished_at"), "finished_at")
    except ValidationError:
        return None
    teams = _plain_teams(obj.get("teams"), limits)
    return None if teams is None else _new_match(match_id, name, finished_at, teams)


def _plain_teams(raw_teams: Any, limits: Limits) -> tuple[Team, ...] | None:
    """The teams of `_parse_plain`'s shape (rank and players of just an id), or None."""
    id_limit = limits.max_id_length
    if type(raw_teams) is not list or not 2 <= len(raw_teams) <= limits.max_teams:
        return None
    teams = []
    ids: set[str] = set()
    listed = 0
    for raw in raw_teams:
        if type(raw) is not dict or len(raw) != 2:
            return None
        rank = raw.get("rank")
        if type(rank) is int and -_EXACT_INT <= rank <= _EXACT_INT:
            rank = float(rank)
        elif type(rank) is not float or rank - rank != 0.0:  # not a finite number
            return None
        raw_players = raw.get("players")
        if type(raw_players) is not list or not raw_players:
            return None
        players = []
        for raw_player in raw_players:
            if type(raw_player) is not dict or len(raw_player) != 1:
                return None
            pid = raw_player.get("id")
            if not (type(pid) is str and 0 < len(pid) <= id_limit and pid.isascii()):  # `_is_plain_id`
                return None
            ids.add(pid)
            players.append(_new_player(pid))
        listed += len(players)
        teams.append(_new_team(tuple(players), rank))
    if len(ids) != listed or listed > limits.max_players:  # a player listed twice, or too many
        return None
    return tuple(teams)


_new_object = object.__new__


_PLAYER_SLOTS, _TEAM_SLOTS, _MATCH_SLOTS = (
    tuple(cls.__dict__[f.name].__set__ for f in fields(cls)) for cls in (Player, Team, MatchFinished)
)


@functools.lru_cache(maxsize=1 << 16)
def _new_player(pid: str) -> Player:
    """``Player(pid)``, built through the slots; kept for the player's next matches (they are
    frozen, and players recur: a hit costs about a seventh of a build)."""
    player = _new_object(Player)
    set_id, set_weight, set_score, set_seconds_played, set_rated, set_party = _PLAYER_SLOTS
    set_id(player, pid)
    set_weight(player, 1.0)
    set_score(player, None)
    set_seconds_played(player, None)
    set_rated(player, True)
    set_party(player, None)
    return player


def _new_team(players: tuple[Player, ...], rank: float) -> Team:
    """``Team(players, rank)``, built through the slots."""
    team = _new_object(Team)
    set_players, set_rank, set_score, set_effects = _TEAM_SLOTS
    set_players(team, players)
    set_rank(team, rank)
    set_score(team, None)
    set_effects(team, ())
    return team


def _new_match(match_id: str, ladder: str, finished_at: float, teams: tuple[Team, ...]) -> MatchFinished:
    """``MatchFinished(match_id, ladder, finished_at, teams)``, built through the slots."""
    match = _new_object(MatchFinished)
    set_match_id, set_ladder, set_finished_at, set_teams, set_rated, set_duration, set_season, set_mode = (
        _MATCH_SLOTS
    )
    set_match_id(match, match_id)
    set_ladder(match, ladder)
    set_finished_at(match, finished_at)
    set_teams(match, teams)
    set_rated(match, True)
    set_duration(match, None)
    set_season(match, None)
    set_mode(match, None)
    return match


def _is_plain_id(value: Any, limit: int) -> TypeGuard[str]:
    """An ASCII string that `_string` accepts."""
    return type(value) is str and 0 < len(value) <= limit and value.isascii()
