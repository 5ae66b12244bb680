"""`verify`'s board check on a ladder with modes (issue 48): each mode's board against its
mode's states, a drifted row named by its stored id."""

from __future__ import annotations

from stream_rater.offline.verify import board_differences
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from tests.unit.moding import arena, arena_ladders, mixed
from tests.unit.processing import fixed_clock


async def test_each_modes_board_is_checked_and_a_drifted_row_is_named():
    store = MemoryStore()
    await Processor(arena_ladders(), store, clock=fixed_clock).process(mixed(40))
    states = await store.players("arena")
    assert await board_differences(store, arena(), states, fixed_clock(), 1e-9) == []
    store._generation("arena", None).scores["ffa@p3"] += 1.0  # the board row drifts from the state
    found = await board_differences(store, arena(), states, fixed_clock(), 1e-9)
    assert [d.player_id for d in found] == ["ffa@p3"]
