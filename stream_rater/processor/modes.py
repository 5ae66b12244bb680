"""A ladder with modes (issue 48; `config.modes`), in the processor: a player's state per
(player, mode) inside the one ladder, and their first match in a mode started from what the
ladder knows of them in its other modes (`rating.modes.first_in_mode`, each other mode's state
as read at the match's time, aged by its idle time: the most certain of them), and after each
match their other modes moved by the cross-update (`processor.cross`), in the same commit.
`offline.modes.CrossReplay` is this rule offline (what ``evaluate``/``tune --form cross``
measure).

Why inside the one ladder: the ladder is the unit of order. Its modes share its partition, its
Redis slot, its markers, watermark, positions, re-rates and checkpoints, so stream = replay
holds as for any ladder. A player's state in mode M is stored under the id ``M@<player id>``
(`contracts.modes.stored_id`): the store's buckets, histories and version checks stay as they
are, and a batch reads each of its players' states in every mode of the ladder in its one read
(`other_modes`: the ladder's modes in declared order), so the prior of a first match in a mode
is computed from the same states by the stream and by a replay, whatever the batches.

The planner (`planner`) is used as it is: `plan_moded` runs its `_one_match` with one setting
per mode (the mode's own model: the ladder's parameters, then the mode's), on one `_Changes`,
so a later match of the batch sees an earlier one's states in every mode. A player new to the
mode and known in another is given their prior as a stored state of version 0 for the time of
that one match (so the written state expects "absent", as for any new player). The events are
then turned into the player's own (`contracts.with_mode`), and the batch's quality is kept per
mode (scorer ``live@<mode>``) as well as for the ladder (``live``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from stream_rater.config.ladders import Ladder
from stream_rater.contracts import MatchFinished, Player, Team, with_mode
from stream_rater.contracts.modes import SEPARATOR, split_stored, stored_id
from stream_rater.processor.batch import PriorObserver, _Changes, _Setting
from stream_rater.processor.cross import as_read, cross_moves
from stream_rater.processor.planner import _commit, _one_match, _Plan
from stream_rater.processor.quality import LIVE, increments
from stream_rater.rating.base import Rating
from stream_rater.rating.modes import first_in_mode
from stream_rater.store.base import PlayerState, Snapshot


def mode_scorer(mode: str) -> str:
    """The live-quality scorer of one mode of a ladder: ``live@<mode>``."""
    return f"{LIVE}{SEPARATOR}{mode}"


def qualified(ladder: Ladder, match: MatchFinished) -> MatchFinished:
    """`match` with its players named by their stored ids in its mode (unchanged on a ladder
    without modes, and for a season start, which has no players)."""
    if not ladder.modes or match.mode is None:
        return match
    mode = match.mode
    teams = tuple(
        replace(team, players=tuple(replace(p, id=stored_id(mode, p.id)) for p in team.players))
        for team in match.teams
    )
    return replace(match, teams=teams)


def other_modes(ladder: Ladder, stored: Iterable[str]) -> list[str]:
    """The stored ids of the `stored` players in each of `ladder`'s modes, in a fixed order
    (player first seen, then the modes as declared): what a batch reads besides its own."""
    ids: dict[str, None] = {}
    for sid in stored:
        _, player_id = split_stored(sid)
        ids.update(dict.fromkeys(stored_id(m, player_id) for m in ladder.modes))
    return list(ids)


def plan_moded(
    ladder: Ladder,
    matches: Sequence[MatchFinished],
    snapshot: Snapshot,
    processed_at: str,
    observe: PriorObserver | None = None,
    positions: Mapping[int, int] | None = None,
    generation: int | None = None,
) -> _Plan:
    """`planner.plan_batch` of a ladder with modes: each match by its mode's setting, a
    player's first match in a mode from `first_in_mode`, then their other modes moved by the
    cross-update (`processor.cross.cross_moves`); pure, no I/O."""
    stored = dict(snapshot.players)  # plus, for one match at a time, the first-in-mode priors
    shared = replace(snapshot, players=stored)
    base = _Setting.of(ladder, shared, processed_at, observe, generation)
    settings = {
        m: _Setting.of(ladder.mode_ladder(m), shared, processed_at, observe, generation) for m in ladder.modes
    }
    changes = _Changes(applied=dict(snapshot.applied))
    by_mode: dict[str, list[list[object]]] = {}
    for match in matches:
        s = base if match.mode is None else settings[match.mode]
        primed = _prime(ladder, s, changes, stored, match)
        before = _before(ladder, s, changes, stored, match)
        scored = len(changes.scores)
        result = _one_match(s, changes, match)
        for sid in primed:
            del stored[sid]
        if before and not (result.duplicate or result.voided or result.unrated):
            cross_moves(ladder, settings, changes, stored, match, before, result.events)
        if match.mode is not None and len(changes.scores) > scored:
            by_mode.setdefault(match.mode, []).append(changes.scores[-1])
        if not result.duplicate:
            for event in result.events:
                with_mode(event, *split_stored(event["player_id"]))
        changes.results.append(result)
    commit = _commit(base, changes, positions)
    quality = dict(commit.quality)
    quality.update((mode_scorer(m), (increments(scores), scores)) for m, scores in by_mode.items())
    return _Plan(changes.results, replace(commit, quality=quality, moded=True))


def _prime(
    ladder: Ladder, s: _Setting, changes: _Changes, stored: dict[str, PlayerState], match: MatchFinished
) -> list[str]:
    """Put into `stored` the first-in-mode prior (a state of version 0) of each player of
    `match` new to its mode and known in another; their stored ids."""
    primed: list[str] = []
    if match.mode is None:
        return primed
    for player in _players(match.teams):
        sid = player.id
        if sid in changes.players or sid in stored:
            continue
        _, player_id = split_stored(sid)
        others = []
        for mode in sorted(ladder.modes):
            other = stored_id(mode, player_id)
            state = changes.players.get(other) or stored.get(other)
            if state is not None and mode != match.mode:
                others.append(as_read(ladder.mode_ladder(mode).rating_model, state, match.finished_at))
        if others:  # the most certain as read: cross-updates told each of the others' matches
            others = [min(others, key=lambda r: r.sigma or 0.0)]
            prior = first_in_mode(s.model, others, ladder.mode_coupling)
            stored[sid] = PlayerState(prior.mu, prior.sigma, extra=prior.extra)
            primed.append(sid)
    return primed


def _before(
    ladder: Ladder, s: _Setting, changes: _Changes, stored: dict[str, PlayerState], match: MatchFinished
) -> dict[str, Rating]:
    """Each rated player's state in `match`'s mode as its model will rate it (the rules'
    adjustment, then aged by its idle time): what their cross-updates start from. Empty for a
    match without a mode, a season start, or a ladder whose coupling is 0."""
    if match.mode is None or match.season is not None or not ladder.mode_coupling:
        return {}
    at, seen = match.finished_at, {}
    for player in _players(match.teams):
        state = changes.players.get(player.id) or stored.get(player.id)
        if state is None or not player.rated:
            continue
        seen[player.id] = as_read(s.model, state if s.adjust is None else s.adjust(state, at), at)
    return seen


def _players(teams: Sequence[Team]) -> Iterable[Player]:
    return (p for team in teams for p in team.players)
