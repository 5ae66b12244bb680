"""Batch of validated match events in → state commits + rating-changed events out.

Transport-agnostic (no faust): the stream worker and `replay` both call `Processor.process`,
so what the stream computes and what a replay computes are the same by construction.

A batch costs one store read and one store commit, however many ladders it spans (one more
read when states it holds from its last batch turn out stale). Matches are applied in order
in memory (a later match of the batch sees the earlier ones' results). If the commit is refused
(another worker changed a player meanwhile, or applied one of the matches), the batch is
re-read and recomputed — never read-modify-write without the version check.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import isfinite
from typing import Any, NamedTuple

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished, format_timestamp, rating_changed, season_changed
from stream_rater.known_states import KnownStates
from stream_rater.rating.base import Outcome, Rating, RatingModel
from stream_rater.store.base import (
    Commit,
    Event,
    LadderFrozen,
    PlayerState,
    ReadRequest,
    Snapshot,
    StateWrite,
)
from stream_rater.store.roles import BatchStore
from stream_rater.waiting import backoff


class MatchResult(NamedTuple):
    """One match's rating-changed events; ``duplicate`` = it had been applied before,
    ``voided`` = an operator voided it, so it was not applied (and has no events);
    ``unrated`` = why the match is recorded but changes no rating (`Rules.unrated_reason`),
    or None. A season-start record's events are its players' soft resets.

    A duplicate carries the events its marker still holds — to re-emit, since they may never
    have reached the broker — or none once they are known produced (its marker was shrunk).

    A named tuple (like `PlayerState`): one is made per match."""

    match: MatchFinished
    events: list[Event]
    duplicate: bool
    voided: bool = False
    unrated: str | None = None


@dataclass(slots=True)
class BatchResult:
    """Results in input order, plus how many commits were refused and retried."""

    results: list[MatchResult] = field(default_factory=list)
    conflicts: int = 0

    @property
    def events(self) -> list[Event]:
        """Every rating-changed event of the batch, in order (duplicates re-emit those their
        markers still hold)."""
        return [e for r in self.results for e in r.events]


class NonFiniteRating(ArithmeticError):
    """A model returned NaN or infinity; the match is refused rather than stored."""


class Unratable(Exception):
    """Rating a match of the batch raised `cause` (the model, its rules or the events built
    from it; pure code, so the same match on the same states raises again): input the worker
    dead-letters and the offline tools skip (`process_skipping`), never infrastructure."""

    def __init__(self, ladder: str, cause: Exception) -> None:
        super().__init__(f"ladder {ladder!r}: {type(cause).__name__}: {cause}")
        self.ladder, self.cause = ladder, cause


class TooManyConflicts(RuntimeError):
    """A batch kept conflicting with concurrent commits beyond the retry limit."""


class StoreLost(RuntimeError):
    """The store holds less of a ladder than was committed to it: its data was lost (a Redis
    restart without persistence, a failover to a replica that missed writes, FLUSHDB,
    eviction). Applying more matches on top would silently rate them onto wrong states."""

    def __init__(self, ladder: str, reason: str) -> None:
        super().__init__(
            f"ladder {ladder!r}: {reason}; rebuild it from the matches topic "
            f"(stream-rater replay --from-topic --ladder {ladder} --store URL)"
        )
        self.ladder = ladder


@dataclass(slots=True)
class _LadderPart:
    """One ladder's matches of a batch, where they are in it, and how far they got."""

    ladder: Ladder
    indices: list[int] = field(default_factory=list)
    matches: list[MatchFinished] = field(default_factory=list)
    #: Partition → the offset after the ladder's last record of the batch in it.
    positions: dict[int, int] = field(default_factory=dict)
    attempts: int = 0
    snapshot: Snapshot = field(default_factory=lambda: Snapshot({}, {}, {}))
    results: list[MatchResult] = field(default_factory=list)

    def add(self, index: int, match: MatchFinished, record: tuple[int, int] | None) -> None:
        """Add the batch's `index`-th match, from `record` (partition, offset) if known."""
        self.indices.append(index)
        self.matches.append(match)
        if record is not None:
            partition, offset = record
            self.positions[partition] = max(self.positions.get(partition, 0), offset + 1)

    @property
    def starts_season(self) -> bool:
        """True for a part that is a season-start record (alone: see `Processor.process`)."""
        return self.matches[0].season is not None

    def ids(self) -> tuple[list[str], list[str]]:
        """The players and the effects of these matches, each once."""
        players = dict.fromkeys(p.id for m in self.matches for t in m.teams for p in t.players)
        effects = dict.fromkeys(e for m in self.matches for t in m.teams for e in t.effects)
        return list(players), list(effects)

    def request(self, generation: int | None, players: list[str], effects: list[str]) -> ReadRequest:
        """What to read for these matches: the states of `players` and `effects`."""
        match_ids = dict.fromkeys(m.match_id for m in self.matches)
        return ReadRequest(self.ladder.name, players, effects, list(match_ids), generation)


