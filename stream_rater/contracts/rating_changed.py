"""The rating-changed event (topic ``rating-updates``): its one builder, used by the
processor, and its validation, used by consumers and tests."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from stream_rater.contracts._checks import _fail, _finite, _kind, _no_unknown, _required, _string
from stream_rater.contracts.modes import mode_problem, stored_id
from stream_rater.contracts.timestamps import _parse_rfc3339

#: A state as `rating_changed` reads it: ``(mu, sigma, …)``.
_State = tuple[float, float | None, *tuple[Any, ...]]


def rating_changed(
    match_id: str,
    ladder: str,
    player_id: str,
    model: str,
    before: _State,
    after: _State,
    rating: float,
    games: int,
    finished_at: str,
    processed_at: str,
    late: bool = False,
    provisional: bool | None = None,
    expected: dict[str, float] | None = None,
    before_rating: float | None = None,
) -> dict[str, Any]:
    """A rating-changed event in its wire form (field order as in the README's example): `before` and
    `after` are ``(mu, sigma)`` or a longer tuple that starts so (a stored state, a rating); ``event_id`` is ``<match_id>:<player_id>``, stable across
    redeliveries; ``late`` appears only when true; ``provisional`` only on a ladder whose rules
    mark provisional players (`config.rules`); ``expected`` (a match's events: what the read
    API expected of the player's team before it, `rating.predict.expected`) when given.
    `before_rating` is the display rating before (what players saw): it gives ``before.rating``,
    ``after.rating`` (= `rating`, so that each ``before`` is the player's previous ``after``)
    and ``rating_delta`` = `rating` − `before_rating` (``delta`` is μ's change); events stored
    before they carried it read back without them."""
    event: dict[str, Any] = {  # the keys in one literal: no dict grown key by key
        "event_id": f"{match_id}:{player_id}",
        "match_id": match_id,
        "ladder": ladder,
        "player_id": player_id,
        "model": model,
        "before": {"mu": before[0], "sigma": before[1], "rating": before_rating},
        "after": {"mu": after[0], "sigma": after[1], "rating": rating},
        "rating": rating,
        "delta": after[0] - before[0],
        "rating_delta": None if before_rating is None else rating - before_rating,
        "games": games,
        "finished_at": finished_at,
        "processed_at": processed_at,
    }
    if before_rating is None:  # an event stored before events carried it, read back
        del event["before"]["rating"], event["after"]["rating"], event["rating_delta"]
    if late:
        event["late"] = True
    if provisional is not None:
        event["provisional"] = provisional
    if expected is not None:
        event["expected"] = expected
    return event


def with_mode(event: dict[str, Any], mode: str, player_id: str) -> dict[str, Any]:
    """`event`, made for a moded ladder's stored id (`contracts.modes.stored_id`), turned in
    place into `player_id`'s event in `mode`: its ``event_id`` and ``player_id`` the player's
    own, and ``mode`` (last) added. In place, because the processor's markers and histories
    share the event; returns it. A ``cross`` event's ``event_id`` is
    ``<match_id>:<mode>@<player_id>``: the match has the player's own event in its mode too."""
    own = stored_id(mode, player_id) if event.get("kind") == "cross" else player_id
    event["event_id"] = f"{event['match_id']}:{own}"
    event["player_id"] = player_id
    event["mode"] = mode
    return event


def as_cross(event: dict[str, Any], played: str) -> dict[str, Any]:
    """`event` (a `rating_changed` of a player in a mode they did not play) made, in place, a
    rating-changed event of the cross kind (a ladder with modes): the player's match in mode
    `played` moved their rating in this one (`rating.modes.cross_update`); ``games`` is this
    mode's count (unchanged), ``finished_at`` the match's, ``cross`` is ``{"mode": played}``.
    `contracts.with_mode` then makes it the player's event in the other mode. Returns it."""
    event["kind"] = "cross"
    event["cross"] = {"mode": played}
    return event


def season_changed(
    season_id: str,
    ladder: str,
    player_id: str,
    model: str,
    before: tuple[float, float | None],
    after: tuple[float, float | None],
    rating: float,
    games: int,
    started_at: str,
    processed_at: str,
    provisional: bool | None,
    params: dict[str, float],
    before_rating: float | None = None,
) -> dict[str, Any]:
    """A rating-changed event of the season kind: a season of the ladder started (the record
    `season_id`) and the soft reset moved the player from `before` to `after`; ``season`` is
    ``{"id", "params"}`` (the record's overrides of the ladder's season rule)."""
    event = rating_changed(
        season_id,
        ladder,
        player_id,
        model,
        before,
        after,
        rating,
        games,
        started_at,
        processed_at,
        provisional=provisional,
        before_rating=before_rating,
    )
    event["kind"] = "season"
    event["season"] = {"id": season_id, "params": params}
    return event


def correction_changed(
    correction_id: str,
    ladder: str,
    player_id: str,
    model: str,
    before: tuple[float, float | None],
    after: tuple[float, float | None],
    rating: float,
    games: int,
    corrected_at: str,
    cause: dict[str, Any],
    before_rating: float | None = None,
) -> dict[str, Any]:
    """A rating-changed event of the correction kind: a re-rate (voids, un-voids, new
    parameters) changed the player's state from `before` (what subscribers last saw) to
    `after`. ``match_id`` is the correction's id (``rerate:<ladder>:<generation>``), so ``event_id``
    is stable and unique across ladders; `cause` is ``{"id", "reason", "voided", "unvoided", "params"}``; ``games``
    may be 0 (the player's only matches were voided)."""
    event = rating_changed(
        correction_id,
        ladder,
        player_id,
        model,
        before,
        after,
        rating,
        games,
        corrected_at,
        corrected_at,
        before_rating=before_rating,
    )
    event["kind"] = "correction"
    event["correction"] = cause
    return event


class RatingState(TypedDict):
    """A state as a rating-changed event carries it (sigma None for Elo-family models), with
    ``rating``, the display rating players saw (absent from events stored before it was)."""

    mu: float
    sigma: float | None
    rating: NotRequired[float]


@dataclass(frozen=True, slots=True)
class RatingChanged:
    """One rated player's change from one match; `before`/`after` are
    ``{"mu": float, "sigma": float | None}`` (sigma null for Elo-family models)."""

    event_id: str
    match_id: str
    ladder: str
    player_id: str
    model: str
    before: RatingState
    after: RatingState
    rating: float
    delta: float
    games: int
    finished_at: str
    processed_at: str
    late: bool = False
    kind: str = "match"
    correction: dict[str, Any] | None = None
    provisional: bool | None = None
    season: dict[str, Any] | None = None
    #: A cross event's ``{"mode": <the match's mode>}`` (`as_cross`), else None.
    cross: dict[str, Any] | None = None
    expected: dict[str, float] | None = None
    rating_delta: float | None = None
    #: The ladder's mode of the change (a ladder with modes, `contracts.modes`), else None.
    mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The wire form (`rating_changed` or `correction_changed`)."""
        wire = rating_changed(
            self.match_id,
            self.ladder,
            self.player_id,
            self.model,
            (self.before["mu"], self.before["sigma"]),
            (self.after["mu"], self.after["sigma"]),
            self.rating,
            self.games,
            self.finished_at,
            self.processed_at,
            self.late,
            self.provisional,
            self.expected,
            self.before.get("rating"),
        )
        wire["event_id"], wire["delta"] = self.event_id, self.delta
        if self.rating_delta is not None:
            wire["rating_delta"] = self.rating_delta
        if self.kind == "correction":
            wire["kind"], wire["correction"] = self.kind, self.correction
        elif self.kind == "season":
            wire["kind"], wire["season"] = self.kind, self.season
        elif self.kind == "cross":
            wire["kind"], wire["cross"] = self.kind, self.cross
        if self.mode is not None:
            with_mode(wire, self.mode, self.player_id)
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
        before = _state(_required(d, "before", ""), "before", _RATED_FIELDS)
        after = _state(_required(d, "after", ""), "after", _RATED_FIELDS)
        if (before["sigma"] is None) != (after["sigma"] is None):
            _fail("after.sigma", "must be null exactly when before.sigma is null")
        rating_delta = _rating_delta(d, before, after)
        games, kind, correction, season = _games_and_kind(d)
        provisional, late = _flags(d)
        expected = d.get("expected")
        if expected is not None:
            if kind != "match":
                _fail("expected", "only a match's events carry it")
            _expected(expected)
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
            kind=kind,
            correction=correction,
            provisional=provisional,
            season=season,
            cross=_cross(d, kind),
            expected=expected,
            rating_delta=rating_delta,
            mode=_event_mode(d),
        )


def _event_mode(d: dict[str, Any]) -> str | None:
    """A rating-changed object's ``mode`` (optional: a plain word, `contracts.modes`)."""
    mode = d.get("mode")
    if mode is not None and mode_problem(mode) is not None:
        _fail("mode", f"{mode_problem(mode)}, got {_kind(mode) if not isinstance(mode, str) else repr(mode)}")
    return mode


def _rating_delta(d: dict[str, Any], before: RatingState, after: RatingState) -> float | None:
    """A rating-changed object's ``rating_delta``, which comes exactly with ``before.rating``
    and ``after.rating`` (the event's ``rating``)."""
    rating_delta = d.get("rating_delta")
    if (rating_delta is None) != ("rating" not in before):
        _fail("rating_delta", "must be present exactly when before.rating is")
    if ("rating" in after) != ("rating" in before):
        _fail("after.rating", "must be present exactly when before.rating is")
    if "rating" in after and after["rating"] != _finite(_required(d, "rating", ""), "", "rating"):
        _fail("after.rating", "must equal rating")
    return None if rating_delta is None else _finite(rating_delta, "", "rating_delta")


def _games_and_kind(d: dict[str, Any]) -> tuple[int, str, Any, Any]:
    """A rating-changed object's ``games``, ``kind`` and the ``correction`` or ``season``
    that goes with its kind (validated); ``games`` may be 0 for a correction or a season."""
    games = _required(d, "games", "")
    if type(games) is float and games.is_integer():
        games = int(games)
    if type(games) is not int:
        _fail("games", f"must be an integer, got {_kind(games)}")
    kind = d.get("kind", "match")
    if kind not in ("match", "correction", "season", "cross"):
        _fail("kind", f"must be 'match', 'correction', 'season' or 'cross', got {kind!r}")
    correction = d.get("correction")
    if (kind == "correction") != (correction is not None):
        _fail("correction", "must be present exactly when kind is 'correction'")
    if correction is not None:
        _correction(correction)
    season = d.get("season")
    if (kind == "season") != (season is not None):
        _fail("season", "must be present exactly when kind is 'season'")
    if season is not None:
        _season(season)
    least = 1 if kind in ("match", "cross") else 0
    if games < least:
        _fail("games", f"must be >= {least}")
    return games, kind, correction, season


def _cross(d: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """A cross event's ``cross`` (``{"mode": <the match's mode>}``), present exactly when the
    kind is ``cross``, which also needs the event's own ``mode``."""
    cross = d.get("cross")
    if (kind == "cross") != (cross is not None):
        _fail("cross", "must be present exactly when kind is 'cross'")
    if cross is None:
        return None
    if not isinstance(cross, dict):
        _fail("cross", f"must be an object, got {_kind(cross)}")
    _no_unknown(cross, frozenset({"mode"}), "cross")
    played = _required(cross, "mode", "cross")
    if not isinstance(played, str) or mode_problem(played) is not None:
        _fail("cross.mode", "must be a mode name")
    if d.get("mode") is None:
        _fail("mode", "must be present on a cross event")
    return cross


def _flags(d: dict[str, Any]) -> tuple[bool | None, bool]:
    """A rating-changed object's ``provisional`` and ``late`` flags, its two times checked."""
    provisional = d.get("provisional")
    if provisional is not None and type(provisional) is not bool:
        _fail("provisional", f"must be a boolean, got {_kind(provisional)}")
    for name in ("finished_at", "processed_at"):
        value = _required(d, name, "")
        if type(value) is not str:
            _fail(name, f"must be an RFC 3339 date-time string, got {_kind(value)}")
        _parse_rfc3339(value, name)
    late = d.get("late", False)
    if type(late) is not bool:
        _fail("late", f"must be a boolean, got {_kind(late)}")
    return provisional, late


_CHANGED_STRINGS = ("event_id", "match_id", "ladder", "player_id", "model")


_CHANGED_FIELDS = frozenset(
    (
        *_CHANGED_STRINGS,
        "before",
        "after",
        "rating",
        "delta",
        "rating_delta",
        "games",
        "finished_at",
        "processed_at",
        "late",
        "kind",
        "correction",
        "provisional",
        "season",
        "cross",
        "expected",
        "mode",
    )
)

#: The two forms of ``expected``: two teams, more teams.
_EXPECTED_FORMS = (frozenset({"win", "draw"}), frozenset({"ahead", "rank"}))


def _expected(value: Any) -> None:
    """Check a match event's ``expected``: ``{"win", "draw"}`` probabilities or ``{"ahead"
    (a probability), "rank" (>= 1)}``."""
    if not isinstance(value, dict):
        _fail("expected", f"must be an object, got {_kind(value)}")
    if frozenset(value) not in _EXPECTED_FORMS:
        _fail("expected", f"must have the fields win and draw, or ahead and rank; got {sorted(value)}")
    for name, number in value.items():
        x = _finite(number, "expected", name)
        low, high = (1.0, math.inf) if name == "rank" else (0.0, 1.0)
        if not low <= x <= high:
            _fail(f"expected.{name}", f"must be within [{low}, {high}], got {x}")


_SEASON_FIELDS = frozenset({"id", "params"})


def _season(value: Any) -> None:
    """Check a season event's ``season`` object."""
    if not isinstance(value, dict):
        _fail("season", f"must be an object, got {_kind(value)}")
    _no_unknown(value, _SEASON_FIELDS, "season")
    if type(_required(value, "id", "season")) is not str:
        _fail("season.id", "must be a string")
    if not isinstance(_required(value, "params", "season"), dict):
        _fail("season.params", "must be an object")


_CORRECTION_FIELDS = frozenset({"id", "reason", "voided", "unvoided", "params"})


def _correction(value: Any) -> None:
    """Check a correction event's ``correction`` object."""
    if not isinstance(value, dict):
        _fail("correction", f"must be an object, got {_kind(value)}")
    _no_unknown(value, _CORRECTION_FIELDS, "correction")
    for name in ("id", "reason"):
        if type(_required(value, name, "correction")) is not str:
            _fail(f"correction.{name}", "must be a string")
    for name in ("voided", "unvoided"):
        ids = _required(value, name, "correction")
        if not isinstance(ids, list) or not all(type(i) is str for i in ids):
            _fail(f"correction.{name}", "must be an array of match ids")
    if not isinstance(_required(value, "params", "correction"), dict):
        _fail("correction.params", "must be an object")


_STATE_FIELDS = frozenset({"mu", "sigma"})
_RATED_FIELDS = _STATE_FIELDS | {"rating"}


def _state(value: Any, path: str, fields: frozenset[str] = _STATE_FIELDS) -> RatingState:
    if not isinstance(value, dict):
        _fail(path, f"must be an object, got {_kind(value)}")
    _no_unknown(value, fields, path)
    mu = _finite(_required(value, "mu", path), path, "mu")
    sigma = _required(value, "sigma", path)
    if sigma is not None:
        sigma = _finite(sigma, path, "sigma")
        if sigma < 0.0:
            _fail(f"{path}.sigma", "must be >= 0")
    state: RatingState = {"mu": mu, "sigma": sigma}
    if "rating" in value:
        state["rating"] = _finite(value["rating"], path, "rating")
    return state
