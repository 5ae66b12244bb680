"""A checkpoint seeded into a re-rate's staging generation: a void from it equals a full re-rate
while reading only the history after it."""

from __future__ import annotations

from typing import Any

import pytest

from stream_rater.corrections.rerate import Correction, Rerate
from tests.unit.checkpoints.support import LADDERS, checkpoint_at, entries, exact, replayed


class Topic:
    """The ladder's history after the checkpoint, all applied by the live worker already."""

    def __init__(self, entries: list, end: int) -> None:
        self.entries, self.end, self.read_total = entries, end, 0

    async def read(self) -> list:
        new, self.entries = self.entries, []
        self.read_total += len(new)
        return new

    def reached(self) -> dict[int, int]:
        return {0: self.end}

    def committed(self) -> dict[int, int]:
        return {0: self.end}


async def test_a_void_from_a_checkpoint_equals_a_full_rerate_and_reads_only_after_it():
    history = entries("ts", 500)
    live = await replayed(history, "ts")
    start = await checkpoint_at(history, "ts", 400)
    topic = Topic(history[400:], 500)
    sent: list[dict] = []

    async def send(events: Any) -> None:
        sent.extend(events)

    correction = Correction("void", "ts", ("m450",), "cheat")
    report = await Rerate(live, LADDERS, correction, topic, send, start=start).run()
    assert topic.read_total == 100 and report.applied == 99 and report.checkpoint == start.id
    oracle = await replayed(history, "ts", {"m450": {}})
    assert exact(await live.players("ts")) == exact(await oracle.players("ts"))
    assert await live.leaderboard("ts", 50) == await oracle.leaderboard("ts", 50)
    assert sent and {e["player_id"] for e in sent} <= {f"p{k}" for k in range(20)}


async def test_a_redelivery_of_a_match_before_the_checkpoint_stays_a_duplicate_without_its_marker(
    monkeypatch: pytest.MonkeyPatch,
):
    """Only the last `SEED_MARKERS` markers are written; a record of an older applied match
    after the checkpoint is still skipped, as the full replay skips it."""
    monkeypatch.setattr("stream_rater.corrections.rerate.SEED_MARKERS", 10)
    history = entries("ts", 300)
    again = (history[5][0], (0, 300))  # m5 published again after the checkpoint
    history = [*history, again]
    live = await replayed(history, "ts")
    start = await checkpoint_at(history, "ts", 200)
    report = await Rerate(
        live, LADDERS, Correction("void", "ts", ("m250",)), Topic(history[200:], 301), _discard, start=start
    ).run()
    assert report.applied == 99
    oracle = await replayed(history, "ts", {"m250": {}})
    assert exact(await live.players("ts")) == exact(await oracle.players("ts"))


async def _discard(events: Any) -> None:
    return None
