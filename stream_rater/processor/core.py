"""`Processor`: batches of validated matches in → state commits + rating-changed events out,
against a store (`BatchStore`). The design (round trips, retries, exact counts, held states, marker
shrinking, generations) is in README.md beside this module."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import MatchFinished, format_timestamp
from stream_rater.processor.batch import PriorObserver
from stream_rater.processor.known_states import Held, KnownStates
from stream_rater.processor.ledger import CommitLedger
from stream_rater.processor.modes import other_modes, plan_moded, qualified
from stream_rater.processor.planner import _Plan, plan_batch
from stream_rater.processor.results import BatchResult, MatchResult, TooManyConflicts, Unratable
from stream_rater.store.base import Commit, CommitConflict, HeldStale, LadderFrozen, ReadRequest, Snapshot
from stream_rater.store.roles import BatchStore
from stream_rater.waiting import backoff

#: Per ladder, match ids the current `Processor.process` call found applied by its own lost
#: commits (True: `CommitLedger.confirm`) or made applied (False).
_Settled = list[tuple[str, set[str], bool]]


@dataclass(slots=True)
class _LadderPart:
    """One ladder's matches of a batch, where they are in it, and how far they got."""

    ladder: Ladder
    indices: list[int] = field(default_factory=list)
    matches: list[MatchFinished] = field(default_factory=list)
    #: Partition → the offset after the ladder's last record of the batch in it.
    positions: dict[int, int] = field(default_factory=dict)
    #: Match id → the (partition, offset) of its first record in the batch, if known.
    records: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    attempts: int = 0
    snapshot: Snapshot = field(default_factory=lambda: Snapshot({}, {}, {}))
    #: Computed without a read (`Commit.unread`): per partition its lowest offset in the batch.
    unread: dict[int, int] | None = None
    results: list[MatchResult] = field(default_factory=list)

    def add(self, index: int, match: MatchFinished, record: tuple[int, int] | None) -> None:
        """Add the batch's `index`-th match, from `record` (partition, offset) if known."""
        self.indices.append(index)
        self.matches.append(qualified(self.ladder, self.ladder.rules.with_parties(match)))
        self.records.setdefault(match.match_id, record)
        if record is not None:
            partition, offset = record
            self.positions[partition] = max(self.positions.get(partition, 0), offset + 1)

    @property
    def starts_season(self) -> bool:
        """True for a part that is a season-start record (alone: see `Processor.process`)."""
        return self.matches[0].season is not None

    def shadowed(self, shadow: Ladder) -> _LadderPart:
        """This part's matches for `shadow`, one of its ladder's shadows: the same records,
        renamed to the shadow's internal ladder (so its keys, markers and observed priors are
        its own), at the same positions."""
        matches = [replace(m, ladder=shadow.name) for m in self.matches]
        return _LadderPart(shadow, list(self.indices), matches, dict(self.positions), dict(self.records))

    def ids(self) -> tuple[list[str], list[str]]:
        """The players and the effects of these matches, each once."""
        players = dict.fromkeys(p.id for m in self.matches for t in m.teams for p in t.players)
        if self.ladder.modes:  # each player's states in the ladder's other modes too
            players.update(dict.fromkeys(other_modes(self.ladder, players)))
        effects = dict.fromkeys(e for m in self.matches for t in m.teams for e in t.effects)
        return list(players), list(effects)

    def lowest(self) -> dict[int, int] | None:
        """Per partition the offset of these matches' first record in it; None if a match
        is not from the matches topic."""
        lowest: dict[int, int] = {}
        for record in self.records.values():
            if record is None:
                return None
            partition, offset = record
            if offset < lowest.get(partition, offset + 1):
                lowest[partition] = offset
        return lowest

    def request(self, generation: int | None, players: list[str], effects: list[str]) -> ReadRequest:
        """What to read for these matches: the states of `players` and `effects`, and
        whether each is applied (by its marker, or its record below the ladder's position)."""
        match_ids = list(self.records)
        records = [self.records[m] for m in match_ids]
        known = any(r is not None for r in records)
        return ReadRequest(
            self.ladder.name, players, effects, match_ids, generation, records if known else None
        )


