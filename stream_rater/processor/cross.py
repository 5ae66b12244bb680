"""The cross-update of a ladder with modes (issue 48), in the processor: after a player's
match in mode M, their states in the ladder's other modes move too (`rating.modes.cross_update`,
the modes' skills taken as jointly Gaussian with correlation ρ, the ladder's ``mode_coupling``).

Each other-mode state the player has is read at the match's time (aged by its idle time, as
the read API and `offline.modes.CrossReplay` read it), moved, and written in the batch's one
commit with the match's states: one version past the one read, its leaderboard score, its
last-played time the match's (the state has been aged to it; so it is not aged twice), its
games as they were (the player did not play in that mode). Every such move is a rating-changed
event of the ``cross`` kind (`contracts.as_cross`), in the match's marker and the
player's history in that mode, so each mode's events still chain (each ``before`` the previous
``after``) and a redelivery re-emits them with the match's own. A shadow writes the moves and
builds no event, as for its matches. Pure, no I/O: the stream and a replay compute the same.
"""

from __future__ import annotations

from collections.abc import Mapping

from stream_rater.config.ladders import Ladder
from stream_rater.contracts import MatchFinished, as_cross, format_timestamp, rating_changed
from stream_rater.contracts.modes import split_stored, stored_id
from stream_rater.processor.batch import _Changes, _Setting
from stream_rater.rating.base import Rating, RatingModel
from stream_rater.rating.modes import cross_update
from stream_rater.store.base import Event, PlayerState


def cross_moves(
    ladder: Ladder,
    settings: Mapping[str, _Setting],
    changes: _Changes,
    stored: Mapping[str, PlayerState],
    match: MatchFinished,
    before: Mapping[str, Rating],
    events: list[Event],
) -> None:
    """Move the other-mode states of `match`'s rated players (`before`: stored id → their
    state in the match's mode as the model rated it) into `changes`, appending a cross event
    per move to `events` (the match's) unless the setting builds none."""
    assert match.mode is not None
    coupling, at = ladder.mode_coupling, match.finished_at
    for sid, seen in before.items():
        after = changes.players[sid]
        moved_by = Rating(after.mu, after.sigma, after.extra)
        _, player_id = split_stored(sid)
        for mode in ladder.modes:
            other = stored_id(mode, player_id)
            state = changes.players.get(other) or stored.get(other)
            if mode == match.mode or state is None:
                continue
            s = settings[mode]
            read = as_read(s.model, state, at)
            moved = cross_update(read, seen, moved_by, coupling)
            new = _written(s, state, moved, at, stored.get(other))
            rating = s.model.display(moved)
            changes.player(other, new, rating, s)
            if s.builds_events:
                event = _event(s, match, other, state, new, rating)
                events.append(event)
                changes.history.setdefault(other, []).append(event)


def as_read(model: RatingModel, state: PlayerState, at: float) -> Rating:
    """A stored state as `model` reads it at `at` (the read API's view): aged by its idle time."""
    rating = Rating(state.mu, state.sigma, state.extra)
    if state.last_played is None:
        return rating
    return model.as_of(rating, max(0.0, at - state.last_played))


def _written(
    s: _Setting, state: PlayerState, moved: Rating, at: float, stored: PlayerState | None
) -> PlayerState:
    """The state to write: `moved`, aged to `at` (its last-played time), games unchanged, one
    version past the stored one (the batch's if it changed it already), peak raised."""
    version = state.version if stored is None or state is not stored else stored.version + 1
    rating = s.model.display(moved)
    peak, peak_at = state.peak, state.peak_at
    if peak is None or rating > peak:
        peak, peak_at = rating, at
    last = at if state.last_played is None else max(state.last_played, at)
    extra = moved[2] if len(moved) > 2 else None
    return state._replace(
        mu=moved.mu,
        sigma=moved.sigma,
        extra=extra,
        last_played=last,
        version=version,
        peak=peak,
        peak_at=peak_at,
    )


def _event(
    s: _Setting, match: MatchFinished, sid: str, state: PlayerState, new: PlayerState, rating: float
) -> Event:
    assert match.mode is not None
    event = rating_changed(
        match.match_id,
        s.ladder.name,
        sid,
        s.model.name,
        state,
        new,
        rating,
        new.games,
        format_timestamp(match.finished_at),
        s.processed_at,
        provisional=None if s.flag is None else s.flag(new.games, new.sigma),
        before_rating=s.model.display(Rating(state.mu, state.sigma)),
    )
    return as_cross(event, match.mode)
