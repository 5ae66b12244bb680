"""The full validation of `parse_match`: any match-finished or season-start record, and
every error, named by its field path (``teams[1].players[0].seconds_played: must be > 0``)."""

from __future__ import annotations

from typing import Any, NoReturn

from stream_rater.contracts._checks import (
    ValidationError,
    _fail,
    _finite,
    _kind,
    _no_unknown,
    _optional_finite,
    _required,
    _show,
    _string,
    _within,
)
from stream_rater.contracts._match_fast import PLAIN_FIELDS
from stream_rater.contracts._match_limits import LadderRules, LadderTable, Limits
from stream_rater.contracts._match_types import DEFAULT_LADDER, MatchFinished, Player, SeasonStart, Team
from stream_rater.contracts.modes import mode_problem
from stream_rater.contracts.timestamps import _timestamp

_MATCH_FIELDS = PLAIN_FIELDS | {"rated", "duration", "mode"}

_SEASON_FIELDS = frozenset({"kind", "match_id", "ladder", "finished_at", "params"})

#: The parameters a season-start record may override (`config.rules`).
SEASON_OVERRIDES = ("season_shrink", "season_sigma")


def _parse_any(obj: Any, ladders: LadderTable, limits: Limits) -> MatchFinished:
    """`parse_match` of any event (and of every error), fields checked in wire order."""
    if not isinstance(obj, dict):
        _fail("event", f"must be an object, got {_kind(obj)}")
    if "kind" in obj:
        return _season_start(obj, ladders, limits)
    _no_unknown(obj, _MATCH_FIELDS, "")
    match_id = _string(_required(obj, "match_id", ""), "", "match_id", limits.max_id_length)
    name, ladder = _ladder(obj, ladders, limits.max_id_length)
    model = obj.get("model")
    if model is not None and model != ladder.model:
        _string(model, "", "model", limits.max_id_length)
        _fail(
            "model",
            f"ladder {name!r} uses model {ladder.model!r}, the event says {model!r}; "
            "an event may not switch a ladder's model",
        )
    mode = _mode(obj.get("mode"), name, ladder)
    finished_at = _timestamp(_required(obj, "finished_at", ""), "finished_at")
    teams = _teams(_required(obj, "teams", ""), ladder, limits)
    _check_ranking(teams)
    rated = _rated(obj)
    duration = _optional_finite(obj, "duration")
    if duration is not None and duration < 0.0:
        _fail("duration", "must be >= 0")
    return MatchFinished(match_id, name, finished_at, tuple(teams), rated, duration, mode=mode)


def _mode(value: Any, name: str, ladder: LadderRules) -> str | None:
    """The match's mode (`contracts.modes`): the one it names, which its ladder declares, or
    the ladder's default mode; None on a ladder without modes."""
    modes = ladder.modes
    if value is None:
        if modes and ladder.default_mode is None:
            _fail("mode", f"ladder {name!r} has modes ({', '.join(modes)}) and no default mode: name one")
        return ladder.default_mode if modes else None
    problem = mode_problem(value)
    if problem is not None:
        _fail("mode", f"{problem}, got {_show(value) if isinstance(value, str) else _kind(value)}")
    if not modes:
        _fail("mode", f"ladder {name!r} has no modes, the event says {value!r}")
    if value not in modes:
        _fail("mode", f"ladder {name!r} has no mode {value!r} (its modes: {', '.join(modes)})")
    return str(value)


def _ladder(obj: dict[str, Any], ladders: LadderTable, id_limit: int) -> tuple[str, LadderRules]:
    """The event's ladder name (default `DEFAULT_LADDER`) and its configuration."""
    name = obj.get("ladder")
    if name is None:
        name = DEFAULT_LADDER
    else:
        _string(name, "", "ladder", id_limit)
    try:
        return name, ladders.get(name)
    except KeyError as e:  # config's UnknownLadderError
        _fail("ladder", str(e))


def _rated(obj: dict[str, Any]) -> bool:
    """The optional ``rated`` flag of an event or a player (default True)."""
    rated = obj.get("rated")
    if rated is None:
        return True
    if type(rated) is not bool:
        _fail("rated", f"must be a boolean, got {_kind(rated)}")
    return rated


def _teams(raw_teams: Any, ladder: LadderRules, limits: Limits) -> list[Team]:
    """The event's teams: 2 to ``max_teams``, no player twice, ``max_players`` in all."""
    if not isinstance(raw_teams, list):
        _fail("teams", f"must be an array, got {_kind(raw_teams)}")
    if len(raw_teams) < 2:
        _fail("teams", f"needs at least 2 teams, got {len(raw_teams)}")
    if len(raw_teams) > limits.max_teams:
        _fail("teams", f"has {len(raw_teams)} teams, limit {limits.max_teams}")
    scored_by = ladder if ladder.model_class.needs_scores else None
    teams = []
    ids: set[str] = set()
    listed = 0
    for i, raw in enumerate(raw_teams):
        try:
            team = _team(raw, ladder, limits, scored_by)
        except ValidationError as e:
            _within(f"teams[{i}]", e)
        teams.append(team)
        for player in team.players:
            ids.add(player.id)
        listed += len(team.players)
        if len(ids) != listed:
            _fail_duplicate(teams)
        if listed > limits.max_players:
            _fail("teams", f"have more than {limits.max_players} players in all")
    return teams


