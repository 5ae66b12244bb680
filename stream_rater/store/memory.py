"""In-process state store for replay and unit tests; same semantics as the Redis store."""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stream_rater.contracts.modes import split_board, stored_id
from stream_rater.store.base import (
    BoardAround,
    BoardRanks,
    BoardRow,
    Commit,
    CommitConflict,
    Event,
    Generations,
    Lookup,
    PlayerState,
    RatingTotals,
    ReadRequest,
    Snapshot,
    StateStore,
    StateWrite,
    Void,
)
from stream_rater.store.status import refusal
from stream_rater.store.values import QUALITY_WINDOW, trim_since


@dataclass
class _Generation:
    players: dict[str, PlayerState] = field(default_factory=dict)
    effects: dict[str, PlayerState] = field(default_factory=dict)
    applied: dict[str, list[Event]] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    active: dict[str, float] = field(default_factory=dict)
    #: Season-start record id → the leaderboard as the season it ended left it.
    seasons: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Season-start record id → the state before it of each player it wrote (as Redis keeps).
    season_states: dict[str, dict[str, PlayerState]] = field(default_factory=dict)
    history: dict[str, deque[Event]] = field(default_factory=dict)
    placings: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    quality: dict[str, dict[str, float]] = field(default_factory=dict)
    quality_window: dict[str, deque[list[Any]]] = field(default_factory=dict)
    watermark: int = 0
    positions: dict[int, int] = field(default_factory=dict)
    params: dict[str, Any] | None = None
    voids_version: int = 0  # of the voids it was built with
    #: Correction events staged for the switch to this generation, by player id.
    staged: dict[str, Event] = field(default_factory=dict)


@dataclass
class _Ladder:
    generations: dict[int, _Generation] = field(default_factory=lambda: {0: _Generation()})
    live: int = 0
    staging: int | None = None
    last: int = 0
    lock: tuple[str, float] | None = None  # owner, expiry (monotonic)
    frozen: tuple[str, float] | None = None
    #: After a switch: the players whose correction events are not sent yet, and the expiry.
    held: tuple[set[str], float] = (set(), 0.0)
    outbox: list[Event] = field(default_factory=list)
    #: The request of the last begin and the generation it abandoned (a repeat answers them).
    begun: tuple[str | None, int | None] = (None, None)
    voids: dict[str, Void] = field(default_factory=dict)
    voids_version: int = 0  # counts changes of the voids


def _holder(lease: tuple[str, float] | None) -> str | None:
    return lease[0] if lease is not None and lease[1] > time.monotonic() else None


def _waits(state: _Ladder, commit: Commit) -> bool:
    """Whether a live commit is refused: the ladder is frozen, or it writes a held player."""
    players, expiry = state.held
    return _holder(state.frozen) is not None or (
        expiry > time.monotonic() and any(w.player_id in players for w in commit.writes if not w.is_effect)
    )


