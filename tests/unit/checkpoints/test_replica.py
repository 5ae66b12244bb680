"""A replay from a checkpoint equals the whole replay: states, leaderboard, quality, markers."""

from __future__ import annotations

import pytest

from stream_rater.checkpoints import MemorySink, ReplayNeeds, Replica, latest_usable
from tests.unit.checkpoints.support import LADDERS, checkpoint_at, entries, exact, replayed


@pytest.mark.parametrize("ladder", ["ts", "elo"])
async def test_a_replay_from_a_checkpoint_equals_the_whole_replay(ladder: str):
    history = entries(ladder, 400)
    sink = MemorySink()
    await sink.write(await checkpoint_at(history, ladder, 250))
    start = await latest_usable(sink, ladder, ReplayNeeds({}, None))
    assert start is not None
    replica = await Replica(LADDERS, ladder, start).open()
    await replica.apply(history)  # the first 250 are passed already
    full = await replayed(history, ladder)
    assert exact(await replica.store.players(ladder)) == exact(await full.players(ladder))
    assert await replica.store.leaderboard(ladder, 50) == await full.leaderboard(ladder, 50)
    (sums, window), (expected, whole) = [await s.quality(ladder, "live", 1000) for s in (replica.store, full)]
    assert window == whole and sums == pytest.approx(expected, rel=1e-12)  # summed in other batches
    again = await replica.store.read(ladder, [], [], ["m3", "m399"])
    assert set(again.applied) == {"m3", "m399"}, "the checkpoint's markers keep redeliveries duplicates"
