"""A void starts from the newest checkpoint made before the voided match, with the live parameters."""

from __future__ import annotations

from stream_rater.checkpoints import MemorySink, ReplayNeeds, latest_usable
from tests.unit.checkpoints.support import checkpoint_at, entries


async def test_a_checkpoint_past_a_voided_match_is_not_used_for_its_void():
    history = entries("ts", 300)
    sink = MemorySink()
    early, late = await checkpoint_at(history, "ts", 100), await checkpoint_at(history, "ts", 250)
    await sink.write(early)
    await sink.write(late)
    found = await latest_usable(sink, "ts", ReplayNeeds({"m150": {}}, None))
    assert found is not None and found.id == early.id
    found = await latest_usable(sink, "ts", ReplayNeeds({"m260": {}}, None))
    assert found is not None and found.id == late.id
    assert await latest_usable(sink, "ts", ReplayNeeds({"m50": {}}, None)) is None
    assert await latest_usable(sink, "ts", ReplayNeeds({}, {"beta": 3.0})) is None