@dataclass(slots=True)
class _Plan:
    results: list[MatchResult]
    commit: Commit


#: ``_new(Cls, values)`` makes a named tuple without its Python-level ``__new__`` (about
#: half the cost); the hot loop builds several per player and match.
_new = tuple.__new__

#: Matches often share a finished_at (a tournament day); formatting it once each is cheaper.
_timestamp = functools.lru_cache(maxsize=4096)(format_timestamp)


def _per_player(match: MatchFinished, attr: str, default: Any) -> list[list[Any]]:
    return [[default if (v := getattr(p, attr)) is None else v for p in team.players] for team in match.teams]


#: Sees each match with its prior team ratings (effects last in their teams) just before
#: the model rates it — how `evaluate` makes its predictions with the very same states.
PriorObserver = Callable[[MatchFinished, list[list[Rating]], Outcome], None]


def plan_batch(
    ladder: Ladder,
    matches: Sequence[MatchFinished],
    snapshot: Snapshot,
    processed_at: str,
    observe: PriorObserver | None = None,
    positions: Mapping[int, int] | None = None,
    generation: int | None = None,
) -> _Plan:
    """Apply `matches` (all of `ladder`) in order to `snapshot`; pure, no I/O.

    Returns the results and the commit that makes them durable: new states expecting the
    versions of the snapshot, one marker per newly applied match, leaderboard scores and
    history entries, and `positions` (how far into the topic the matches go) for the
    `generation` read. Voided matches are skipped. `observe`, if given, sees every newly
    applied match's priors.

    A staging generation's markers (`generation` not None: a re-rate) are written without
    events, as shrunk ones: its events are never produced (the re-rate sends correction
    events instead), so there is nothing a redelivery could re-emit.
    """
    model: RatingModel = ladder.rating_model
    ladder_name, model_name, display, rate_match = ladder.name, model.name, model.display, model.rate_match
    rules = ladder.rules
    marks = rules.marks_provisional
    provisional = rules.provisional if marks else None
    qualifies = rules.qualifies if rules.filters_leaderboard else None
    tracks_activity = rules.leaderboard_active_days is not None
    checks_rated = rules.min_duration is not None or rules.min_players is not None
    needs_scores = model.needs_scores
    initial, initial_effect = model.initial(), model.initial_effect()
    new_player = PlayerState(initial.mu, initial.sigma, extra=initial.extra)
    new_effect = PlayerState(initial_effect.mu, initial_effect.sigma, extra=initial_effect.extra)
    stored_players, stored_effects = snapshot.players, snapshot.effects
    # States the batch changed, as they will be written: one version past the one read.
    players: dict[str, PlayerState] = {}
    effects: dict[str, PlayerState] = {}
    applied = dict(snapshot.applied)
    markers: dict[str, list[Event]] = {}
    history: dict[str, list[Event]] = {}
    leaderboard: dict[str, float | None] = {}
    results: list[MatchResult] = []
    season: str | None = None

    voided = snapshot.voided
    for match in matches:
        match_id = match.match_id
        if match_id in applied:
            results.append(_new(MatchResult, (match, applied[match_id], True, False, None)))
            continue
        if match_id in voided:
            results.append(_new(MatchResult, (match, [], False, True, None)))
            continue
        if match.season is not None:
            season = match_id
            resets = _season_events(ladder, match, snapshot, players, leaderboard, history, processed_at)
            applied[match_id] = resets
            markers[match_id] = resets if generation is None else []
            results.append(_new(MatchResult, (match, resets, False, False, None)))
            continue
        if checks_rated or not match.rated:
            reason = rules.unrated_reason(match)
            if reason is not None:
                applied[match_id] = markers[match_id] = []
                results.append(_new(MatchResult, (match, [], False, False, reason)))
                continue
        at = match.finished_at
        priors: list[list[PlayerState]] = []  # per team: its players' states, then its effects'
        teams: list[list[Rating]] = []
        elapsed: list[list[float | None]] = []
        plain = True  # every weight 1, every player rated, no effects
        for team in match.teams:
            prior = [players.get(p.id) or stored_players.get(p.id) or new_player for p in team.players]
            if team.effects:
                prior += [effects.get(e) or stored_effects.get(e) or new_effect for e in team.effects]
                plain = False
            elif plain:
                for p in team.players:
                    if p.weight != 1.0 or not p.rated:
                        plain = False
                        break
            priors.append(prior)
            ratings: list[Rating] = []
            gaps: list[float | None] = []
            for state in prior:
                ratings.append(_new(Rating, (state[0], state[1], state[5])))  # mu, sigma, extra
                gaps.append(None if state.last_played is None else max(0.0, at - state.last_played))
            teams.append(ratings)
            elapsed.append(gaps)
        weights = rated = scores = seconds = None
        if not plain:
            pad = [[1.0] * len(team.effects) for team in match.teams]
            weights = [w + e for w, e in zip(_per_player(match, "weight", 1.0), pad)]
            rated = [r + [True] * len(e) for r, e in zip(_per_player(match, "rated", True), pad)]
        if needs_scores:
            scores = _per_player(match, "score", 0.0)
            seconds = _per_player(match, "seconds_played", 0.0)
        outcome = _new(Outcome, (match.ranks(), weights, scores, seconds, elapsed, rated))
        if observe is not None:
            observe(match, teams, outcome)
        posterior = rate_match(teams, outcome)
        for team_post in posterior:
            for r in team_post:
                if not (isfinite(r.mu) and (r.sigma is None or isfinite(r.sigma))):
                    raise NonFiniteRating(
                        f"match {match_id!r}: model {model_name!r} produced a non-finite rating"
                    )

        events: list[Event] = []
        finished_at = _timestamp(at)
        for team, prior, team_post in zip(match.teams, priors, posterior):
            for player, before, new in zip(team.players, prior, team_post):
                if not player.rated:
                    continue
                pid = player.id
                rating = display(new)
                players[pid] = after = _after(before, new, at, stored_players.get(pid, new_player), rating)
                leaderboard[pid] = (
                    rating if qualifies is None or qualifies(after.games, after.sigma) else None
                )
                late = before.last_played is not None and at < before.last_played  # see `is_late`
                event = rating_changed(
                    match_id,
                    ladder_name,
                    pid,
                    model_name,
                    before[:2],
                    new[:2],
                    rating,
                    after.games,
                    finished_at,
                    processed_at,
                    late,
                    None if provisional is None else provisional(after.games, after.sigma),
                )
                events.append(event)
                history.setdefault(pid, []).append(event)
            if team.effects:
                n = len(team.players)
                for name, before, new in zip(team.effects, prior[n:], team_post[n:]):
                    effects[name] = _after(before, new, at, stored_effects.get(name, new_effect), None)
        applied[match_id] = events
        markers[match_id] = events if generation is None else []
        results.append(_new(MatchResult, (match, events, False, False, None)))

    writes = [
        _new(
            StateWrite,
            (
                pid,
                s,
                s.version - 1,
                False,
                score := leaderboard[pid],
                s.last_played if tracks_activity and score is not None else None,
            ),
        )
        for pid, s in players.items()
    ] + [_new(StateWrite, (name, s, s.version - 1, True, None, None)) for name, s in effects.items()]
    commit = Commit(
        ladder.name,
        writes,
        markers,
        history,
        positions or {},
        generation,
        season=season,
        read_at=(snapshot.generation, snapshot.watermark),
    )
    return _Plan(results, commit)


