"""Re-rate a ladder beside the live one and switch over without stopping the stream.

The protocol (a reindex with an alias swap; the store's generations make it possible):

1. **Lock.** Take the ladder's re-rate lock (a lease renewed while the re-rate runs; a second
   re-rate is refused, and a crashed one's lock expires) and open an empty *staging*
   generation with the new parameter overrides. A staging generation a crashed re-rate left
   behind is dropped; correction events a crashed switch stored are sent first (and their
   players' hold ended).
2. **Voids.** Check that every match to void is in the ladder's history, record the voids.
3. **Build.** Apply the ladder's history in log order to the staging generation with the
   same `Processor` the worker uses (voided matches are skipped by the processor itself), up
   to the live generation's position in the matches topic; keep reading the topic while the
   live worker moves on, until the gap is small. A re-rate that starts from a checkpoint
   (`corrections.starting`: a void's, the newest made before the voided match) first writes
   the checkpoint's state into the staging generation and reads the history from its
   offsets on: its cost follows the matches after the corrected one, not the ladder's age.
4. **Compare.** Compare both generations' players while the live one still moves: a player
   no match after the staging generation's position touches keeps both states until the
   switch, so only the players of the last few matches need comparing again. Their
   correction events (one per player whose state changed) are staged in the store now,
   beside the staging generation, so that the switch does not carry them.
5. **Switch.** Freeze the live generation (its commits are refused; the worker waits and
   retries), apply the last few matches up to its now fixed position, compare their players
   again, and in one atomic step make the staging generation live, make the staged
   correction events (with the changes of the players compared again) the outbox and turn
   the freeze into a *hold* of their players (renames: the same few commands for ten or ten
   thousand corrected players): the live ladder goes on, but a live commit writing a held
   player is refused (the worker retries) until that player's correction event is with the
   broker. Send the events in chunks, each chunk's players released once the broker has it,
   the players of the matches the topic shows next first (the live worker's next commits;
   the topic is read again before each chunk); then release the lock and drop the old
   generation. The live ladder is blocked only from the freeze to the switch: a fetch from
   the topic, a few matches, a few reads and a produce — milliseconds, whatever the ladder's
   size and the number of corrected players; a match of a corrected player waits at most
   about two chunks' sends, however many players were corrected. The staging generation's
   markers are written empty (its events are never produced). The live ladder's last
   matches whose live markers still hold their events (a worker died between its commit and
   its produce, or is producing them now) are sent by the re-rate itself, in log order,
   before the switch: on `rating-updates` every player's events then chain, the live ones
   ending where the correction event begins (a worker still producing them adds duplicates
   after it), and the hold puts a player's next live events after it.

A crash before the switch leaves the live generation as it was (the next re-rate drops the
abandoned staging one, its staged events with it); a crash after it leaves the new generation live and its correction
events in the store's outbox, sent by the next re-rate of the ladder (the hold expires with
the lock's lease). A step whose reply is lost (a connection cut, Redis restarted) is sent
again by the store and counts once (`store.roles.RerateStore`): the re-rate goes on as if
nothing happened.

What a re-rate is asked, reports and checks first is in `corrections.planning`, the build in
`corrections.building`, the comparison in `corrections.switching`; `Rerate` runs the phases.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from stream_rater.checkpoints import Checkpoint, seed
from stream_rater.checkpoints.state import SEED_MARKERS, Deduped
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.corrections.building import Build, covers, not_delivered, players_of, touched
from stream_rater.corrections.planning import (
    DEFAULT_OPTIONS,
    FOLLOW_ROUNDS,
    Correction,
    Entry,
    History,
    Progress,
    RerateOptions,
    RerateReport,
    Send,
    Tuning,
    UnknownMatches,
    check_not_lost,
    check_voids,
    new_owner,
)
from stream_rater.corrections.switching import Clock, Compare
from stream_rater.processor import Processor, Target
from stream_rater.rating.base import RatingModel
from stream_rater.store.base import Generations
from stream_rater.store.roles import RerateStore

__all__ = [
    "BeforeStart",
    "Correction",
    "Entry",
    "FOLLOW_ROUNDS",
    "History",
    "Progress",
    "Rerate",
    "RerateOptions",
    "RerateReport",
    "Send",
    "Tuning",
    "UnknownMatches",
    "new_owner",
    "players_of",
    "touched",
]


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """No garbage collection inside the block: a full one over a re-rate's heap (a million
    matches of history) takes longer than the whole freeze should."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class BeforeStart(RuntimeError):
    """A match to (un-)void is not in the history read from the checkpoint the re-rate started
    from: older than every checkpoint kept (or not the ladder's at all)."""


