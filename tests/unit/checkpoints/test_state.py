"""A checkpoint seeded into a re-rate's staging generation: a void from it equals a full re-rate
while reading only the history after it."""

from __future__ import annotations

from typing import Any

import pytest

from stream_rater.checkpoints import Replica
from stream_rater.checkpoints.state import seed
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts.modes import board_name
from stream_rater.corrections.rerate import Correction, Rerate
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from tests.unit.checkpoints.support import LADDERS, checkpoint_at, entries, exact, replayed
from tests.unit.moding import mixed


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


async def test_a_moded_ladder_seeded_from_a_checkpoint_has_each_modes_board():
    """A ladder with modes (issue 48): the seeded states keep their stored ids, and each is
    ranked on its mode's board by its mode's display rating (``k`` differs by mode), in
    commits the store knows are moded, as the processor's."""
    modes = {"duel": {"k": 2.0}, "ffa": {}, "team": {}}
    ladders = Ladders([Ladder("arena", "trueskill", {"mode_coupling": 0.6}, modes=modes)])
    history = [(m, (0, i)) for i, m in enumerate(mixed(60))]
    live = MemoryStore()
    await Processor(ladders, live).process([m for m, _ in history], [w for _, w in history])
    replica = await Replica(ladders, "arena").open()
    await replica.apply(history)
    seeded, commits = MemoryStore(), []
    commit_many = seeded.commit_many

    async def recorded(batch: Any) -> Any:
        commits.extend(batch)
        return await commit_many(batch)

    seeded.commit_many = recorded  # type: ignore[method-assign]
    await seed(seeded, ladders, await replica.checkpoint(), None)
    assert commits and all(c.moded for c in commits)
    assert exact(await seeded.players("arena")) == exact(await live.players("arena"))
    for mode in modes:
        board = board_name("arena", mode)
        assert await seeded.board_top(board, 50, None) == await live.board_top(board, 50, None) != []
