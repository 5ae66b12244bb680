"""The match-finished event (topic ``matches``) as frozen dataclasses, its Kafka key, and the
validation that turns a decoded object into a `MatchFinished`.

Validation is hand-written (no jsonschema at run time) so that it stays fast on the hot
path, and every error names the field path and the reason, e.g.
``teams[1].players[0].seconds_played: must be > 0``. The JSON Schemas in
``stream_rater/contracts/schemas`` describe the same contract for other languages; a test keeps
the two in step.

Choices where the README's event contracts leave room:

- An optional field given as ``null`` means the same as leaving it out (Jackson and
  friends write nulls by default); a required field given as ``null`` is an error.
- All teams give a ``rank`` or none does. A ranked team may also carry a ``score``,
  which is kept but does not decide the order. Without ranks, each team needs a
  ``score`` or a score for every one of its players.
- Teams ranked by score get competition ranks (scores 9, 5, 5, 1 → ranks 1, 2, 2, 4).
- ``finished_at`` strings are RFC 3339 date-times with ``Z`` or a numeric offset
  (``T``, ``t`` or a space between date and time); digits past the microsecond are
  truncated; leap seconds (``:60``) are rejected. Times are kept as float epoch seconds
  rounded to the microsecond and must lie in years 0001–9999 (UTC).
- ``weight`` is accepted on every ladder; models that do not use it ignore it.
- Effect names follow the id rules (non-empty, at most ``max_id_length`` characters).
- Strings that are not valid Unicode (a lone surrogate from a JSON ``\\ud800`` escape)
  are rejected, since they could not be written to Kafka or Redis later.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NoReturn, Protocol, TypeGuard, overload

from stream_rater.contracts._checks import (
    _EXACT_INT,
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
from stream_rater.contracts.timestamps import _timestamp, format_timestamp

#: The ladder of an event that names none.
DEFAULT_LADDER = "default"


class LadderRules(Protocol):
    """What validation needs of a configured ladder (`config.ladders.Ladder` is one)."""

    @property
    def name(self) -> str:
        """The ladder's name."""

    @property
    def model(self) -> str:
        """Its model's name."""

    @property
    def model_class(self) -> Any:
        """The model's class: its ``needs_scores`` and ``supports_effects`` flags."""


class LadderTable(Protocol):
    """The configured ladders (`config.ladders.Ladders` is one): `get` raises a `KeyError`
    whose text says which ladders exist, or returns `default` (only None is passed)."""

    @overload
    def get(self, name: str) -> LadderRules: ...

    @overload
    def get(self, name: str, default: None) -> LadderRules | None: ...


@dataclass(frozen=True)
class Limits:
    """Size limits on one match-finished event (string lengths in characters)."""

    max_event_bytes: int = 64 * 1024
    max_teams: int = 64
    max_players: int = 256
    max_id_length: int = 128
    max_effects: int = 8


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Player:
    """One player of a team; `score` and `seconds_played` feed SPH Elo, `weight` TrueSkill."""

    id: str
    weight: float = 1.0
    score: float | None = None
    seconds_played: float | None = None
    rated: bool = True


@dataclass(frozen=True, slots=True)
class Team:
    """One team: its players, its `rank` (lower is better) or `score`, and context effects."""

    players: tuple[Player, ...]
    rank: float | None = None
    score: float | None = None
    effects: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SeasonStart:
    """A season-start control record: from its place in the ladder's order on, a new season
    of the ladder runs, and every player's state is pulled toward the prior once
    (`config.rules`); `params` overrides the ladder's ``season_shrink`` / ``season_sigma``."""

    params: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class MatchFinished:
    """A validated match-finished event; `finished_at` in epoch seconds (UTC).

    `rated` False (``"rated": false`` on the wire) declares the match unrated: it is recorded
    once and changes nothing. `duration` (seconds) is optional and feeds the ladder's
    ``min_duration`` rule. A record of the matches topic that starts a season is read as a
    `MatchFinished` without teams whose `season` is set: it takes its place in the ladder's
    order like a match, and ``match_id`` is its idempotency key."""

    match_id: str
    ladder: str
    finished_at: float
    teams: tuple[Team, ...]
    rated: bool = True
    duration: float | None = None
    season: SeasonStart | None = None

    def ranks(self) -> list[float]:
        """One rank per team, lower is better, equal ranks are a draw.

        The teams' ranks if they give them; otherwise competition ranks from the team
        scores (higher is better; a team's score defaults to the sum of its players').
        """
        ranks = [t.rank for t in self.teams]
        if None not in ranks:
            return ranks  # type: ignore[return-value]  # (no None in it)
        scores = [_team_score(t) for t in self.teams]
        descending = sorted(scores, reverse=True)
        return [float(descending.index(s) + 1) for s in scores]

    def to_dict(self) -> dict[str, Any]:
        """The canonical wire form: defaults left out, integral numbers as ints,
        `finished_at` as an RFC 3339 ``Z`` string; `parse_match` turns it back into `self`."""
        if self.season is not None:
            wire: dict[str, Any] = {
                "kind": "season",
                "match_id": self.match_id,
                "ladder": self.ladder,
                "finished_at": format_timestamp(self.finished_at),
            }
            if self.season.params:
                wire["params"] = {k: _number(v) for k, v in self.season.params}
            return wire
        wire = {
            "match_id": self.match_id,
            "ladder": self.ladder,
            "finished_at": format_timestamp(self.finished_at),
            "teams": [_team_dict(t) for t in self.teams],
        }
        if not self.rated:
            wire["rated"] = False
        if self.duration is not None:
            wire["duration"] = _number(self.duration)
        return wire


