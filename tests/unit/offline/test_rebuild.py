"""Which events a rebuild of a lost ladder produces (`offline.rebuild.unacknowledged`): those of
the matches at or after the consumer group's committed offset of their partition — all of them
when the group has none — and through `replay`, the markers it leaves holding events."""

from __future__ import annotations

from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.offline.rebuild import unacknowledged
from stream_rater.offline.replay import replay
from stream_rater.processor import BatchResult, Processor
from stream_rater.store.memory import MemoryStore
from tests.helpers import duel

LADDERS = Ladders([Ladder("default", "trueskill")])


async def _rebuilt(committed: dict[int, int]) -> tuple[list[str], MemoryStore]:
    """Replay six matches at offsets 0..5 of partition 0 in batches of two; the match ids whose
    events `unacknowledged` picks, and the store."""
    matches = [parse_match(duel(f"m{i}", f"p{i}", f"q{i}"), LADDERS) for i in range(6)]
    store = MemoryStore()
    sent: list[str] = []

    async def emit(result: BatchResult, where) -> None:
        sent.extend(e["match_id"] for e in unacknowledged(result, where, committed))

    await replay(
        matches, Processor(LADDERS, store), batch_size=2, where=[(0, i) for i in range(6)], on_batch=emit
    )
    return sorted(set(sent)), store


async def test_the_events_of_matches_at_or_after_the_committed_offset_are_produced():
    sent, store = await _rebuilt({0: 4})
    assert sent == ["m4", "m5"]
    assert (await store.generations("default")).positions == {0: 6}


async def test_without_a_committed_offset_every_match_s_events_are_produced():
    sent, _ = await _rebuilt({})
    assert sent == [f"m{i}" for i in range(6)]


async def test_the_store_keeps_only_the_last_batch_s_events_unproduced():
    _, store = await _rebuilt({0: 4})
    assert list(await store.unproduced("default", 0, [f"m{i}" for i in range(6)])) == ["m4", "m5"]
