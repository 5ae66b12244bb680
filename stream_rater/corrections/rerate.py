"""Re-rate a ladder beside the live one and switch over without stopping the stream.

The protocol (a reindex with an alias swap; the store's generations make it possible):

1. **Lock.** Take the ladder's re-rate lock (a lease renewed while the re-rate runs; a second
   re-rate is refused, and a crashed one's lock expires) and open an empty *staging*
   generation with the new parameter overrides. A staging generation a crashed re-rate left
   behind is dropped; correction events a crashed switch stored are sent first.
2. **Voids.** Check that every match to void is in the ladder's history, record the voids.
3. **Build.** Apply the ladder's history in log order to the staging generation with the
   same `Processor` the worker uses (voided matches are skipped by the processor itself), up
   to the live generation's position in the matches topic; keep reading the topic while the
   live worker moves on, until the gap is small.
4. **Compare.** Compare both generations' players while the live one still moves: a player
   no match after the staging generation's position touches keeps both states until the
   switch, so only the players of the last few matches need comparing again.
5. **Switch.** Freeze the live generation (its commits are refused; the worker waits and
   retries), apply the last few matches up to its now fixed position, compare their players
   again, and in one atomic step make the staging generation live and store the correction
   events (one per player whose state changed). Send them, lift the freeze, release the
   lock, drop the old generation. The live ladder is blocked only from the freeze to the
   lift: a fetch from the topic, a few matches, a few reads and one produce — milliseconds,
   whatever the ladder's size. The staging generation's markers are written empty (its
   events are never produced), except those of the live ladder's last matches whose live
   markers still hold their events (a worker died between its commit and its produce):
   those hold the staging generation's events, so that the redelivery re-emits them.

A crash before the switch leaves the live generation as it was (the next re-rate drops the
abandoned staging one); a crash after it leaves the new generation live and its correction
events in the store's outbox, sent by the next re-rate of the ladder.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.rules import refuse_rule_overrides
from stream_rater.contracts import CorrectionRequest, MatchFinished, correction_changed, format_timestamp
from stream_rater.contracts.correction_request import KINDS
from stream_rater.processor import Processor, StoreLost, process_skipping
from stream_rater.rating.base import Rating, RatingModel
from stream_rater.store.base import Generations, PlayerState, StateStore

#: One entry of a ladder's history: the match and where its record is in the matches topic
#: (None for a match read from a file).
Entry = tuple[MatchFinished, tuple[int, int] | None]


class History(Protocol):
    """A ladder's matches in log order; each `read` returns what was appended since the last."""

    async def read(self) -> list[Entry]:
        """The entries not returned before (all of them the first time)."""

    def reached(self) -> dict[int, int]:
        """Partition → offset up to which the topic was read."""

    def committed(self) -> dict[int, int]:
        """Partition → offset the workers' consumer group had committed before the re-rate
        began (read before it looks at the store; empty when unknown)."""


class UnknownMatches(ValueError):
    """Matches to void (or un-void) that are not in the ladder's history (or not voided)."""


@dataclass(slots=True)
class RerateReport:
    """What one re-rate did."""

    ladder: str
    generation: int = 0
    applied: int = 0
    voided: list[str] = field(default_factory=list)
    unvoided: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    corrections: int = 0
    seconds: float = 0.0
    #: From the freeze to its lift: how long live commits of the ladder were refused.
    blocked_seconds: float = 0.0
    #: Where that time went: step → seconds (freeze, read, apply, compare, switch, send).
    blocked_steps: dict[str, float] = field(default_factory=dict)
    #: Live positions at the switch (partition → next offset).
    positions: dict[int, int] = field(default_factory=dict)
    nothing_to_do: bool = False
    #: A line per match of the history the model could not rate: skipped, as the worker
    #: dead-letters it.
    skipped: list[str] = field(default_factory=list)

    def line(self) -> str:
        """A one-line human summary."""
        if self.nothing_to_do:
            return f"ladder {self.ladder!r}: nothing to do (the voids are already as asked)"
        rate = self.applied / self.seconds if self.seconds > 0 else 0.0
        return (
            f"ladder {self.ladder!r}: re-rated {self.applied} matches into generation {self.generation} "
            f"in {self.seconds:.2f} s ({rate:,.0f} matches/s); {self.corrections} players corrected; "
            f"live ladder blocked {self.blocked_seconds * 1000:.1f} ms at the switch"
            + (
                f"; {len(self.skipped)} matches skipped (the model could not rate them)"
                if self.skipped
                else ""
            )
        )