def match_key(ladder: str) -> bytes:
    """The Kafka key of a match-finished record: its ladder.

    Every match of a ladder then lands on one partition, whose order is the order in which
    the ladder's matches are applied — by every worker, and by a replay of the topic.
    """
    return ladder.encode()


def parse_match(obj: Any, ladders: LadderTable, limits: Limits = DEFAULT_LIMITS) -> MatchFinished:
    """Validate a decoded match-finished object against the contract and `ladders`.

    Raises `ValidationError` naming the first offending field; nothing else escapes.
    """
    match = _parse_plain(obj, ladders, limits)
    return _parse_any(obj, ladders, limits) if match is None else match


def _parse_plain(obj: Any, ladders: LadderTable, limits: Limits) -> MatchFinished | None:
    """`parse_match` of the common shape at half the cost, or None for anything else.

    The shape: no fields but ``match_id``, ``ladder``, ``model`` (the ladder's) and
    ``finished_at``; ``teams`` of exactly ``rank`` and ``players``; players of just an
    ``id``; ASCII ids; a ladder whose model needs no scores. It checks the same rules as
    `_parse_any` (which accepts such an event with an equal result), without the
    bookkeeping that names a field; it never raises, so `_parse_any` reports every error.
    """
    if type(obj) is not dict or not _PLAIN_FIELDS.issuperset(obj):
        return None
    id_limit = limits.max_id_length
    match_id = obj.get("match_id")
    name = obj.get("ladder")
    if name is None:
        name = DEFAULT_LADDER
    if not (_is_plain_id(match_id, id_limit) and _is_plain_id(name, id_limit)):
        return None
    ladder = ladders.get(name, None)
    if ladder is None or ladder.model_class.needs_scores:
        return None
    model = obj.get("model")
    if model is not None and model != ladder.model:
        return None
    try:
        finished_at = _timestamp(obj.get("finished_at"), "finished_at")
    except ValidationError:
        return None
    raw_teams = obj.get("teams")
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
            if not _is_plain_id(pid, id_limit):
                return None
            ids.add(pid)
            players.append(_new_player(pid))
        listed += len(players)
        teams.append(_new_team(tuple(players), rank))
    if len(ids) != listed or listed > limits.max_players:  # a player listed twice, or too many
        return None
    return _new_match(match_id, name, finished_at, tuple(teams))


_new_object = object.__new__


_PLAYER_SLOTS, _TEAM_SLOTS, _MATCH_SLOTS = (
    tuple(cls.__dict__[f.name].__set__ for f in fields(cls)) for cls in (Player, Team, MatchFinished)
)


def _new_player(pid: str) -> Player:
    """``Player(pid)``, built through the slots."""
    player = _new_object(Player)
    set_id, set_weight, set_score, set_seconds_played, set_rated = _PLAYER_SLOTS
    set_id(player, pid)
    set_weight(player, 1.0)
    set_score(player, None)
    set_seconds_played(player, None)
    set_rated(player, True)
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
    set_match_id, set_ladder, set_finished_at, set_teams, set_rated, set_duration, set_season = _MATCH_SLOTS
    set_match_id(match, match_id)
    set_ladder(match, ladder)
    set_finished_at(match, finished_at)
    set_teams(match, teams)
    set_rated(match, True)
    set_duration(match, None)
    set_season(match, None)
    return match


def _is_plain_id(value: Any, limit: int) -> TypeGuard[str]:
    """An ASCII string that `_string` accepts."""
    return type(value) is str and 0 < len(value) <= limit and value.isascii()