class MemoryStore(StateStore):
    """Dict-backed `StateStore`. Commits are checked exactly like the Redis script's."""

    def __init__(self, history_limit: int = 100) -> None:
        self.history_limit = history_limit
        self.round_trips = 0
        self._ladders: dict[str, _Ladder] = defaultdict(_Ladder)

    def _generation(self, ladder: str, generation: int | None) -> _Generation:
        state = self._ladders[ladder]
        if generation is None:
            return state.generations[state.live]
        if generation != state.staging:
            raise refusal("gone", ladder, generation)
        return state.generations[generation]

    async def read_many(self, requests: Sequence[ReadRequest]) -> list[Snapshot]:
        self.round_trips += bool(requests)
        return [self._read(request) for request in requests]

    def _read(self, request: ReadRequest) -> Snapshot:
        ladder, player_ids, effect_ids, match_ids, generation, _ = request
        gen = self._generation(ladder, generation)
        voids = self._ladders[ladder].voids
        return Snapshot(
            players={p: gen.players[p] for p in player_ids if p in gen.players},
            effects={e: gen.effects[e] for e in effect_ids if e in gen.effects},
            applied={m: gen.applied.get(m, []) for m in self._applied(gen, request)},
            watermark=gen.watermark,
            generation=self._ladders[ladder].live if generation is None else generation,
            voided=frozenset(m for m in match_ids if m in voids),
            params=gen.params,
        )

    @staticmethod
    def _applied(gen: _Generation, request: ReadRequest) -> list[str]:
        """The match ids of `request` applied to `gen`: marked, or whose record is below the
        position of its partition (as ``read.lua``)."""
        records = request.records or [None] * len(request.match_ids)
        return [
            m
            for m, record in zip(request.match_ids, records)
            if m in gen.applied or (record is not None and record[1] < gen.positions.get(record[0], 0))
        ]

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitConflict | None]:
        self.round_trips += bool(commits)
        outcomes: list[CommitConflict | None] = []
        for commit in commits:
            try:
                self._commit(commit)
            except CommitConflict as refused:
                outcomes.append(refused)
            else:
                outcomes.append(None)
        return outcomes

    def _commit(self, commit: Commit) -> None:
        """Refuse `commit` as the commit script would, or apply it."""
        ladder = commit.ladder
        if commit.generation is None and _waits(self._ladders[ladder], commit):
            raise refusal("frozen", ladder)
        gen = self._generation(ladder, commit.generation)
        number = self._ladders[ladder].live if commit.generation is None else commit.generation
        if commit.unread is not None and self._changed(gen, commit, (number, gen.watermark)):
            raise refusal("stale", ladder)
        for match_id in commit.markers:
            if match_id in gen.applied:
                raise refusal("applied", ladder, match_id)
        checked = commit.read_at != (number, gen.watermark)  # as commit.lua does
        for write in commit.writes if checked else ():
            current = (gen.effects if write.is_effect else gen.players).get(write.player_id)
            if (current.version if current else 0) != write.expected_version:
                raise refusal("conflict", ladder, write.player_id)
        self._apply(gen, commit)

    def _changed(self, gen: _Generation, commit: Commit, now: tuple[int, int]) -> bool:
        """Whether a commit computed without a read (`Commit.unread`) must be refused: what
        the read would have shown is not what its processor held (as ``commit.lua``)."""
        voids = self._ladders[commit.ladder].voids
        return (
            commit.read_at != now
            or any(offset < gen.positions.get(p, 0) for p, offset in (commit.unread or {}).items())
            or any(m in gen.applied or m in voids for m in commit.markers)
        )

    def _apply(self, gen: _Generation, commit: Commit) -> None:
        """Write `commit` (checked) into `gen`."""
        if commit.season is not None:  # the ending season's board: the eligible one
            since = trim_since(commit, time.time())
            gen.seasons[commit.season] = {
                p: s for p, s in gen.scores.items() if since is None or gen.active.get(p, math.inf) >= since
            }
            gen.season_states[commit.season] = {
                w.player_id: gen.players[w.player_id]
                for w in commit.writes
                if not w.is_effect and w.player_id in gen.players
            }
        for write in commit.writes:
            _write(gen, write)
        for match_id in commit.produced:  # before the new markers, as the Redis script does
            if match_id in gen.applied:
                gen.applied[match_id] = []
        gen.applied.update(commit.markers)
        for scorer, (add, scores) in commit.quality.items():
            totals = gen.quality.setdefault(scorer, {})
            for name, value in add.items():
                totals[name] = totals.get(name, 0) + value
            gen.quality_window.setdefault(scorer, deque(maxlen=QUALITY_WINDOW)).extendleft(scores)
        gen.placings.update((m, [(p, r) for p, r in rows]) for m, rows in commit.placings.items())
        gen.watermark += len(commit.markers)
        for partition, offset in commit.positions.items():
            gen.positions[partition] = max(offset, gen.positions.get(partition, 0))
        for player_id, entries in commit.history.items():
            log = gen.history.setdefault(player_id, deque(maxlen=self.history_limit))
            log.extendleft(entries)

    async def players(
        self,
        ladder: str,
        effects: bool = False,
        generation: int | None = None,
        only: Collection[str] | None = None,
    ) -> dict[str, PlayerState]:
        gen = self._generation(ladder, generation)
        stored = gen.effects if effects else gen.players
        return dict(stored) if only is None else {i: stored[i] for i in only if i in stored}

    async def forget_produced(self, produced: Mapping[str, tuple[int, Collection[str]]]) -> None:
        for ladder, (generation, match_ids) in produced.items():
            gen = self._ladders[ladder].generations.get(generation)
            for match_id in match_ids:  # the marker stays, its events go (as a commit's `produced`)
                if gen is not None and match_id in gen.applied:
                    gen.applied[match_id] = []

    async def leaderboard(
        self, ladder: str, top: int, start: int = 0, season: int | None = None
    ) -> list[tuple[str, float]]:
        gen = self._generation(ladder, None)
        if season is None:
            scores = gen.scores
        elif 1 <= season <= len(gen.seasons):
            scores = list(gen.seasons.values())[season - 1]
        else:
            raise KeyError(season)
        return [(row.player_id, row.score) for row in _ranked(scores)[start : start + top]]

    async def season_states(
        self, ladder: str, season: int, player_ids: Sequence[str]
    ) -> dict[str, PlayerState]:
        gen = self._generation(ladder, None)
        if not 1 <= season <= len(gen.season_states):
            raise KeyError(season)
        states = list(gen.season_states.values())[season - 1]
        return {p: states[p] for p in player_ids if p in states}

    async def seasons(self, ladder: str) -> list[str]:
        return list(self._generation(ladder, None).seasons)

    async def board_ranks(self, ladder: str, player_ids: Sequence[str], since: float | None) -> BoardRanks:
        rows = {row.player_id: row.rank for row in self._board(ladder, since)}
        return BoardRanks({p: rows[p] for p in player_ids if p in rows}, len(rows))

    async def board_top(
        self, ladder: str, top: int, since: float | None, season: int | None = None
    ) -> list[BoardRow]:
        if season is None:
            return self._board(ladder, since)[:top]
        gen = self._generation(ladder, None)
        if not 1 <= season <= len(gen.seasons):
            raise KeyError(season)
        return _ranked(list(gen.seasons.values())[season - 1])[:top]

    async def board_around(
        self, ladder: str, player_id: str, n: int, since: float | None
    ) -> BoardAround | None:
        rows = self._board(ladder, since)
        at = next((i for i, row in enumerate(rows) if row.player_id == player_id), None)
        if at is None:
            return None
        return BoardAround(rows[max(0, at - n) : at + n + 1], rows[at].rank, len(rows))

    async def rating_totals(self, ladder: str, since: float | None) -> RatingTotals:
        scores = [row.score for row in self._board(ladder, since)]
        return RatingTotals(len(scores), math.fsum(scores), len(scores), math.fsum(scores))

    async def recount_totals(self, ladder: str, since: float | None) -> RatingTotals:
        return await self.rating_totals(ladder, since)

    async def trim_board(self, ladder: str, since: float) -> int:
        gen = self._generation(ladder, None)
        idle = [p for p, last in gen.active.items() if last < since]
        for player_id in idle:
            del gen.scores[player_id], gen.active[player_id]
        return len(idle)

    async def board_entries(self, ladder: str, since: float | None) -> tuple[dict[str, float], float | None]:
        rows = {row.player_id: row.score for row in self._board(ladder, since)}
        return rows, math.fsum(rows.values())

    def _board(self, ladder: str, since: float | None) -> list[BoardRow]:
        """The live eligible leaderboard at `since`, ranked, in the Redis store's order (a player
        written without a last match never goes idle); `ladder` may be a board name
        ``<ladder>@<mode>`` (`contracts.modes.board_name`): that mode's board."""
        ladder, mode = split_board(ladder)
        gen = self._generation(ladder, None)
        scores, active = gen.scores, gen.active
        if mode is not None:  # a moded ladder's board of one mode: its stored ids ``<mode>@<id>``
            scores, active = _of_mode(scores, mode), _of_mode(active, mode)
        if since is None:
            return _ranked(scores)
        return _ranked({p: s for p, s in scores.items() if active.get(p, math.inf) >= since})

    async def history(self, ladder: str, player_id: str, limit: int) -> list[Event]:
        return list(self._generation(ladder, None).history.get(player_id, ()))[:limit]

    async def quality(self, ladder: str, scorer: str, last: int) -> tuple[dict[str, float], list[list[Any]]]:
        gen = self._generation(ladder, None)
        return dict(gen.quality.get(scorer, {})), list(gen.quality_window.get(scorer, ()))[:last]

    async def placings(self, ladder: str, match_id: str) -> list[tuple[str, int]] | None:
        gen = self._generation(ladder, None)
        return list(gen.placings.get(match_id, ())) if match_id in gen.applied else None

    async def lookup(self, ladder: str, player_ids: Sequence[str], since: float | None = None) -> Lookup:
        self.round_trips += 1
        players = self._generation(ladder, None).players
        ranks = await self.board_ranks(ladder, player_ids, since)
        return Lookup(
            {p: players[p] for p in player_ids if p in players},
            {p: rank - 1 for p, rank in ranks.ranks.items()},
            ranks.total,
        )

    async def ladders(self) -> list[str]:
        return sorted(name for name in self._ladders if self._generation(name, None).players)

    async def generations(self, ladder: str) -> Generations:
        state = self._ladders[ladder]
        live = state.generations[state.live]
        return Generations(
            state.live,
            state.staging,
            dict(live.positions),
            live.params,
            _holder(state.lock),
            live.voids_version != state.voids_version,
        )

    async def begin_rerate(
        self,
        ladder: str,
        owner: str,
        lease: float,
        params: Mapping[str, Any] | None,
        request: str | None = None,
    ) -> tuple[int, int | None]:
        state = self._ladders[ladder]
        if state.lock is not None and (holder := _holder(state.lock)) not in (None, owner):
            raise refusal("running", ladder, holder, (state.lock[1] - time.monotonic()) * 1000)
        state.lock = (owner, time.monotonic() + lease)
        if request is not None and state.begun[0] == request and state.staging is not None:
            return state.staging, state.begun[1]  # sent again: the same answer
        abandoned = state.staging
        state.last = max(state.last, state.live) + 1
        state.staging = state.last
        state.generations[state.staging] = _Generation(params=dict(params) if params else None)
        state.begun = (request, abandoned)
        return state.staging, abandoned

    async def restore_params(self, ladder: str, generation: int, params: Mapping[str, Any] | None) -> None:
        self._ladders[ladder].generations[generation].params = dict(params) if params else None

    def _owned(self, ladder: str, owner: str) -> _Ladder:
        state = self._ladders[ladder]
        if _holder(state.lock) != owner:
            raise refusal("lost", ladder)
        return state

    async def renew(self, ladder: str, owner: str, lease: float) -> None:
        state = self._owned(ladder, owner)
        state.lock = (owner, time.monotonic() + lease)
        if _holder(state.frozen) == owner:
            state.frozen = (owner, time.monotonic() + lease)
        state.held = (state.held[0], time.monotonic() + lease)

    async def freeze(self, ladder: str, owner: str, ttl: float) -> None:
        self._owned(ladder, owner).frozen = (owner, time.monotonic() + ttl)

    async def stage(
        self, ladder: str, owner: str, staging: int, events: Sequence[Event], dropped: Iterable[str] = ()
    ) -> None:
        state = self._owned(ladder, owner)
        if state.staging != staging:
            raise refusal("lost", ladder)
        staged = state.generations[staging].staged
        staged.update((event["player_id"], event) for event in events)
        for player_id in dropped:
            staged.pop(player_id, None)

    async def switch(
        self,
        ladder: str,
        owner: str,
        staging: int,
        live: Generations,
        outbox: Sequence[Event] = (),
        dropped: Iterable[str] = (),
    ) -> None:
        state = self._owned(ladder, owner)
        if state.live == staging:  # done already: sent again after its reply was lost
            return
        if _holder(state.frozen) != owner or state.staging != staging:
            raise refusal("lost", ladder)
        if state.live != live.live or state.generations[state.live].positions != live.positions:
            raise refusal("moved", ladder)
        await self.stage(ladder, owner, staging, outbox, dropped)
        staged = state.generations[staging].staged
        state.live, state.staging = staging, None
        state.outbox = [staged[player_id] for player_id in sorted(staged)]
        expiry = state.frozen[1] if state.frozen is not None else 0.0
        state.held, state.frozen = (set(staged), expiry), None
        staged.clear()

    async def copy_seasons(self, ladder: str, source: int, target: int, seasons: Sequence[str]) -> None:
        generations = self._ladders[ladder].generations
        old, new = generations[source], generations[target]
        for season in seasons:
            new.seasons[season] = dict(old.seasons[season])
            new.season_states[season] = dict(old.season_states[season])

    async def release(self, ladder: str, owner: str, players: Iterable[str]) -> None:
        self._owned(ladder, owner).held[0].difference_update(players)

    async def finish_rerate(self, ladder: str, owner: str) -> None:
        state = self._ladders[ladder]
        held, expiry = state.held
        left = state.outbox or _holder(state.frozen) or (held and expiry > time.monotonic())
        if _holder(state.lock) is None and not left:
            return  # sent again after it took effect: nothing is left
        state = self._owned(ladder, owner)
        state.outbox, state.frozen, state.lock, state.held = [], None, None, (set(), 0.0)

    async def abort_rerate(self, ladder: str, owner: str) -> int | None:
        state = self._ladders[ladder]
        if _holder(state.lock) != owner:
            # Sent again after it took effect: the generation it forgot, to drop again.
            return state.last if state.staging is None and state.last > state.live else None
        staging, state.staging, state.frozen, state.lock = state.staging, None, None, None
        return staging  # a hold stays (see control.lua)

    async def drop_generation(self, ladder: str, generation: int) -> None:
        state = self._ladders[ladder]
        if generation not in (state.live, state.staging):
            state.generations.pop(generation, None)

    async def outbox(self, ladder: str) -> list[Event]:
        return list(self._ladders[ladder].outbox)

    async def unproduced(
        self, ladder: str, generation: int, match_ids: Sequence[str]
    ) -> dict[str, list[Event]]:
        applied = self._ladders[ladder].generations[generation].applied
        return {m: list(applied[m]) for m in match_ids if applied.get(m)}

    async def voids(self, ladder: str) -> dict[str, Void]:
        return dict(self._ladders[ladder].voids)

    async def set_voids(
        self, ladder: str, add: Mapping[str, Void], remove: Iterable[str], generation: int
    ) -> None:
        state = self._ladders[ladder]
        remove = list(remove)
        if add or remove:
            state.voids.update(add)
            for match_id in remove:
                state.voids.pop(match_id, None)
            state.voids_version += 1
        state.generations[generation].voids_version = state.voids_version


def _write(gen: _Generation, write: StateWrite) -> None:
    """Store one state of a commit, and its player's leaderboard and activity entries."""
    (gen.effects if write.is_effect else gen.players)[write.player_id] = write.state
    if write.is_effect:
        return
    if write.leaderboard_score is not None:
        gen.scores[write.player_id] = write.leaderboard_score
        if write.active is not None:
            gen.active[write.player_id] = write.active
    else:
        gen.scores.pop(write.player_id, None)
        gen.active.pop(write.player_id, None)


def _of_mode(by_id: Mapping[str, float], mode: str) -> dict[str, float]:
    """The entries of `by_id` (by stored id) of one mode, by player id (`contracts.modes`)."""
    head = stored_id(mode, "")
    return {p[len(head) :]: v for p, v in by_id.items() if p.startswith(head)}


def _ranked(scores: Mapping[str, float]) -> list[BoardRow]:
    """`scores` as leaderboard rows, best first (ties: id descending, as Redis orders them),
    each ranked 1 + the players scored strictly higher."""
    rows: list[BoardRow] = []
    for i, (player_id, score) in enumerate(
        sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    ):
        rows.append(BoardRow(player_id, score, rows[-1].rank if rows and rows[-1].score == score else i + 1))
    return rows
