"""Why a rating moved: one match's rating changes, found by match id, per player — before,
after, what the read API expected (the event's ``expected``), what happened (the team's rank),
and what moved the rating besides the result:

- **idle time**: the σ the model rated the player with, grown from the stored σ by the time
  since the player's previous match (`RatingModel.as_of`; absent when it did not grow);
- **a season reset** between the player's previous match and this one (its season event);
- **corrections since**: re-rates (voids, new parameters) whose correction events followed
  this match's, each with its id, and whether it voided this very match.

The match is found through its marker, which keeps its rated players and their teams' ranks
(`ReadStore.placings`), and each player's event in their history (the newest
``history_limit`` events). So a match can be explained while its marker lives (the idempotency
window, ``STREAM_RATER_MARKER_TTL``) and while its event is among the player's kept ones;
a player whose event has left the history is listed with ``"found": false``.

With the archive (`stream_rater.archive`, ``STREAM_RATER_ARCHIVE_URL``) the explanation reaches
further: a player whose event has left Redis's history is found in the archive, and a match
whose marker has expired is explained from the archive alone (``"source": "archive"``): its
events, and what happened from the placings the archive keeps of each rated match (read from the
matches topic), so ``actual`` is what it was while the marker lived; a match the archive has
events but no placings of (the archive started after it) answers ``"actual": null``. Without
one, such a match is answered as outside the window, never as unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stream_rater.archive import ArchiveReader
from stream_rater.config.ladders import Ladder
from stream_rater.contracts import parse_timestamp
from stream_rater.queries import QueryError
from stream_rater.rating.base import Rating
from stream_rater.store import ReadStore
from stream_rater.store.base import Event


class UnknownMatch(QueryError):
    status = 404


async def explain_match(
    store: ReadStore, ladder: Ladder, match_id: str, history_limit: int, archive: ArchiveReader | None = None
) -> dict[str, Any]:
    """The explanation of `match_id` on `ladder` (module docstring), from the store while its
    marker lives, else from `archive`; `UnknownMatch` when neither knows it, saying whether the
    match may simply be older than the markers' window."""
    placings = await store.placings(ladder.name, match_id)
    if placings is None:
        return await _from_archive(ladder, match_id, archive)
    ranks = [rank for _, rank in placings]
    players = []
    for player_id, rank in placings:
        history = await store.history(ladder.name, player_id, history_limit)
        row = _player(ladder, match_id, player_id, (rank, ranks), history)
        if not row["found"] and archive is not None:
            row = await _archived_player(ladder, match_id, player_id, (rank, ranks), archive)
        players.append(row)
    answer = {"ladder": ladder.name, "model": ladder.model, "match_id": match_id, "source": "redis"}
    return {**answer, "players": players}


async def _from_archive(ladder: Ladder, match_id: str, archive: ArchiveReader | None) -> dict[str, Any]:
    """The explanation of a match the store keeps no marker of, from the archive's events."""
    if archive is None:
        raise UnknownMatch(
            f"no match {match_id!r} on ladder {ladder.name!r} within Redis's window: never applied, or "
            "applied longer ago than the markers are kept (STREAM_RATER_MARKER_TTL); no archive is "
            "configured (STREAM_RATER_ARCHIVE_URL) to look further back"
        )
    events = await archive.match_events(ladder.name, match_id)
    if not events:
        raise UnknownMatch(
            f"no match {match_id!r} on ladder {ladder.name!r}, neither in Redis nor in the archive"
        )
    placings = await archive.placings(ladder.name, match_id)
    ranks = dict(placings or ())
    everyone = [rank for _, rank in placings or ()]
    players = [
        await _archived_player(
            ladder,
            match_id,
            e["player_id"],
            (ranks[e["player_id"]], everyone) if e["player_id"] in ranks else None,
            archive,
            at,
        )
        for at, e in events
    ]
    answer = {"ladder": ladder.name, "model": ladder.model, "match_id": match_id, "source": "archive"}
    return {**answer, "players": players}