def _season_events(
    ladder: Ladder,
    record: MatchFinished,
    snapshot: Snapshot,
    players: dict[str, PlayerState],
    leaderboard: dict[str, float | None],
    history: dict[str, list[Event]],
    processed_at: str,
) -> list[Event]:
    """Apply the season-start `record` to every player of `snapshot` (which holds them all):
    each state pulled toward the prior (`Rules.season_reset`) is put in `players` with its
    leaderboard score; returns one season event per player whose state changed. Games, last
    match and peak stay as they were."""
    model, rules = ladder.rating_model, ladder.rules
    overrides = dict(record.season.params) if record.season is not None else {}
    qualifies = rules.qualifies if rules.filters_leaderboard else None
    marks = rules.marks_provisional
    started_at = _timestamp(record.finished_at)
    events: list[Event] = []
    for pid, stored in snapshot.players.items():
        state = players.get(pid, stored)
        reset = rules.season_reset(model, Rating(state.mu, state.sigma, state.extra), overrides)
        if (reset.mu, reset.sigma) == (state.mu, state.sigma):
            continue
        players[pid] = after = state._replace(mu=reset.mu, sigma=reset.sigma, version=stored.version + 1)
        rating = model.display(reset)
        leaderboard[pid] = rating if qualifies is None or qualifies(after.games, after.sigma) else None
        event = season_changed(
            record.match_id,
            ladder.name,
            pid,
            model.name,
            (state.mu, state.sigma),
            (reset.mu, reset.sigma),
            rating,
            after.games,
            started_at,
            processed_at,
            rules.provisional(after.games, after.sigma) if marks else None,
            overrides,
        )
        events.append(event)
        history.setdefault(pid, []).append(event)
    return events