#: Rounds of following the live generation after the comparison before freezing anyway (when
#: matches arrive faster than the re-rate applies them, it would never get closer).
FOLLOW_ROUNDS = 20

#: ``progress(done, known)``: entries of the history processed so far, and known so far.
Progress = Callable[[int, int], None]
Send = Callable[[Sequence[dict[str, Any]]], Awaitable[None]]


def new_owner() -> str:
    """A lock owner name that says who holds it: host, process id and a random tag."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class Correction:
    """One correction of one ladder, whoever asked for it (the CLI's flags, a worker's
    `CorrectionRequest`): void or un-void `match_ids`, or re-rate with `params` overriding the
    model's parameters from now on. `reason` goes with the correction events."""

    kind: str
    ladder: str
    match_ids: tuple[str, ...] = ()
    reason: str = ""
    params: Mapping[str, bool | int | float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"correction kind must be one of {', '.join(map(repr, KINDS))}, got {self.kind!r}"
            )
        refuse_rule_overrides(self.params)

    @classmethod
    def from_request(cls, request: CorrectionRequest) -> Correction:
        """The correction a (validated) request from the corrections topic asks for."""
        return cls(request.kind, request.ladder, request.match_ids, request.reason, dict(request.params))

    def request(self, request_id: str | None = None) -> CorrectionRequest:
        """The request that asks a worker for this correction."""
        return CorrectionRequest(
            self.kind, self.ladder, self.match_ids, self.reason, dict(self.params), request_id
        )


@dataclass(frozen=True)
class Tuning:
    """How a re-rate paces itself. `lease` (s): how long the lock and the freeze outlive a
    crashed re-rate. `batch_size`: matches per processor batch. `catch_up`: compare the
    generations once a round of reading the topic found fewer new matches than this; `close`:
    freeze once a round found fewer than this (or after `FOLLOW_ROUNDS`), so that few matches
    are left to apply inside the freeze. `recent`: how many of the last matches applied are
    checked for events the live worker has not produced (at least twice the worker's batch
    size: a worker's last batch, and its predecessor's)."""

    lease: float = 10.0
    batch_size: int = 1000
    catch_up: int = 1000
    close: int = 20
    recent: int = 1000


