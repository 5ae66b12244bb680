"""The wire contracts of design.md as frozen dataclasses, and the validation that turns a
decoded match-finished object into a `MatchFinished`.

Validation is hand-written (no jsonschema at run time) so that it stays fast on the hot
path, and every error names the field path and the reason, e.g.
``teams[1].players[0].seconds_played: must be > 0``. The JSON Schemas in
``stream_rater/schemas`` describe the same contract for other languages; a test keeps
the two in step.

Choices where design.md leaves room:

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

import functools
import re
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, NoReturn

from stream_rater.ladders import DEFAULT_LADDER, Ladder, Ladders, UnknownLadderError

__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "MatchFinished",
    "Player",
    "RatingChanged",
    "Team",
    "ValidationError",
    "format_timestamp",
    "parse_match",
    "parse_timestamp",
]


class ValidationError(ValueError):
    """An event that breaks the contract; `path` names the field, `reason` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[ValidationError], tuple[str, str]]:
        return type(self), (self.path, self.reason)


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
class MatchFinished:
    """A validated match-finished event; `finished_at` in epoch seconds (UTC)."""

    match_id: str
    ladder: str
    finished_at: float
    teams: tuple[Team, ...]

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
        return {
            "match_id": self.match_id,
            "ladder": self.ladder,
            "finished_at": format_timestamp(self.finished_at),
            "teams": [_team_dict(t) for t in self.teams],
        }


