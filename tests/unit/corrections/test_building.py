"""The re-rate's build paces its processor batches so that the lock it holds never expires
while it rates (the lock keeper shares the event loop with the rating's CPU work)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.corrections.building import MIN_CHUNK
from stream_rater.corrections.rerate import Correction, Rerate, RerateOptions, Tuning
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel

LADDERS = Ladders([Ladder("slow", "trueskill")])


class Topic:
    """The ladder's history, all applied by the live worker already."""

    def __init__(self, entries: list) -> None:
        self.entries = entries

    async def read(self) -> list:
        new, self.entries = self.entries, []
        return new

    def reached(self) -> dict[int, int]:
        return {0: 400}

    def committed(self) -> dict[int, int]:
        return {0: 400}


#: Seconds of a lease, and of blocking work per match: a lease long enough that a loaded
#: machine's stall of the event loop (the keeper renews at a third of it) does not lose it.
LEASE, WORK = 2.4, 0.012


async def test_a_build_slower_than_the_lease_per_batch_keeps_its_lock(monkeypatch: pytest.MonkeyPatch):
    """400 matches at 12 ms each of blocking work: in one batch (4.8 s) the 2.4 s lease would
    expire before the keeper could renew it, and the re-rate would fail every time; paced,
    the batches stay under a sixth of the lease and the re-rate completes."""
    store = MemoryStore()
    matches = [
        parse_match(duel(f"m{i}", f"p{i % 9}", f"p{i % 7 + 9}", ladder="slow"), LADDERS) for i in range(400)
    ]
    await Processor(LADDERS, store).process(matches, [(0, i) for i in range(400)])
    model = type(LADDERS.get("slow").rating_model)  # the re-rate makes its own, with its parameters
    real = model.rate_match

    def slow(self: Any, teams: Any, outcome: Any) -> Any:
        time.sleep(WORK)  # stands for CPU work: it blocks the event loop as rating does
        return real(self, teams, outcome)

    monkeypatch.setattr(model, "rate_match", slow)
    sizes: list[int] = []
    real_process = Processor.process

    async def counted(self: Processor, batch: Any, where: Any = None) -> Any:
        sizes.append(len(batch))
        return await real_process(self, batch, where)

    monkeypatch.setattr(Processor, "process", counted)
    correction = Correction("rerate", "slow", [], "", {"beta": 5.0})
    entries = [(m, (0, i)) for i, m in enumerate(matches)]

    async def send(events: Any) -> None:
        return None

    report = await Rerate(
        store, LADDERS, correction, Topic(entries), send, RerateOptions(Tuning(lease=LEASE))
    ).run()
    assert report.applied == 400 and report.generation == 1
    assert sizes[0] == MIN_CHUNK and max(sizes) * WORK < LEASE / 3