async def _archived_player(
    ladder: Ladder,
    match_id: str,
    player_id: str,
    placing: tuple[int, list[int]] | None,
    archive: ArchiveReader,
    position: int | None = None,
) -> dict[str, Any]:
    """One player's part from the archive: their event at `position` (looked up when None)
    with the corrections after it and the events back to their previous match."""
    if position is None:
        position = next(
            (
                at
                for at, e in await archive.match_events(ladder.name, match_id)
                if e["player_id"] == player_id
            ),
            None,
        )
        if position is None:
            return _player(ladder, match_id, player_id, placing, [])
    return _player(
        ladder, match_id, player_id, placing, await archive.around(ladder.name, player_id, position)
    )


def _actual(rank: float, ranks: Sequence[float], two_teams: bool) -> dict[str, Any]:
    """What happened to a team placed `rank` among the players' `ranks` (the match's, lower is
    better): ``{"result", "rank"}`` for two teams, ``{"rank", "ahead"}`` (the share of other
    placings it finished ahead of) for more, in the form of the event's ``expected``. ``rank``
    is 1-based whatever numbers the match used, as ``expected.rank`` and leaderboard ranks are:
    1 + the distinct placings better than the team's (1 = first; drawn teams share it)."""
    others = sorted(set(ranks) - {rank})
    place = 1 + sum(1 for r in others if r < rank)
    if two_teams:
        result = "draw" if not others else "win" if rank < others[0] else "loss"
        return {"result": result, "rank": place}
    return {"rank": place, "ahead": sum(1 for r in others if rank < r) / len(others) if others else 0.0}


def _player(
    ladder: Ladder, match_id: str, player_id: str, placing: tuple[int, list[int]] | None, history: list[Event]
) -> dict[str, Any]:
    """One player's part of the explanation, from their `history` (newest first);
    `placing` is their team's rank and every rated player's (None: unknown, ``actual`` null)."""
    at = next(
        (i for i, e in enumerate(history) if e["match_id"] == match_id and e.get("kind", "match") == "match"),
        None,
    )
    if at is None:
        actual = None if placing is None else _actual(*placing, len(set(placing[1])) <= 2)
        return {"player_id": player_id, "found": False, "actual": actual}
    event = history[at]
    expected = event.get("expected")
    two_teams = "win" in expected if expected else placing is not None and len(set(placing[1])) <= 2
    newer, older = history[:at], history[at + 1 :]
    corrections = [
        {
            "id": e["correction"]["id"],
            "reason": e["correction"]["reason"],
            "voided_this_match": match_id in e["correction"]["voided"],
        }
        for e in reversed(newer)
        if e.get("kind") == "correction"
    ]
    before = next((i for i, e in enumerate(older) if e.get("kind", "match") == "match"), len(older))
    previous = older[before] if before < len(older) else None
    seasons = [e["season"]["id"] for e in older[:before] if e.get("kind") == "season"]
    return {
        "player_id": player_id,
        "found": True,
        "before": event["before"],
        "after": event["after"],
        "delta": event["delta"],
        "rating": event["rating"],
        "rating_delta": event.get("rating_delta"),
        "expected": expected,
        "actual": None if placing is None else _actual(*placing, two_teams),
        "idle": _idle(ladder, event, previous),
        "season_reset": seasons[0] if seasons else None,
        "corrections": corrections,
    }


def _idle(ladder: Ladder, event: Event, previous: Event | None) -> dict[str, Any] | None:
    """The idle-time growth of the player's σ before `event`: the stored σ, the σ as of the
    match (`RatingModel.as_of` of the time since the `previous` match), and that time; None
    when nothing grew (no σ, no previous match known, or a model without time dynamics)."""
    sigma = event["before"]["sigma"]
    if sigma is None or previous is None:
        return None
    idle = max(0.0, parse_timestamp(event["finished_at"]) - parse_timestamp(previous["finished_at"]))
    grown = ladder.rating_model.as_of(Rating(event["before"]["mu"], sigma), idle).sigma
    if grown is None or grown == sigma:
        return None
    return {"seconds": idle, "sigma_stored": sigma, "sigma_as_of_match": grown}