@dataclass(frozen=True, slots=True)
class RatingChanged:
    """One rated player's change from one match; `before`/`after` are
    ``{"mu": float, "sigma": float | None}`` (sigma null for Elo-family models)."""

    event_id: str
    match_id: str
    ladder: str
    player_id: str
    model: str
    before: dict[str, float | None]
    after: dict[str, float | None]
    rating: float
    delta: float
    games: int
    finished_at: str
    processed_at: str
    late: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The wire form (field order as in design.md); ``late`` only when true."""
        wire = {
            "event_id": self.event_id,
            "match_id": self.match_id,
            "ladder": self.ladder,
            "player_id": self.player_id,
            "model": self.model,
            "before": dict(self.before),
            "after": dict(self.after),
            "rating": self.rating,
            "delta": self.delta,
            "games": self.games,
            "finished_at": self.finished_at,
            "processed_at": self.processed_at,
        }
        if self.late:
            wire["late"] = True
        return wire

    @classmethod
    def from_dict(cls, d: Any) -> RatingChanged:
        """Validate a decoded rating-changed object; raises `ValidationError`."""
        if not isinstance(d, dict):
            _fail("event", f"must be an object, got {_kind(d)}")
        _no_unknown(d, _CHANGED_FIELDS, "")
        event_id, match_id, ladder, player_id, model = (
            _string(_required(d, name, ""), "", name, None) for name in _CHANGED_STRINGS
        )
        before = _state(_required(d, "before", ""), "before")
        after = _state(_required(d, "after", ""), "after")
        if (before["sigma"] is None) != (after["sigma"] is None):
            _fail("after.sigma", "must be null exactly when before.sigma is null")
        games = _required(d, "games", "")
        if type(games) is float and games.is_integer():
            games = int(games)
        if type(games) is not int:
            _fail("games", f"must be an integer, got {_kind(games)}")
        if games < 1:
            _fail("games", "must be >= 1")
        for name in ("finished_at", "processed_at"):
            value = _required(d, name, "")
            if type(value) is not str:
                _fail(name, f"must be an RFC 3339 date-time string, got {_kind(value)}")
            _parse_rfc3339(value, name)
        late = d.get("late", False)
        if type(late) is not bool:
            _fail("late", f"must be a boolean, got {_kind(late)}")
        return cls(
            event_id=event_id,
            match_id=match_id,
            ladder=ladder,
            player_id=player_id,
            model=model,
            before=before,
            after=after,
            rating=_finite(_required(d, "rating", ""), "", "rating"),
            delta=_finite(_required(d, "delta", ""), "", "delta"),
            games=games,
            finished_at=d["finished_at"],
            processed_at=d["processed_at"],
            late=late,
        )


def match_key(ladder: str) -> bytes:
    """The Kafka key of a match-finished record: its ladder.

    Every match of a ladder then lands on one partition, whose order is the order in which
    the ladder's matches are applied — by every worker, and by a replay of the topic.
    """
    return ladder.encode()


def parse_match(obj: Any, ladders: Ladders, limits: Limits = DEFAULT_LIMITS) -> MatchFinished:
    """Validate a decoded match-finished object against the contract and `ladders`.

    Raises `ValidationError` naming the first offending field; nothing else escapes.
    """
    match = _parse_plain(obj, ladders, limits)
    return _parse_any(obj, ladders, limits) if match is None else match


def _parse_plain(obj: Any, ladders: Ladders, limits: Limits) -> MatchFinished | None:
    """`parse_match` of the common shape at half the cost, or None for anything else.

    The shape: no fields but ``match_id``, ``ladder``, ``model`` (the ladder's) and
    ``finished_at``; ``teams`` of exactly ``rank`` and ``players``; players of just an
    ``id``; ASCII ids; a ladder whose model needs no scores. It checks the same rules as
    `_parse_any` (which accepts such an event with an equal result), without the
    bookkeeping that names a field; it never raises, so `_parse_any` reports every error.
    """
    if type(obj) is not dict or not _MATCH_FIELDS.issuperset(obj):
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
        kind = type(rank)
        if kind is int and -_EXACT_INT <= rank <= _EXACT_INT:
            rank = float(rank)
        elif kind is not float or rank - rank != 0.0:  # not a finite number
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


# A frozen dataclass's __init__ sets each field through object.__setattr__; the slots' own
# setters do the same at about half the cost, which `_parse_plain` spends on its objects.
# (The builders below skip __init__, so the classes must not grow a __post_init__.)
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
    set_match_id, set_ladder, set_finished_at, set_teams = _MATCH_SLOTS
    set_match_id(match, match_id)
    set_ladder(match, ladder)
    set_finished_at(match, finished_at)
    set_teams(match, teams)
    return match


def _is_plain_id(value: Any, limit: int) -> bool:
    """An ASCII string that `_string` accepts."""
    return type(value) is str and 0 < len(value) <= limit and value.isascii()


def _parse_any(obj: Any, ladders: Ladders, limits: Limits) -> MatchFinished:
    """`parse_match` of any event (and of every error)."""
    if not isinstance(obj, dict):
        _fail("event", f"must be an object, got {_kind(obj)}")
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
    except UnknownLadderError as e:
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
    return MatchFinished(match_id, name, finished_at, tuple(teams))


def format_timestamp(epoch: float) -> str:
    """Epoch seconds as an RFC 3339 UTC string, to the microsecond, trailing zeros dropped
    (``2004-08-06T18:13:50Z``, ``2004-08-06T18:13:50.25Z``)."""
    if _MIN_EPOCH <= epoch <= _MAX_EPOCH:
        micros = _microseconds(epoch)
    else:  # beyond the range validation allows: what datetime makes of it, or its error
        micros = (_EPOCH + timedelta(seconds=epoch) - _EPOCH) // _MICROSECOND
    seconds, micros = divmod(micros, 1_000_000)
    minute, second = divmod(seconds, 60)
    text = _minute_text(minute) + _TWO_DIGITS[second]
    if micros:
        text += (".%06d" % micros).rstrip("0")
    return text + "Z"


def parse_timestamp(value: Any, path: str = "finished_at") -> float:
    """An RFC 3339 string or epoch seconds → epoch seconds rounded to the microsecond;
    raises `ValidationError` (at `path`) for anything else."""
    return _timestamp(value, path)


# --- implementation ------------------------------------------------------------------

_MATCH_FIELDS = frozenset({"match_id", "ladder", "finished_at", "teams", "model"})
_TEAM_FIELDS = frozenset({"players", "rank", "score", "effects"})
_PLAYER_FIELDS = frozenset({"id", "weight", "score", "seconds_played", "rated"})
_CHANGED_STRINGS = ("event_id", "match_id", "ladder", "player_id", "model")
_CHANGED_FIELDS = frozenset(
    _CHANGED_STRINGS
    + ("before", "after", "rating", "delta", "games", "finished_at", "processed_at", "late")
)
_STATE_FIELDS = frozenset({"mu", "sigma"})

_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)
_TWO_DIGITS = tuple(f"{i:02d}" for i in range(60))
_EXACT_INT = 2**53  # integers up to this size are exactly floats
_MIN_EPOCH = (datetime.min - _EPOCH) / _SECOND
_MAX_EPOCH = (datetime(9999, 12, 31, 23, 59, 59) - _EPOCH) / _SECOND
#: RFC 3339 date-time; `datetime.fromisoformat` then checks the calendar.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)\Z",
    re.ASCII,
)
_JSON_KINDS = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    list: "array",
    dict: "object",
    bytes: "binary",
}


def _fail(path: str, reason: str) -> NoReturn:
    raise ValidationError(path, reason)


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _show(value: str, limit: int = 40) -> str:
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "…"


def _join(prefix: str, key: Any) -> str:
    """The path of `key` (a field name or an array index) inside `prefix`."""
    if type(key) is int:
        return f"{prefix}[{key}]"
    if isinstance(key, str) and key.isidentifier():
        return f"{prefix}.{key}" if prefix else key
    return f"{prefix}[{_show(key) if isinstance(key, str) else repr(key)}]"


def _within(prefix: str, error: ValidationError) -> NoReturn:
    """Re-raise `error`, whose path is relative to the object at `prefix`, with its full
    path (what `_join` would have made): nested validators build no path unless they fail."""
    path = error.path
    if not path:
        full = prefix
    elif path[0] == "[":
        full = prefix + path
    else:
        full = f"{prefix}.{path}"
    raise ValidationError(full, error.reason) from None


def _no_unknown(obj: dict[Any, Any], allowed: frozenset[str], prefix: str) -> None:
    if not allowed.issuperset(obj):
        _fail(_join(prefix, min(obj.keys() - allowed, key=repr)), "unknown field")


def _required(obj: dict[Any, Any], key: str, prefix: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        _fail(_join(prefix, key), "is required")


def _string(value: Any, prefix: str, key: str | int, limit: int | None) -> str:
    if type(value) is not str:
        _fail(_join(prefix, key), f"must be a string, got {_kind(value)}")
    if not value:
        _fail(_join(prefix, key), "must not be empty")
    if limit is not None and len(value) > limit:
        _fail(_join(prefix, key), f"is {len(value)} characters, limit {limit}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            _fail(_join(prefix, key), "is not valid Unicode (lone surrogate)")
    return value


def _finite(value: Any, prefix: str, key: str) -> float:
    kind = type(value)
    if kind is float:
        if value - value == 0.0:
            return value  # type: ignore[no-any-return]
        _fail(_join(prefix, key), "must be a finite number")
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            _fail(_join(prefix, key), "must be a finite number")
    _fail(_join(prefix, key), f"must be a number, got {_kind(value)}")


def _optional_finite(obj: dict[str, Any], key: str) -> float | None:
    """``obj[key]`` as a finite number, None when absent or null; error paths relative to `obj`."""
    value = obj.get(key)
    return None if value is None else _finite(value, "", key)


def _timestamp(value: Any, path: str) -> float:
    kind = type(value)
    if kind is float and _MIN_EPOCH <= value <= _MAX_EPOCH:  # the common case (not NaN)
        return _microseconds(value) / 1_000_000
    if kind is str:
        return _parse_rfc3339(value, path)
    if kind is int or kind is float:
        epoch = _finite(value, "", path)
        if not _MIN_EPOCH <= epoch <= _MAX_EPOCH:
            _fail(path, "is out of range (years 0001-9999)")
        return _microseconds(epoch) / 1_000_000
    _fail(path, f"must be an RFC 3339 date-time string or epoch seconds, got {_kind(value)}")


def _microseconds(epoch: float) -> int:
    """``timedelta(seconds=epoch)`` in microseconds, computed as it does but without the
    object: the whole seconds exactly, plus the fraction times 10**6 rounded half to even
    (`round`, like timedelta, rounds ties to the even total: 10**6 is even)."""
    whole = int(epoch)  # truncated, like math.modf; epoch - whole is then exact
    return whole * 1_000_000 + round((epoch - whole) * 1e6)


@functools.lru_cache(maxsize=1024)
def _minute_text(minute: int) -> str:
    """``YYYY-MM-DDTHH:MM:`` of the `minute`-th minute after 1970-01-01T00:00 (events
    stream in roughly in time order, so this is nearly always cached)."""
    return (_EPOCH + timedelta(minutes=minute)).isoformat()[:17]


def _parse_rfc3339(text: str, path: str) -> float:
    if _RFC3339.match(text) is None:
        _fail(path, f"{_show(text)} is not an RFC 3339 date-time (like 2004-08-06T18:13:50Z)")
    try:
        epoch = datetime.fromisoformat(text.upper()).timestamp()
    except ValueError as e:
        _fail(path, f"{_show(text)} is not a valid date-time: {e}")
    if not _MIN_EPOCH <= epoch <= _MAX_EPOCH:
        _fail(path, "is out of range (years 0001-9999)")
    return epoch


def _state(value: Any, path: str) -> dict[str, float | None]:
    if not isinstance(value, dict):
        _fail(path, f"must be an object, got {_kind(value)}")
    _no_unknown(value, _STATE_FIELDS, path)
    mu = _finite(_required(value, "mu", path), path, "mu")
    sigma = _required(value, "sigma", path)
    if sigma is not None:
        sigma = _finite(sigma, path, "sigma")
        if sigma < 0.0:
            _fail(f"{path}.sigma", "must be >= 0")
    return {"mu": mu, "sigma": sigma}


def _describe(ladder: Ladder) -> str:
    return f"ladder {ladder.name!r} (model {ladder.model!r})"


def _team(value: Any, ladder: Ladder, limits: Limits, scored_by: Ladder | None) -> Team:
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


def _effects(value: Any, path: str, ladder: Ladder, limits: Limits) -> tuple[str, ...]:
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


def _player(value: Any, id_limit: int, scored_by: Ladder | None) -> Player:
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
                    f"player {_show(player.id)} is already listed at "
                    f"teams[{first[0]}].players[{first[1]}]",
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
