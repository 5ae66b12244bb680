"""A checkpoint seeded into a re-rate's staging generation: a void from it equals a full re-rate
while reading only the history after it."""

from __future__ import annotations

from typing import Any

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