class Rerate:
    """Recompute a ladder from its history into a new generation with a `Correction` applied
    and switch to it while the worker keeps rating: one method per phase of the protocol in
    the module docstring, `run` calls them in order. `send` produces the correction events;
    `options` say how it runs (pacing, progress, the lock's holder); `start` is the checkpoint
    it starts from (None: the history's start)."""

    # What the phases find out, for the phases after them.
    #: The ladder's generations as last read, and its voids before this re-rate.
    live: Generations
    current: dict[str, dict[str, Any]]
    #: The rating model with the new parameters, and those overrides (lock).
    model: RatingModel
    overrides: dict[str, Any]
    #: The history's first read, and when the voids were recorded (record_voids).
    entries: list[Entry]
    now: float
    #: The staging generation's progress through the history (build), the comparison of the
    #: players and the players of the matches applied after it (compare; None: every player,
    #: once a season start moved them all).
    staging: Build
    comparison: Compare
    touched: set[str] | None

    def __init__(
        self,
        store: RerateStore,
        ladders: Ladders,
        correction: Correction,
        history: History,
        send: Send,
        options: RerateOptions = DEFAULT_OPTIONS,
        *,
        start: Checkpoint | None = None,
    ) -> None:
        self.store, self.ladders, self.ladder = store, ladders, correction.ladder
        self.start = start
        if start is not None:
            history = Deduped(history, start)
        self.history, self.send, self.tuning, self.progress = history, send, options.tuning, options.progress
        self.owner = options.owner or new_owner()
        ids = list(dict.fromkeys(correction.match_ids))
        self.void = ids if correction.kind == "void" else []
        self.unvoid = ids if correction.kind == "unvoid" else []
        self.params, self.reason = dict(correction.params), correction.reason
        self.configured = ladders.get(self.ladder)
        self.report = RerateReport(self.ladder, params=dict(self.params), reason=self.reason)
        self.report.checkpoint = start.id if start is not None else None
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
        self.overrides = overrides = {**(self.live.params or {}), **self.params}
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
                # Held still if its re-rate aborted, not knowing its switch took effect: freed.
                await self.store.release(self.ladder, self.owner, [e["player_id"] for e in pending])
            yield
        finally:
            keeper.cancel()
            # Its failure is no outcome: a lock lost fails the next step, and a renew sent again
            # (its reply lost) may land after the finish released the lock.
            with contextlib.suppress(asyncio.CancelledError, Exception):
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
        if self.start is not None:
            known = {match.match_id for match, _ in self.entries}
            before = [m for m in self.void + self.unvoid if m not in known]
            if before:
                raise BeforeStart(
                    f"the {(self.void and 'void') or 'unvoid'} of {', '.join(map(repr, before))}, not after "
                    f"checkpoint {self.start.id} (the newest that does not hold it)"
                )
        interrupted = self.live.voids_pending
        check_voids(self.ladder, self.entries, self.current, self.void, self.unvoid, interrupted)
        check_not_lost(self.ladder, self.entries, self.live.positions, self.history.committed(), self.current)
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
        position, reading on while the live worker moves, until a round finds few matches.
        From a checkpoint, its state is written into the staging generation first, with the
        ended seasons it passed copied from the live generation."""
        if self.start is not None:
            await seed(
                self.store,
                self.ladders,
                self.start,
                self.generation,
                params=self.overrides,
                markers=SEED_MARKERS,
                whole=False,
            )
            # The seasons it passed ended before it, so before the corrected match: as live.
            await self.store.copy_seasons(self.ladder, self.live.live, self.generation, self.start.seasons)
        processor = Processor(self.ladders, self.store, target=Target(self.generation))
        self.staging = Build(
            processor,
            self.entries,
            self.tuning.batch_size,
            self.tuning.recent,
            self.progress,
            budget=self.tuning.lease / 6,
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
        self.comparison = Compare(self.store, self.ladder, self.model, self.generation, self.report, self.now)
        await self.comparison.all()
        await self.store.stage(self.ladder, self.owner, self.generation, self.comparison.stage())
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
        again, send the live events not yet produced, switch atomically (the staged correction
        events, with those changes, become the outbox, the freeze the hold of their players);
        each step's time goes to the report's `blocked_steps`, no garbage collection in
        between. Then send them (`send_held`) and release the lock."""
        store, ladder, build = self.store, self.ladder, self.staging
        # Markers only ever go from holding events to empty, and every match committed from
        # here on is applied inside the freeze: only these and those can hold events then.
        maybe = set(await store.unproduced(ladder, self.live.live, list(build.recent)))
        clock = Clock(self.report.blocked_steps)
        with collections_paused():
            await self._switch_frozen(maybe, clock)
        await self.send_held(self.comparison.sorted())
        await store.finish_rerate(ladder, self.owner)
        self.report.held_seconds = time.perf_counter() - clock.last

    async def _switch_frozen(self, maybe: set[str], clock: Clock) -> None:
        """The blocked part of `switch`: from the freeze to the switch."""
        store, ladder, build = self.store, self.ladder, self.staging
        await store.freeze(ladder, self.owner, self.tuning.lease)
        self.live = live = await store.generations(ladder)
        clock.step("freeze")
        while not covers(self.history.reached(), live.positions):
            build.add(await self.history.read())
        clock.step("read")
        last = await build.apply_upto(live.positions)
        clock.step("apply")
        changed, dropped = await self.comparison.again(touched(self.touched, last))
        clock.step("compare")
        maybe |= {match.match_id for match, _ in last}
        held = await store.unproduced(ladder, live.live, [m for m in build.recent if m in maybe])
        held = not_delivered(held, build.recent, self.history.committed())
        if held:
            await self.send([event for events in held.values() for event in events])
        clock.step("unproduced")
        await store.switch(ladder, self.owner, self.generation, live, changed, dropped)
        self.switched = True
        clock.step("switch")
        self.report.blocked_seconds = sum(self.report.blocked_steps.values())
        self.report.applied, self.report.corrections = build.applied, len(self.comparison.events)
        self.report.skipped = build.skipped
        self.report.positions = live.positions

    async def send_held(self, events: list[dict[str, Any]]) -> None:
        """Send the correction events `tuning.send_chunk` at a time, releasing each chunk's
        players once the broker has it. Meanwhile the topic is read on: the held players of
        the matches it shows (the live worker's next commits) go first in the next chunk."""
        waiting = {event["player_id"]: event for event in events}
        wanted: set[str] = set()

        async def watch() -> None:
            while waiting:
                wanted.update(players_of(await self.history.read()))
                await asyncio.sleep(0.001)

        watcher = asyncio.create_task(watch())
        try:
            while waiting:
                first = {p for p in wanted if p in waiting}
                wanted.clear()
                rest = (p for p in waiting if p not in first)
                more = list(itertools.islice(rest, max(0, self.tuning.send_chunk - len(first))))
                chunk = [waiting.pop(p) for p in [*sorted(first), *more]]
                await self.send(chunk)
                await self.store.release(self.ladder, self.owner, [event["player_id"] for event in chunk])
        finally:
            # The watcher stops after its read; one still reading a second later (a broker gone
            # since the last send) is cancelled. A failed read only loses the order.
            waiting.clear()
            await asyncio.wait([watcher], timeout=1.0)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