class Rerate:
    """Recompute a ladder from its history into a new generation with a `Correction` applied
    and switch to it while the worker keeps rating: one method per phase of the protocol in
    the module docstring, `run` calls them in order. `send` produces the correction events;
    `progress` follows the build; `owner` names the lock's holder (default: `new_owner()`)."""

    # What the phases find out, for the phases after them.
    #: The ladder's generations as last read, and its voids before this re-rate.
    live: Generations
    current: dict[str, dict[str, Any]]
    #: The rating model with the new parameters (lock).
    model: RatingModel
    #: The history's first read, and when the voids were recorded (record_voids).
    entries: list[Entry]
    now: float
    #: The staging generation's progress through the history (build), the comparison of the
    #: players and the players of the matches applied after it (compare; None: every player,
    #: once a season start moved them all).
    staging: _Build
    comparison: _Compare
    touched: set[str] | None

    def __init__(
        self,
        store: StateStore,
        ladders: Ladders,
        correction: Correction,
        history: History,
        send: Send,
        tuning: Tuning = Tuning(),
        *,
        progress: Progress | None = None,
        owner: str | None = None,
    ) -> None:
        self.store, self.ladders, self.ladder = store, ladders, correction.ladder
        self.history, self.send, self.tuning, self.progress = history, send, tuning, progress
        self.owner = owner or new_owner()
        ids = list(dict.fromkeys(correction.match_ids))
        self.void = ids if correction.kind == "void" else []
        self.unvoid = ids if correction.kind == "unvoid" else []
        self.params, self.reason = dict(correction.params), correction.reason
        self.configured = ladders.get(self.ladder)
        self.report = RerateReport(self.ladder, params=dict(self.params), reason=self.reason)
        self.generation = 0
        #: Whether the staging generation is live: from then on a failure no longer aborts.
        self.switched = False

    async def run(self) -> RerateReport:
        """The whole re-rate. Raises `RerateRunning` (another re-rate holds the lock),
        `UnknownMatches`, `StoreLost` (the store lacks matches the workers committed)."""
        started = time.perf_counter()
        if await self._nothing_to_do():
            self.report.nothing_to_do = True
            return self.report
        async with self.lock():
            await self.record_voids()
            await self.build()
            await self.compare()
            await self.switch()
        await self.store.drop_generation(self.ladder, self.live.live)
        self.report.seconds = time.perf_counter() - started
        return self.report

    async def _nothing_to_do(self) -> bool:
        """True when the voids are already as asked and nothing else is to be done (no new
        parameters, no interrupted re-rate to complete, no correction events to send)."""
        self.live = await self.store.generations(self.ladder)
        self.current = await self.store.voids(self.ladder)
        already = all(m in self.current for m in self.void) and not any(
            m in self.current for m in self.unvoid
        )
        return bool(
            (self.void or self.unvoid)
            and already
            and not self.params
            and not self.live.voids_pending
            and not await self.store.outbox(self.ladder)
        )

    @contextlib.asynccontextmanager
    async def lock(self) -> AsyncIterator[None]:
        """1. Lock: take the ladder's re-rate lock, open the staging generation, drop the one a
        crashed re-rate left, send the correction events a crashed switch stored. The lock is
        renewed until the block ends; one that ends before the switch drops the staging
        generation and releases the lock."""
        overrides = {**(self.live.params or {}), **self.params}
        params = {**self.configured.params, **overrides}
        self.model = Ladder(self.ladder, self.configured.model, params).rating_model  # checks params
        self.generation, abandoned = await self.store.begin_rerate(
            self.ladder, self.owner, self.tuning.lease, overrides or None
        )
        self.report.generation = self.generation
        keeper = asyncio.create_task(self._keep_lock())
        try:
            if abandoned is not None:
                await self.store.drop_generation(self.ladder, abandoned)
            pending = await self.store.outbox(self.ladder)
            if pending:
                await self.send(pending)
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            if not self.switched:
                dropped = await self.store.abort_rerate(self.ladder, self.owner)
                if dropped is not None:
                    await self.store.drop_generation(self.ladder, dropped)

    async def _keep_lock(self) -> None:
        """Renew the lock (and a freeze) every third of the lease until cancelled."""
        while True:
            await asyncio.sleep(self.tuning.lease / 3)
            await self.store.renew(self.ladder, self.owner, self.tuning.lease)

    async def record_voids(self) -> None:
        """2. Voids: check the matches to (un-)void against the history, record the voids."""
        self.entries = await self.history.read()
        interrupted = self.live.voids_pending
        _check_voids(self.ladder, self.entries, self.current, self.void, self.unvoid, interrupted)
        _check_not_lost(
            self.ladder, self.entries, self.live.positions, self.history.committed(), self.current
        )
        self.now = time.time()
        await self.store.set_voids(
            self.ladder,
            {m: {"reason": self.reason, "at": self.now} for m in self.void if m not in self.current},
            [m for m in self.unvoid if m in self.current],
            self.generation,
        )
        # After an interrupted re-rate, the voids it recorded take effect now: report them.
        self.report.voided = [m for m in self.void if m not in self.current or interrupted]
        self.report.unvoided = [m for m in self.unvoid if m in self.current or interrupted]

    async def build(self) -> None:
        """3. Build: apply the history to the staging generation up to the live one's
        position, reading on while the live worker moves, until a round finds few matches."""
        processor = Processor(self.ladders, self.store, generation=self.generation)
        self.staging = _Build(
            processor, self.entries, self.tuning.batch_size, self.tuning.recent, self.progress
        )
        while True:
            self.live = await self.store.generations(self.ladder)
            await self.staging.apply_upto(self.live.positions)
            more = await self.history.read()
            self.staging.add(more)
            if len(more) < self.tuning.catch_up:
                break

    async def compare(self) -> None:
        """4. Compare: every player of both generations, then follow the live one, noting the
        players of the matches applied since (compared again in the switch)."""
        self.comparison = _Compare(
            self.store, self.ladder, self.model, self.generation, self.report, self.now
        )
        await self.comparison.all()
        self.touched = set()
        for _ in range(FOLLOW_ROUNDS):
            self.live = await self.store.generations(self.ladder)
            self.touched = touched(self.touched, await self.staging.apply_upto(self.live.positions))
            more = await self.history.read()
            self.staging.add(more)
            if len(more) < self.tuning.close:
                break

    async def switch(self) -> None:
        """5. Switch: freeze the live generation, apply its last matches, compare their players
        again, switch atomically storing the correction events, send them, lift the freeze
        and release the lock; each step's time goes to the report's `blocked_steps`."""
        store, ladder, build = self.store, self.ladder, self.staging
        # Markers only ever go from holding events to empty, and every match committed from
        # here on is applied inside the freeze: only these and those can hold events then.
        maybe = set(await store.unproduced(ladder, self.live.live, list(build.recent)))
        clock = _Clock(self.report.blocked_steps)
        await store.freeze(ladder, self.owner, self.tuning.lease)
        self.live = live = await store.generations(ladder)
        clock.step("freeze")
        while not _covers(self.history.reached(), live.positions):
            build.add(await self.history.read())
        clock.step("read")
        last = await build.apply_upto(live.positions)
        clock.step("apply")
        events = await self.comparison.again(touched(self.touched, last))
        clock.step("compare")
        maybe |= {match.match_id for match, _ in last}
        unproduced = await store.unproduced(ladder, live.live, [m for m in build.recent if m in maybe])
        if unproduced:
            await store.hold_events(ladder, self.generation, {m: build.recent[m] for m in unproduced})
        clock.step("unproduced")
        await store.switch(ladder, self.owner, self.generation, live, events)
        self.switched = True
        clock.step("switch")
        await self.send(events)
        await store.finish_rerate(ladder, self.owner)
        clock.step("send")
        self.report.blocked_seconds = sum(self.report.blocked_steps.values())
        self.report.applied, self.report.corrections = build.applied, len(events)
        self.report.skipped = build.skipped
        self.report.positions = live.positions