def _season_start(obj: dict[str, Any], ladders: LadderTable, limits: Limits) -> MatchFinished:
    """A season-start record: ``{"kind": "season", "match_id", "ladder", "finished_at",
    "params"?}`` (``params``: ``season_shrink`` from 0 to 1, ``season_sigma`` >= 0)."""
    kind = obj["kind"]
    if kind != "season":
        _fail("kind", f"must be 'season' on the matches topic (a match has no kind), got {_show(kind)}")
    _no_unknown(obj, _SEASON_FIELDS, "")
    match_id = _string(_required(obj, "match_id", ""), "", "match_id", limits.max_id_length)
    name, _ = _ladder(obj, ladders, limits.max_id_length)
    finished_at = _timestamp(_required(obj, "finished_at", ""), "finished_at")
    raw = obj.get("params")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        _fail("params", f"must be an object, got {_kind(raw)}")
    params = []
    for key in sorted(raw):
        if key not in SEASON_OVERRIDES:
            _fail(f"params.{key}", f"is not a season parameter (allowed: {', '.join(SEASON_OVERRIDES)})")
        value = _finite(raw[key], "params", key)
        if value < 0.0 or (key == "season_shrink" and value > 1.0):
            _fail(
                f"params.{key}", "must be a number from 0 to 1" if key == "season_shrink" else "must be >= 0"
            )
        params.append((key, value))
    return MatchFinished(match_id, name, finished_at, (), season=SeasonStart(tuple(params)))


_TEAM_FIELDS = frozenset({"players", "rank", "score", "effects"})


_PLAYER_FIELDS = frozenset({"id", "weight", "score", "seconds_played", "rated", "party"})


def _describe(ladder: LadderRules) -> str:
    return f"ladder {ladder.name!r} (model {ladder.model!r})"


def _team(value: Any, ladder: LadderRules, limits: Limits, scored_by: LadderRules | None) -> Team:
    """One team; error paths relative to it. `scored_by` as for `_player`."""
    if not isinstance(value, dict):
        _fail("", f"must be an object, got {_kind(value)}")
    _no_unknown(value, _TEAM_FIELDS, "")
    rank = _optional_finite(value, "rank")
    score = _optional_finite(value, "score")
    effects = value.get("effects")
    effects = () if effects is None else _effects(effects, "effects", ladder, limits)
    raw_players = _required(value, "players", "")
    if not isinstance(raw_players, list):
        _fail("players", f"must be an array, got {_kind(raw_players)}")
    if not raw_players:
        _fail("players", "needs at least 1 player")
    if len(raw_players) > limits.max_players:
        _fail("players", f"has {len(raw_players)} players, limit {limits.max_players}")
    id_limit = limits.max_id_length
    players = []
    for j, raw in enumerate(raw_players):
        try:
            players.append(_player(raw, id_limit, scored_by))
        except ValidationError as e:
            _within(f"players[{j}]", e)
    return Team(tuple(players), rank, score, effects)


def _effects(value: Any, path: str, ladder: LadderRules, limits: Limits) -> tuple[str, ...]:
    if not isinstance(value, list):
        _fail(path, f"must be an array, got {_kind(value)}")
    if not value:
        return ()
    if not ladder.model_class.supports_effects:
        _fail(path, f"{_describe(ladder)} does not support effects")
    if len(value) > limits.max_effects:
        _fail(path, f"has {len(value)} effects, limit {limits.max_effects}")
    names = tuple([_string(e, path, i, limits.max_id_length) for i, e in enumerate(value)])
    if len(set(names)) != len(names):
        i = next(i for i, e in enumerate(names) if e in names[:i])
        _fail(f"{path}[{i}]", f"effect {_show(names[i])} is listed twice")
    return names


def _player(value: Any, id_limit: int, scored_by: LadderRules | None) -> Player:
    """One player, error paths relative to it; `scored_by` is the ladder when its model
    needs scores, else None."""
    if not isinstance(value, dict):
        _fail("", f"must be an object, got {_kind(value)}")
    _no_unknown(value, _PLAYER_FIELDS, "")
    pid = _string(_required(value, "id", ""), "", "id", id_limit)
    if len(value) == 1 and scored_by is None:  # just an id: every other field at its default
        return Player(pid)
    weight = _optional_finite(value, "weight")
    if weight is None:
        weight = 1.0
    elif not 0.0 < weight <= 1.0:
        _fail("weight", "must be > 0 and <= 1")
    score = _optional_finite(value, "score")
    seconds = _optional_finite(value, "seconds_played")
    if seconds is not None and seconds <= 0.0:
        _fail("seconds_played", "must be > 0")
    rated = _rated(value)
    party = value.get("party")
    if party is not None:
        party = _string(party, "", "party", id_limit)
    if scored_by is not None and rated:
        if score is None:
            _fail("score", f"is required by {_describe(scored_by)}")
        if seconds is None:
            _fail("seconds_played", f"is required by {_describe(scored_by)}")
    return Player(pid, weight, score, seconds, rated, party)


def _fail_duplicate(teams: list[Team]) -> NoReturn:
    """Name the first player listed twice in `teams` and where it was listed first."""
    seen: dict[str, tuple[int, int]] = {}
    for i, team in enumerate(teams):
        for j, player in enumerate(team.players):
            first = seen.get(player.id)
            if first is not None:
                _fail(
                    f"teams[{i}].players[{j}].id",
                    f"player {_show(player.id)} is already listed at teams[{first[0]}].players[{first[1]}]",
                )
            seen[player.id] = (i, j)
    raise AssertionError("no player is listed twice")


def _check_ranking(teams: list[Team]) -> None:
    """All teams give a rank, or none does and each has a score (its own or one for
    every player)."""
    ranked = teams[0].rank is not None
    for i, team in enumerate(teams):
        if (team.rank is not None) != ranked:
            missing, given = (i, 0) if ranked else (0, i)
            _fail(
                f"teams[{missing}].rank",
                f"is missing but teams[{given}] has one (all teams give a rank, or none does)",
            )
        if not ranked and team.score is None and any(p.score is None for p in team.players):
            _fail(f"teams[{i}]", "needs a rank or a score (or a score for every player)")