def is_late(result: MatchResult) -> bool:
    """True when the match finished before one of its players' last applied match.

    The rule: matches of a ladder are applied in log order, whatever their `finished_at`. A
    late match adds no inactivity time for that player (elapsed 0: the model's time-scaled
    dynamics see no gap), leaves the player's `last_played` where it was, and marks that
    player's rating-changed event ``"late": true``; the worker counts such matches.
    """
    return any("late" in event for event in result.events)


def _after(
    before: PlayerState, new: Rating, at: float, stored: PlayerState, rating: float | None
) -> PlayerState:
    """The state to write after a match at `at`: one version past the `stored` one; its peak
    raised to the display `rating` if that is higher (None for effects: no peak)."""
    last = at if before.last_played is None else max(before.last_played, at)
    extra = new[2] if len(new) > 2 else None  # a model may build (mu, sigma) by tuple.__new__
    peak, peak_at = before.peak, before.peak_at
    if rating is not None and (peak is None or rating > peak):
        peak, peak_at = rating, at
    return _new(
        PlayerState, (new.mu, new.sigma, before.games + 1, last, stored.version + 1, extra, peak, peak_at)
    )


class Processor:
    """Applies batches of validated matches to a `StateStore`, exactly once per match.

    `max_attempts` bounds how often one ladder's part of a batch is recomputed after refused
    commits; between attempts it waits a short, growing, jittered backoff so that competing
    workers do not collide again in lockstep. `observe` is passed to `plan_batch` (it sees a
    match again when its batch is recomputed).

    Store loss: the processor remembers each ladder's watermark (matches applied so far) as
    of its own last read or commit; a read that finds less raises `StoreLost`. With
    `suspect_empty` (the worker's start-up found the store empty although the consumer group
    had committed offsets), a ladder the store knows nothing of is lost too, until it is
    rebuilt from the topic.

    Exact counts: a commit whose reply was lost (a connection error after Redis ran it), or
    a ladder committed in a call that then failed for another ladder, is retried by the
    caller; the retry finds the markers, and those matches are still reported as newly
    applied (``duplicate=False``) rather than as duplicates, with their stored events — on
    every retry until a call returns.

    Held states: the processor keeps the states it read and wrote, up to `known_states` of
    them (see `stream_rater.known_states`), and a batch reads only the players it does not
    hold, as long as the store shows the ladder at the watermark of this processor's own last
    commit; otherwise (another worker committed to it meanwhile) it reads them all, in a
    second round trip.

    Marker shrinking: the caller reports each batch whose events reached the broker
    (`produced`); the next commit of each of its ladders shrinks those matches' markers (see
    `store.base`), at no extra round trip. Until then — a crash in between, or a ladder that
    gets no more matches — they stay whole, which costs memory, never correctness.

    Generations: with `generation` None the processor applies to each ladder's live
    generation (the worker); with a number, to that staging generation (a re-rate). A
    generation's parameter overrides (set by a re-rate) replace the configured parameters.
    While a re-rate switches a ladder, its commits are refused for milliseconds; the
    processor waits (`freeze_poll` between tries, not counted as conflicts) and re-reads.
    A staging generation's markers hold no events (see `plan_batch`). So a batch that a
    worker committed to the old live generation and then died before producing, and that the
    switch overtook, re-emits nothing when it is redelivered: its players learn of the new
    states from the correction events alone (of those whose state the re-rate changed).
    """

    def __init__(
        self,
        ladders: Ladders,
        store: BatchStore,
        *,
        clock: Callable[[], float] = time.time,
        max_attempts: int = 50,
        observe: PriorObserver | None = None,
        suspect_empty: bool = False,
        generation: int | None = None,
        freeze_poll: float = 0.002,
        known_states: int = 200_000,
    ) -> None:
        self.ladders = ladders
        self.known = KnownStates(known_states)
        self.generation = generation
        self.freeze_poll = freeze_poll
        self._overridden: dict[tuple[str, str], Ladder] = {}
        self.store = store
        self.clock = clock
        self.max_attempts = max_attempts
        self.observe = observe
        self.suspect_empty = suspect_empty
        #: Ladder → (generation, watermark) as of this processor's last read or commit.
        self._watermarks: dict[str, tuple[int, int]] = {}
        #: Match ids (per ladder) of commits sent whose outcome is unknown (no reply).
        self._unconfirmed: dict[str, set[str]] = {}
        #: Match ids (per ladder) whose events were produced and whose markers are still whole.
        self._produced: dict[str, set[str]] = {}

    def produced(self, result: BatchResult) -> None:
        """Note that `result`'s events are with the broker: the next commit of each ladder
        shrinks the markers of its matches that still hold events."""
        for r in result.results:
            if r.events:
                self._produced.setdefault(r.match.ladder, set()).add(r.match.match_id)

    async def process(
        self, matches: Sequence[MatchFinished], where: Sequence[tuple[int, int] | None] | None = None
    ) -> BatchResult:
        """Apply `matches` in order; results come back in the same order. `where` gives
        each match's (partition, offset) in the matches topic (None: not from there).

        Every ladder of the batch is read in one round trip (`StateStore.read_many`) and
        committed in one (`StateStore.commit_many`) — read again whole, in one more round trip,
        where the states held from the last batch turned out stale; the ladders whose commit was refused
        are read, recomputed and committed again together, so a batch costs the same number
        of round trips however many ladders it spans.

        A season-start record is applied on its own, between the records before and after it
        (which are processed as batches of their own): so the leaderboard its commit keeps as
        the ending season's is exactly the one the records before it left. It reads every
        player of its ladder (one more round trip) and writes each changed one."""
        # Match ids known applied by this processor's own commits — confirmed by a re-read, or
        # committed in this call — leave `_unconfirmed` only once this call returns: if it
        # raises after some ladders (or segments) committed, the retry still counts them as applied.
        settled: list[tuple[str, set[str]]] = []
        cuts = [i for i, m in enumerate(matches) if m.season is not None]
        bounds = sorted({0, len(matches), *cuts, *(i + 1 for i in cuts)})
        batch = BatchResult()
        for lo, hi in itertools.pairwise(bounds):
            done = await self._process(matches[lo:hi], None if where is None else where[lo:hi], settled)
            batch.results += done.results
            batch.conflicts += done.conflicts
        for name, ids in settled:
            if ids:
                self._unconfirmed[name].difference_update(ids)
        return batch

    async def _process(
        self,
        matches: Sequence[MatchFinished],
        where: Sequence[tuple[int, int] | None] | None,
        settled: list[tuple[str, set[str]]],
    ) -> BatchResult:
        """`process` of records among which a season start can only be the only one; the ids
        it finds or makes applied go to `settled`."""
        parts: dict[str, _LadderPart] = {}
        for i, match in enumerate(matches):
            part = parts.get(match.ladder)
            if part is None:
                part = parts[match.ladder] = _LadderPart(self.ladders.get(match.ladder))
            part.add(i, match, where[i] if where is not None else None)
        batch = BatchResult()
        pending = list(parts.values())
        delays = backoff(0.001, 0.05, jitter=1.0)
        while pending:
            snapshots = await self._read(pending)
            for i, part in enumerate(pending):
                if part.starts_season:
                    everyone = await self.store.players(part.ladder.name, generation=self.generation)
                    snapshots[i] = replace(snapshots[i], players=everyone)
            planned = []
            for part, snapshot in zip(pending, snapshots):
                plan, confirmed = self._plan(part, snapshot)
                settled.append((part.ladder.name, confirmed))
                if plan.commit.markers:
                    planned.append((part, plan))
            if not planned:
                break
            commits = []
            for part, plan in planned:
                name = part.ladder.name
                self._unconfirmed.setdefault(name, set()).update(plan.commit.markers)
                shrink = list(self._produced.get(name, ()))
                commits.append(replace(plan.commit, produced=shrink) if shrink else plan.commit)
            refusals = await self.store.commit_many(commits)
            pending, conflicted = [], False
            for (part, plan), commit, refused in zip(planned, commits, refusals):
                name = part.ladder.name
                if refused is None:
                    self._hold(part, plan.commit)
                    settled.append((name, set(plan.commit.markers)))
                    self._produced.get(name, set()).difference_update(commit.produced)
                    watermark = part.snapshot.watermark + len(plan.commit.markers)
                    self._watermarks[name] = (part.snapshot.generation, watermark)
                    continue
                self._unconfirmed[name].difference_update(plan.commit.markers)  # not applied
                self.known.drop(name)
                pending.append(part)
                if not isinstance(refused, LadderFrozen):  # a freeze lasts milliseconds: not counted
                    conflicted = True
                    part.attempts += 1
                    batch.conflicts += 1
                    if part.attempts >= self.max_attempts:
                        raise TooManyConflicts(
                            f"ladder {name!r}: commit refused {self.max_attempts} times in a row"
                        )
            if pending:
                await asyncio.sleep(next(delays) if conflicted else self.freeze_poll)
        ordered: list[MatchResult | None] = [None] * len(matches)
        for part in parts.values():
            for i, result in zip(part.indices, part.results):
                ordered[i] = result
        batch.results = [r for r in ordered if r is not None]
        return batch

    async def _read(self, parts: Sequence[_LadderPart]) -> list[Snapshot]:
        """The snapshots of `parts`, read in one round trip without the states held of them;
        in a second one, whole, those of the ladders whose held states turned out stale."""
        ids = [part.ids() for part in parts]
        held = [self.known.held(part.ladder.name) for part in parts]
        snapshots = await self.store.read_many(
            [
                part.request(self.generation, *self.known.missing(h, players, effects))
                for part, h, (players, effects) in zip(parts, held, ids)
            ]
        )
        stale = []
        for i, (part, h, (players, effects)) in enumerate(zip(parts, held, ids)):
            complete = self.known.complete(part.ladder.name, h, snapshots[i], players, effects)
            if complete is None:
                stale.append(i)
            else:
                snapshots[i] = complete
        if stale:
            again = await self.store.read_many([parts[i].request(self.generation, *ids[i]) for i in stale])
            for i, snapshot in zip(stale, again):
                snapshots[i] = snapshot
        return snapshots

    def _hold(self, part: _LadderPart, commit: Commit) -> None:
        """Keep what `part`'s applied `commit` leaves stored, for the ladder's next batch."""
        players = {w.player_id: w.state for w in commit.writes if not w.is_effect}
        effects = {w.player_id: w.state for w in commit.writes if w.is_effect}
        self.known.committed(part.ladder.name, part.snapshot, players, effects, len(commit.markers))

    def _plan(self, part: _LadderPart, snapshot: Snapshot) -> tuple[_Plan, set[str]]:
        """Compute `part` on `snapshot` (its results are kept on `part`); also the match ids
        found applied by this processor's own unconfirmed commits (see `_confirm`)."""
        name = part.ladder.name
        self._check_watermark(name, snapshot)
        try:
            plan = plan_batch(
                self._with_params(part.ladder, snapshot.params),
                part.matches,
                snapshot,
                format_timestamp(self.clock()),
                self.observe,
                part.positions,
                self.generation,
            )
        except Exception as exc:  # pure computation on the input: see `Unratable`
            raise Unratable(name, exc) from exc
        part.snapshot = snapshot
        part.results, confirmed = self._confirm(name, plan.results)
        return plan, confirmed

    def _with_params(self, ladder: Ladder, params: dict[str, Any] | None) -> Ladder:
        """`ladder` with a generation's parameter overrides (built once per distinct set)."""
        if not params:
            return ladder
        key = (ladder.name, repr(sorted(params.items())))
        found = self._overridden.get(key)
        if found is None:
            found = self._overridden[key] = Ladder(ladder.name, ladder.model, {**ladder.params, **params})
        return found

    def _check_watermark(self, ladder: str, snapshot: Snapshot) -> None:
        """Raise `StoreLost` if the store shows less of `ladder` than was seen or committed:
        an older generation than seen, or fewer matches applied to the same one."""
        seen = self._watermarks.get(ladder)
        now = (snapshot.generation, snapshot.watermark)
        if seen is not None and now < seen:
            raise StoreLost(
                ladder,
                f"the store shows {now[1]} matches applied, {seen[1]} were"
                if now[0] == seen[0]
                else f"the store shows generation {now[0]} live, generation {seen[0]} was",
            )
        if seen is None and now == (0, 0) and self.suspect_empty:
            raise StoreLost(ladder, "the store is empty although the consumer group has committed offsets")
        self._watermarks[ladder] = now

    def _confirm(self, ladder: str, results: list[MatchResult]) -> tuple[list[MatchResult], set[str]]:
        """`results`, with matches found applied by this processor's own unconfirmed commit
        (its reply was lost) reported as newly applied, not as duplicates; and their ids (the
        caller takes them out of `_unconfirmed` once its call returns)."""
        unconfirmed = self._unconfirmed.get(ladder)
        if not unconfirmed:
            return results, set()
        mine = [r.duplicate and r.match.match_id in unconfirmed for r in results]
        if not any(mine):
            return results, set()
        confirmed = {r.match.match_id for r, m in zip(results, mine) if m}
        return [r._replace(duplicate=False) if m else r for r, m in zip(results, mine)], confirmed