def _check_voids(
    ladder: str,
    entries: list[Entry],
    current: Mapping[str, dict[str, Any]],
    void: list[str],
    unvoid: list[str],
    pending: bool,
) -> None:
    """Refuse to void a match the history lacks, or to un-void one that is not voided
    (unless an interrupted re-rate already lifted it: then this one completes it)."""
    known = {match.match_id for match, _ in entries}
    unknown = [m for m in void if m not in known]
    if unknown:
        raise UnknownMatches(
            f"ladder {ladder!r} has no match {', '.join(map(repr, unknown))} in its history "
            f"({len(known)} matches read)"
        )
    not_voided = [m for m in unvoid if m not in current]
    if not_voided and not pending:
        raise UnknownMatches(f"ladder {ladder!r}: match {', '.join(map(repr, not_voided))} is not voided")


def _check_not_lost(
    ladder: str,
    entries: list[Entry],
    positions: Mapping[int, int],
    committed: Mapping[int, int],
    voids: Mapping[str, dict[str, Any]],
) -> None:
    """Refuse to re-rate a ladder whose live generation lacks a match the workers committed
    the offset of: the store lost data (a failover to a replica that missed writes). A new
    generation built up to the store's positions would hide the loss from the workers'
    watermark check, and the matches after them would never be rated. A worker commits its
    offsets only after the store, so a healthy store is never behind them. Voided matches
    and repeats of a match id are skipped by the worker, not applied: they prove nothing."""
    seen: set[str] = set()
    for match, where in entries:
        repeat = match.match_id in seen
        seen.add(match.match_id)
        if where is None or repeat or match.match_id in voids or where[0] not in positions:
            continue
        partition, offset = where
        if positions[partition] <= offset < committed.get(partition, 0):
            raise StoreLost(
                ladder,
                f"the workers committed matches[{partition}]@{offset} (match "
                f"{match.match_id!r}) but the store's ladder goes only up to offset "
                f"{positions[partition]}: the store lost data",
            )


def _covers(reached: Mapping[int, int], positions: Mapping[int, int]) -> bool:
    """True when the topic was read at least up to the live positions."""
    return all(reached.get(p, 0) >= offset for p, offset in positions.items())