@dataclass(frozen=True, slots=True)
class Target:
    """Where a processor writes: each ladder's live generation (`generation` None: the
    worker) or that staging generation (a re-rate); `shadows`: each ladder's shadows
    (`Ladder.shadows`) rated beside it — never in a staging generation."""

    generation: int | None = None
    shadows: bool = True


@dataclass(frozen=True, slots=True)
class Retries:
    """How a processor retries a refused commit: one ladder's part of a batch is recomputed
    at most `max_attempts` times in a row, and waits `freeze_poll` seconds between tries while
    a re-rate switches the ladder."""

    max_attempts: int = 50
    freeze_poll: float = 0.002


class Processor:
    """Applies batches of validated matches to a store, exactly once per match, in one
    store read and one commit per batch (README.md beside this module: why and how).

    `target` says which generation it writes (the live one by default) and `retries` how it
    retries refused commits; `observe` is passed to `plan_batch`; `suspect_empty` makes a
    ladder the store knows nothing of count as lost (`StoreLost`); `known_states` bounds the
    states held between batches."""

    def __init__(
        self,
        ladders: Ladders,
        store: BatchStore,
        *,
        clock: Callable[[], float] = time.time,
        observe: PriorObserver | None = None,
        suspect_empty: bool = False,
        known_states: int = 200_000,
        target: Target = Target(),
        retries: Retries = Retries(),
    ) -> None:
        self.ladders = ladders
        self.known = KnownStates(known_states)
        self.ledger = CommitLedger(suspect_empty=suspect_empty)
        self.generation = target.generation
        self.shadows = target.shadows and target.generation is None
        self.freeze_poll = retries.freeze_poll
        self._overridden: dict[tuple[str, str], Ladder] = {}
        self.store = store
        self.clock = clock
        self.max_attempts = retries.max_attempts
        self.observe = observe

    @property
    def suspect_empty(self) -> bool:
        """Whether a ladder the store knows nothing of counts as lost (see `CommitLedger`)."""
        return self.ledger.suspect_empty

    @suspect_empty.setter
    def suspect_empty(self, value: bool) -> None:
        self.ledger.suspect_empty = value

    def produced(self, result: BatchResult) -> None:
        """Note that `result`'s events are with the broker: the next commit of each ladder
        shrinks the markers of its matches that still hold events."""
        self.ledger.produced(result)

    async def forget_produced(self) -> None:
        """Have the store drop the events of every match whose events are with the broker
        and that no commit named yet: a worker that stops or loses partitions makes no next
        commit of the ladders to name them (`CommitLedger.produced`)."""
        unnamed = self.ledger.unnamed()
        if unnamed:
            await self.store.forget_produced(unnamed)
            self.ledger.forgotten(unnamed)

    async def process(
        self, matches: Sequence[MatchFinished], where: Sequence[tuple[int, int] | None] | None = None
    ) -> BatchResult:
        """Apply `matches` in order; results come back in the same order. `where` gives
        each match's (partition, offset) in the matches topic (None: not from there).

        A season-start record is applied on its own, between the records before and after it
        (processed as batches of their own), after reading every player of its ladder."""
        # Match ids known applied by this processor's own commits — confirmed by a re-read, or
        # committed in this call — are settled only once this call returns: if it raises after
        # some ladders (or segments) committed, the retry still counts them as applied.
        settled: _Settled = []
        cuts = [i for i, m in enumerate(matches) if m.season is not None]
        bounds = sorted({0, len(matches), *cuts, *(i + 1 for i in cuts)})
        batch = BatchResult()
        for lo, hi in itertools.pairwise(bounds):
            done = await self._process(matches[lo:hi], None if where is None else where[lo:hi], settled)
            batch.results += done.results
            batch.conflicts += done.conflicts
            batch.quality += done.quality
        for name, ids, confirmed in settled:
            if ids:
                landed = self.ledger.settle(name, ids, confirmed=confirmed)
                batch.quality += [(name, scorer, add) for scorer, add in landed]
        return batch

    async def _process(
        self,
        matches: Sequence[MatchFinished],
        where: Sequence[tuple[int, int] | None] | None,
        settled: _Settled,
    ) -> BatchResult:
        """`process` of records among which a season start can only be the only one; the ids
        it finds or makes applied go to `settled`."""
        parts: dict[str, _LadderPart] = {}
        for i, match in enumerate(matches):
            part = parts.get(match.ladder)
            if part is None:
                part = parts[match.ladder] = _LadderPart(self.ladders.get(match.ladder))
            part.add(i, match, where[i] if where is not None else None)
        if self.shadows:
            for part in list(parts.values()):
                parts.update((s.name, part.shadowed(s)) for s in part.ladder.shadows)
        batch = BatchResult()
        pending = list(parts.values())
        delays = backoff(0.001, 0.05, jitter=1.0)
        while pending:
            planned = await self._plan_all(pending, settled)
            if not planned:
                break
            pending, waits = await self._commit_all(planned, settled, batch)
            if waits is not None:
                await asyncio.sleep(next(delays) if waits is CommitConflict else self.freeze_poll)
        ordered: list[MatchResult | None] = [None] * len(matches)
        for part in parts.values():
            if part.ladder.shadow_of is not None:
                continue  # a shadow's results are not the batch's: never published
            for i, result in zip(part.indices, part.results):
                ordered[i] = result
        batch.results = [r for r in ordered if r is not None]
        return batch

    async def _plan_all(
        self, pending: list[_LadderPart], settled: _Settled
    ) -> list[tuple[_LadderPart, _Plan]]:
        """Read and compute every part of `pending`; the parts with something to commit."""
        snapshots = await self._read(pending)
        for i, part in enumerate(pending):
            if part.starts_season:
                everyone = await self.store.players(part.ladder.name, generation=self.generation)
                snapshots[i] = replace(snapshots[i], players=everyone)
        planned = []
        for part, snapshot in zip(pending, snapshots):
            plan, confirmed = self._plan(part, snapshot)
            settled.append((part.ladder.name, confirmed, True))
            if plan.commit.markers:
                planned.append((part, plan))
        return planned

    async def _commit_all(
        self, planned: list[tuple[_LadderPart, _Plan]], settled: _Settled, batch: BatchResult
    ) -> tuple[list[_LadderPart], type[CommitConflict] | None]:
        """Commit every plan in one round trip; the parts whose commit was refused, and what
        they wait for before the next try: `CommitConflict` if one was refused by a conflict
        (counted in `batch`: backoff), `LadderFrozen` if one by a frozen ladder (a short poll),
        None if none (an unread commit whose held states were stale re-reads at once)."""
        commits = []
        for part, plan in planned:
            shrink = self.ledger.sending(part.ladder.name, plan.commit.markers)
            commit = replace(plan.commit, unread=part.unread) if part.unread is not None else plan.commit
            commits.append(replace(commit, produced=shrink) if shrink else commit)
        try:
            refusals = await self.store.commit_many(commits)
        except BaseException:  # no reply: any commit may have landed (`CommitLedger.lost`)
            for (part, _), commit in zip(planned, commits):
                self.ledger.lost(part.ladder.name, commit.markers, _quality(commit))
            raise
        pending: list[_LadderPart] = []
        waits: type[CommitConflict] | None = None
        exhausted: TooManyConflicts | None = None  # raised once every outcome is recorded
        for (part, plan), commit, refused in zip(planned, commits, refusals):
            name = part.ladder.name
            if refused is None:
                self._hold(part, plan.commit)
                settled.append((name, set(plan.commit.markers), False))
                self.ledger.applied(
                    name, part.snapshot, plan.commit.markers, commit.produced, _quality(commit)
                )
                continue
            self.ledger.refused(name, plan.commit.markers)
            self.known.drop(name)
            pending.append(part)
            if isinstance(refused, HeldStale):  # what a read would have told: read now
                continue
            if isinstance(refused, LadderFrozen):  # a freeze lasts milliseconds: not counted
                waits = waits or LadderFrozen
            else:
                waits = CommitConflict
                part.attempts += 1
                batch.conflicts += 1
                if part.attempts >= self.max_attempts and exhausted is None:
                    exhausted = TooManyConflicts(
                        f"ladder {name!r}: commit refused {self.max_attempts} times in a row"
                    )
        if exhausted is not None:
            raise exhausted
        return pending, waits

    async def _read(self, parts: Sequence[_LadderPart]) -> list[Snapshot]:
        """The snapshots of `parts`: of a part whose states are all held, those (`_unread`);
        of the others, read in one round trip without the states held of them, and in a
        second one, whole, those of the ladders whose held states turned out stale."""
        ids = [part.ids() for part in parts]
        held = [self.known.held(part.ladder.name) for part in parts]
        unread = [self._unread(part, h, *i) for part, h, i in zip(parts, held, ids)]
        asked = [i for i, snapshot in enumerate(unread) if snapshot is None]
        requests = [parts[i].request(self.generation, *self.known.missing(held[i], *ids[i])) for i in asked]
        read = await self.store.read_many(requests) if requests else []
        snapshots = {i: snapshot for i, snapshot in enumerate(unread) if snapshot is not None}
        stale = []
        for i, snapshot in zip(asked, read):
            complete = self.known.complete(parts[i].ladder.name, held[i], snapshot, *ids[i])
            if complete is None:
                stale.append(i)
            else:
                snapshots[i] = complete
        if stale:
            again = await self.store.read_many([parts[i].request(self.generation, *ids[i]) for i in stale])
            for i, snapshot in zip(stale, again):
                snapshots[i] = snapshot
        return [snapshots[i] for i in range(len(parts))]

    def _unread(
        self, part: _LadderPart, held: Held | None, players: list[str], effects: list[str]
    ) -> Snapshot | None:
        """`part`'s snapshot without a read, from the states held since this processor's last
        commit of its ladder (`KnownStates.unread`), if it holds them all and every match is from
        the matches topic; its commit then does the read's checks (`Commit.unread`). Not for a
        re-rate's processor, nor a season start (it reads every player)."""
        part.unread = None
        if self.generation is not None or part.starts_season:
            return None
        lowest = part.lowest()
        snapshot = None if lowest is None else self.known.unread(held, players, effects)
        if snapshot is not None:
            part.unread = lowest
        return snapshot

    def _hold(self, part: _LadderPart, commit: Commit) -> None:
        """Keep what `part`'s applied `commit` leaves stored, for the ladder's next batch."""
        players = {w.player_id: w.state for w in commit.writes if not w.is_effect}
        effects = {w.player_id: w.state for w in commit.writes if w.is_effect}
        self.known.committed(part.ladder.name, part.snapshot, players, effects, len(commit.markers))

    def _plan(self, part: _LadderPart, snapshot: Snapshot) -> tuple[_Plan, set[str]]:
        """Compute `part` on `snapshot` (its results are kept on `part`); also the match ids
        found applied by this processor's own unconfirmed commits (`CommitLedger.confirm`)."""
        name = part.ladder.name
        self.ledger.read(name, snapshot)
        try:
            plan = (plan_moded if part.ladder.modes else plan_batch)(
                self._with_params(part.ladder, snapshot.params),
                part.matches,
                snapshot,
                format_timestamp(self.clock()),
                observe=self.observe,
                positions=part.positions,
                generation=self.generation,
            )
        except Exception as exc:  # pure computation on the input: see `Unratable`
            raise Unratable(name, exc) from exc
        part.snapshot = snapshot
        part.results, confirmed = self.ledger.confirm(name, plan.results)
        return plan, confirmed

    def _with_params(self, ladder: Ladder, params: dict[str, Any] | None) -> Ladder:
        """`ladder` with a generation's parameter overrides (built once per distinct set)."""
        if not params:
            return ladder
        key = (ladder.name, repr(sorted(params.items())))
        found = self._overridden.get(key)
        if found is None:
            found = self._overridden[key] = replace(ladder, params={**ladder.params, **params})
        return found


def _quality(commit: Commit) -> list[tuple[str, dict[str, float]]]:
    """`commit`'s quality sums per scorer (`CommitLedger.settle` gives them back)."""
    return [(scorer, add) for scorer, (add, _) in commit.quality.items()]