def _parse_any(obj: Any, ladders: LadderTable, limits: Limits) -> MatchFinished:
    """`parse_match` of any event (and of every error)."""
    if not isinstance(obj, dict):
        _fail("event", f"must be an object, got {_kind(obj)}")
    if "kind" in obj:
        return _season_start(obj, ladders, limits)
    _no_unknown(obj, _MATCH_FIELDS, "")
    id_limit = limits.max_id_length
    match_id = _string(_required(obj, "match_id", ""), "", "match_id", id_limit)
    name = obj.get("ladder")
    if name is None:
        name = DEFAULT_LADDER
    else:
        _string(name, "", "ladder", id_limit)
    try:
        ladder = ladders.get(name)
    except KeyError as e:  # config's UnknownLadderError
        _fail("ladder", str(e))
    model = obj.get("model")
    if model is not None and model != ladder.model:
        _string(model, "", "model", id_limit)
        _fail(
            "model",
            f"ladder {name!r} uses model {ladder.model!r}, the event says {model!r}; "
            "an event may not switch a ladder's model",
        )
    finished_at = _timestamp(_required(obj, "finished_at", ""), "finished_at")

    raw_teams = _required(obj, "teams", "")
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
    _check_ranking(teams)
    rated = obj.get("rated")
    if rated is None:
        rated = True
    elif type(rated) is not bool:
        _fail("rated", f"must be a boolean, got {_kind(rated)}")
    duration = _optional_finite(obj, "duration")
    if duration is not None and duration < 0.0:
        _fail("duration", "must be >= 0")
    return MatchFinished(match_id, name, finished_at, tuple(teams), rated, duration)


_PLAIN_FIELDS = frozenset({"match_id", "ladder", "finished_at", "teams", "model"})
_MATCH_FIELDS = _PLAIN_FIELDS | {"rated", "duration"}

_SEASON_FIELDS = frozenset({"kind", "match_id", "ladder", "finished_at", "params"})

#: The parameters a season-start record may override (`config.rules`).
SEASON_OVERRIDES = ("season_shrink", "season_sigma")


def _season_start(obj: dict[str, Any], ladders: LadderTable, limits: Limits) -> MatchFinished:
    """A season-start record: ``{"kind": "season", "match_id", "ladder", "finished_at",
    "params"?}`` (``params``: ``season_shrink`` from 0 to 1, ``season_sigma`` >= 0)."""
    kind = obj["kind"]
    if kind != "season":
        _fail("kind", f"must be 'season' on the matches topic (a match has no kind), got {_show(kind)}")
    _no_unknown(obj, _SEASON_FIELDS, "")
    match_id = _string(_required(obj, "match_id", ""), "", "match_id", limits.max_id_length)
    name = obj.get("ladder")
    if name is None:
        name = DEFAULT_LADDER
    else:
        _string(name, "", "ladder", limits.max_id_length)
    try:
        ladders.get(name)
    except KeyError as e:
        _fail("ladder", str(e))
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


_PLAYER_FIELDS = frozenset({"id", "weight", "score", "seconds_played", "rated"})


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
    rated = value.get("rated")
    if rated is None:
        rated = True
    elif type(rated) is not bool:
        _fail("rated", f"must be a boolean, got {_kind(rated)}")
    if scored_by is not None and rated:
        if score is None:
            _fail("score", f"is required by {_describe(scored_by)}")
        if seconds is None:
            _fail("seconds_played", f"is required by {_describe(scored_by)}")
    return Player(pid, weight, score, seconds, rated)


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


def _team_score(team: Team) -> float:
    """The team's own score, else the sum of its players' (validation ensures they have one)."""
    if team.score is not None:
        return team.score
    return sum(p.score for p in team.players if p.score is not None)


def _number(x: float) -> float | int:
    """Integral floats as ints in the wire form: ``"rank": 1``, not ``1.0``."""
    return int(x) if x.is_integer() and abs(x) < 2.0**53 else x


def _team_dict(team: Team) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if team.rank is not None:
        d["rank"] = _number(team.rank)
    if team.score is not None:
        d["score"] = _number(team.score)
    if team.effects:
        d["effects"] = list(team.effects)
    d["players"] = [_player_dict(p) for p in team.players]
    return d


def _player_dict(player: Player) -> dict[str, Any]:
    d: dict[str, Any] = {"id": player.id}
    if player.weight != 1.0:
        d["weight"] = _number(player.weight)
    if player.score is not None:
        d["score"] = _number(player.score)
    if player.seconds_played is not None:
        d["seconds_played"] = _number(player.seconds_played)
    if not player.rated:
        d["rated"] = False
    return d