class _Build:
    """The staging generation's progress through the history."""

    def __init__(
        self,
        processor: Processor,
        entries: list[Entry],
        batch_size: int,
        recent: int,
        progress: Progress | None,
    ) -> None:
        self.processor, self.batch_size, self.progress = processor, batch_size, progress
        self.pending: list[Entry] = list(entries)
        self.applied = 0  # matches newly applied
        self.done = 0  # entries processed (applied, voided, duplicates or skipped)
        #: A line per match the model could not rate (skipped, as the worker dead-letters it).
        self.skipped: list[str] = []
        #: The events of the last `keep` matches applied, by match id, oldest first.
        self.recent: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self.keep = recent

    def add(self, entries: list[Entry]) -> None:
        self.pending += entries

    async def apply_upto(self, positions: Mapping[int, int]) -> list[Entry]:
        """Apply the pending entries the live generation has applied (files' entries, and
        topic records before its positions; all of them when it has no position); returns
        them."""

        def live_has(entry: Entry) -> bool:
            where = entry[1]
            return where is None or not positions or where[1] < positions.get(where[0], 0)

        ready = 0
        while ready < len(self.pending) and live_has(self.pending[ready]):
            ready += 1
        for start in range(0, ready, self.batch_size):
            chunk = self.pending[start : min(start + self.batch_size, ready)]
            result, skipped = await process_skipping(
                self.processor, [m for m, _ in chunk], [w for _, w in chunk]
            )
            self.skipped += [skip.line() for skip in skipped]
            newly = [r for r in result.results if not r.duplicate and not r.voided]
            self.applied += len(newly)
            self.recent.update((r.match.match_id, r.events) for r in newly[-self.keep :])
            while len(self.recent) > self.keep:
                self.recent.popitem(last=False)
            self.done += len(chunk)
            if self.progress is not None:
                self.progress(self.done, self.done + len(self.pending) - start - len(chunk))
        applied = self.pending[:ready]
        del self.pending[:ready]
        return applied


def players_of(entries: Iterable[Entry]) -> set[str]:
    """The ids of every player of the entries' matches."""
    return {player.id for match, _ in entries for team in match.teams for player in team.players}


def touched(so_far: set[str] | None, entries: Sequence[Entry]) -> set[str] | None:
    """`so_far` and the players of `entries`; None (every player) once a season-start record
    is among them, since a season moves every player of the ladder."""
    if so_far is None or any(match.season is not None for match, _ in entries):
        return None
    return so_far | players_of(entries)


class _Clock:
    """Seconds per step, each measured from the end of the previous one."""

    def __init__(self, steps: dict[str, float]) -> None:
        self.steps, self.last = steps, time.perf_counter()

    def step(self, name: str) -> None:
        now = time.perf_counter()
        self.steps[name], self.last = now - self.last, now


class _Compare:
    """The correction events: one per player whose state differs between the live generation
    and the staging one (a player the staging one lacks is back at the prior). `all` compares
    every player; `again` re-compares the given ones, whose states may have moved since."""

    def __init__(
        self,
        store: StateStore,
        ladder: str,
        model: RatingModel,
        generation: int,
        report: RerateReport,
        at: float,
    ) -> None:
        self.store, self.ladder, self.model, self.generation = store, ladder, model, generation
        prior = model.initial()
        self.empty = PlayerState(prior.mu, prior.sigma)
        # The ladder is part of the id: two ladders' first re-rates are both generation 1, and a
        # player id on both would otherwise get one event_id with two payloads.
        self.id = f"rerate:{ladder}:{generation}"
        self.cause: dict[str, Any] = {
            "id": self.id,
            "reason": report.reason,
            "voided": report.voided,
            "unvoided": report.unvoided,
            "params": report.params,
        }
        self.stamp = format_timestamp(at)
        self.changed: dict[str, tuple[PlayerState, PlayerState]] = {}

    async def all(self) -> None:
        """Compare every player of both generations."""
        await self._compare(None)

    async def again(self, players: set[str] | None) -> list[dict[str, Any]]:
        """Compare `players` (None: every player) again; the events, by player id."""
        if players is None or players:
            await self._compare(players)
        return [self._event(player_id, *self.changed[player_id]) for player_id in sorted(self.changed)]

    async def _compare(self, only: set[str] | None) -> None:
        before = await self.store.players(self.ladder, only=only)
        after = await self.store.players(self.ladder, generation=self.generation, only=only)
        for player_id in before.keys() | after.keys() if only is None else only:
            old, new = before.get(player_id, self.empty), after.get(player_id, self.empty)
            if old[:4] == new[:4]:
                self.changed.pop(player_id, None)
            else:
                self.changed[player_id] = (old, new)

    def _event(self, player_id: str, old: PlayerState, new: PlayerState) -> dict[str, Any]:
        return correction_changed(
            self.id,
            self.ladder,
            player_id,
            self.model.name,
            old[:2],
            new[:2],
            self.model.display(Rating(new.mu, new.sigma)),
            new.games,
            self.stamp,
            self.cause,
        )