@dataclass(frozen=True, slots=True)
class Skipped:
    """A match that made the model fail on its own (`Unratable`): the worker dead-letters it
    and the offline tools skip it, so that both go on with the same states."""

    match: MatchFinished
    #: (partition, offset) of its record in the matches topic, None if not from there.
    where: tuple[int, int] | None
    error: Exception

    @property
    def reason(self) -> str:
        """``processing failed: <ExceptionType>: <message>`` (a dead letter's ``sr-reason``)."""
        return f"processing failed: {type(self.error).__name__}: {self.error}"

    def line(self) -> str:
        """One line for a report: the match, where it was, and why it was skipped."""
        at = "" if self.where is None else f" (matches[{self.where[0]}]@{self.where[1]})"
        return f"skipped match {self.match.match_id!r}{at} of ladder {self.match.ladder!r}: {self.reason}"


#: ``attempt(action)`` runs one `Processor.process` call (``action()``) and returns its result;
#: the worker's retries transient errors.
Attempt = Callable[[Callable[[], Awaitable[BatchResult]]], Awaitable[BatchResult]]


async def _once(action: Callable[[], Awaitable[BatchResult]]) -> BatchResult:
    return await action()


async def process_skipping(
    processor: Processor,
    matches: Sequence[MatchFinished],
    where: Sequence[tuple[int, int] | None] | None = None,
    *,
    attempt: Attempt = _once,
) -> tuple[BatchResult, list[Skipped]]:
    """`processor.process(matches, where)`, and the matches skipped: when a match makes the
    model fail (`Unratable`), the batch is applied again one match at a time (committed
    matches are found applied) and each match that fails on its own is skipped. The one rule
    by which the worker dead-letters and `replay`, `verify` and re-rates skip, so that
    stream = replay holds for such input too. Any other error propagates."""
    try:
        return await attempt(lambda: processor.process(matches, where)), []
    except Unratable:
        pass
    result, skipped = BatchResult(), []
    for i, match in enumerate(matches):
        place = None if where is None else where[i]
        try:
            one = await attempt(lambda: processor.process([match], [place]))  # noqa: B023
        except Unratable as exc:
            skipped.append(Skipped(match, place, exc.cause))
            continue
        result.results += one.results
        result.conflicts += one.conflicts
    return result, skipped
