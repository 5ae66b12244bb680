"""A ladder on a real broker and Redis for the checkpoint tests: matches published to a fresh
matches topic, a "worker" (the worker's `Processor`) applying them from the topic with their
offsets, and the oracle (a replay of the published matches)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from stream_rater.bench.rerate_history import commit_group
from stream_rater.checkpoints import Checkpointer, CheckpointSink, Manifest
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.config.settings import Settings
from stream_rater.corrections.history import HistorySources, apply_correction
from stream_rater.corrections.planning import RerateReport, Send
from stream_rater.corrections.rerate import Correction
from stream_rater.kafka import ladder_history, read_log
from stream_rater.kafka.produce import match_record, send_records
from stream_rater.offline.recovery import recover
from stream_rater.processor import Processor
from stream_rater.store import StateStore
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel


def duels(ladder: str, n: int, first: int = 0, seed: int = 5) -> list[dict]:
    """`n` 1-vs-1 matches of `ladder` among 25 players, one minute apart."""
    rng = random.Random(seed + first)
    players = [f"p{i}" for i in range(25)]
    return [
        duel(f"m{i}", *rng.sample(players, 2), ladder=ladder, at=1.7e9 + 60 * i)
        for i in range(first, first + n)
    ]


@dataclass
class Lab:
    """One ladder's topic, store and worker."""

    settings: Settings
    ladder: str
    store: StateStore
    ladders: Ladders = field(init=False)
    published: list[dict] = field(default_factory=list)
    applied: int = 0

    def __post_init__(self) -> None:
        self.ladders = Ladders([Ladder(self.ladder, "trueskill")])
        self.processor = Processor(self.ladders, self.store)

    async def publish(self, events: list[dict]) -> None:
        await send_records(self.settings, [match_record(self.settings.topic_matches, e) for e in events])
        self.published += events

    async def work(self, batch: int = 100, produce: bool = False) -> None:
        """Apply every published match not applied yet, as the worker does, in batches; with
        `produce`, send each batch's events to the updates topic and commit the group's offset
        after it, as the worker does."""
        from stream_rater.kafka import update_sender

        records, _ = await read_log(self.settings, self.settings.topic_matches)
        history = ladder_history(records, self.ladders, self.ladder)
        todo = list(zip(history.matches, history.where))[self.applied :]
        async with update_sender(self.settings) as send:
            for i in range(0, len(todo), batch):
                chunk = todo[i : i + batch]
                result = await self.processor.process([m for m, _ in chunk], [w for _, w in chunk])
                if produce:
                    await send([e for r in result.results for e in r.events])
                    await commit_group(self.settings, {0: chunk[-1][1][1] + 1})  # type: ignore[index]
                self.processor.produced(result)
        self.applied += len(todo)

    async def correct(
        self,
        correction: Correction,
        sink: CheckpointSink | None,
        send: Send | None = None,
        since: str | None = None,
    ) -> RerateReport:
        """`apply_correction` of `correction` on this lab's ladder and store (events discarded
        unless `send` is given), starting from `sink`'s checkpoints (`since`: which one)."""
        sources = HistorySources(sink=sink, since=since)
        return await apply_correction(
            correction, self.settings, self.ladders, self.store, send=send or discard, sources=sources
        )

    async def void(
        self, match_id: str, sink: CheckpointSink | None, send: Send | None = None
    ) -> RerateReport:
        """Void `match_id` of this lab's ladder."""
        return await self.correct(Correction("void", self.ladder, (match_id,), "r"), sink, send)

    async def oracle(self, voided: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
        """States of a replay of the published matches without `voided`."""
        from stream_rater.contracts import parse_match

        store = MemoryStore()
        matches = [parse_match(e, self.ladders) for e in self.published if e["match_id"] not in voided]
        await Processor(self.ladders, store).process(matches)
        return await store.players(self.ladder)


def exact(states: dict) -> dict:
    """μ, σ, games, last match of each player."""
    return {p: tuple(s)[:4] for p, s in states.items()}


async def new_lab(broker_url: str, redis_url: str, unique_name: str) -> AsyncIterator[Lab]:
    """A `Lab` on fresh topics of one partition and the ladder `unique_name`; its keys are
    deleted afterwards (the body of the modules' ``lab`` fixtures)."""
    from stream_rater.kafka import create_topics
    from stream_rater.store import open_store

    await create_topics(broker_url, {f"{unique_name}-matches": 1, f"{unique_name}-updates": 1})
    settings = Settings(
        broker=broker_url,
        topic_matches=f"{unique_name}-matches",
        topic_updates=f"{unique_name}-updates",
        partitions=1,
        topic_checkpoints=f"{unique_name}-checkpoints",
        consumer_group=unique_name,
    )
    store = open_store(redis_url)
    yield Lab(settings, unique_name, store)
    client = store.client  # type: ignore[attr-defined]
    keys = [k async for k in client.scan_iter(match=f"sr:{{{unique_name}}}*")]
    if keys:
        await client.unlink(*keys)
    await store.close()


async def checkpointed(lab: Lab, sink: CheckpointSink) -> Manifest:
    """One forced checkpoint round of `lab`'s ladder: the checkpoint written."""
    checkpointer = Checkpointer(lab.settings, lab.ladders, lab.store, sink, lab.ladder)
    try:
        written = (await checkpointer.round(force=True)).written
    finally:
        await checkpointer.close()
    assert written is not None
    return written


async def discard(events: object) -> None:
    """A `Send` that drops the correction events."""


async def next_round_recovers(lab: Lab, sink: CheckpointSink, voided: set[str]) -> Manifest:
    """One unforced checkpoint round of `lab`'s ladder, which must write a checkpoint with the
    live voids `voided`; a recovery into an empty store then starts from it and equals a replay
    without `voided`. The checkpoint written."""
    checkpointer = Checkpointer(lab.settings, lab.ladders, lab.store, sink, lab.ladder)
    try:
        done = await checkpointer.round()
    finally:
        await checkpointer.close()
    assert done.written is not None and set(done.written.voids) == voided, done.line()
    scratch = MemoryStore()
    _, _, start, _ = await recover(lab.settings, lab.ladders, lab.ladder, scratch, sink)
    assert start is not None and start.id == done.written.id
    assert exact(await scratch.players(lab.ladder)) == exact(await lab.oracle(voided))
    return done.written
