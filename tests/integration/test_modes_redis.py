"""A ladder with modes (issue 48) on a real Redis and a Redis Cluster: the same states, boards
per mode and quality per mode as the memory store, every key in the ladder's one slot, and
`verify`'s board check finds nothing."""

from __future__ import annotations

import math
import uuid

import pytest
import redis

from stream_rater.contracts.modes import board_name
from stream_rater.offline.verify import board_differences
from stream_rater.processor import Processor
from stream_rater.processor.modes import mode_scorer
from stream_rater.store import open_store
from stream_rater.store.memory import MemoryStore
from tests.unit.moding import MODES, arena_ladders, mixed

pytestmark = pytest.mark.integration


def clock() -> float:
    return 1_700_000_000.0


async def batches(processor: Processor, matches: list, size: int = 9) -> list:
    events = []
    for lo in range(0, len(matches), size):
        events += (await processor.process(matches[lo : lo + size])).events
    return events


@pytest.mark.parametrize("url_fixture", ["redis_url", "redis_cluster_url"])
async def test_a_moded_ladder_on_redis_equals_the_memory_store_mode_by_mode(request, url_fixture):
    url = request.getfixturevalue(url_fixture)
    name = f"t-{uuid.uuid4().hex[:10]}"
    ladders, matches = arena_ladders(name), mixed(120, ladder=name)
    store, memory = open_store(url), MemoryStore()
    try:
        events = await batches(Processor(ladders, store, clock=clock), matches)
        assert events == await batches(Processor(ladders, memory, clock=clock), matches)
        states = await store.players(name)
        assert states == await memory.players(name)
        for mode in MODES:
            board = board_name(name, mode)
            top = await store.board_top(board, 100, None)
            assert top and top == await memory.board_top(board, 100, None)
            totals, expected = await store.rating_totals(board, None), await memory.rating_totals(board, None)
            assert totals.ranked == expected.ranked == len(top)  # the sum is kept running in Redis
            assert math.isclose(totals.ranked_sum, expected.ranked_sum, rel_tol=1e-12)
            ranks = await store.board_ranks(board, ["p1", "p2"], None)
            assert ranks == await memory.board_ranks(board, ["p1", "p2"], None)
            sums, window = await store.quality(name, mode_scorer(mode), 50)
            expected_sums, expected_window = await memory.quality(name, mode_scorer(mode), 50)
            assert window == expected_window and sums.keys() == expected_sums.keys()
            assert all(math.isclose(sums[k], expected_sums[k], rel_tol=1e-12) for k in sums)
        assert await store.board_top(name, 10, None) == []  # the ladder's own board: unused
        assert await board_differences(store, ladders[name], states, clock(), 1e-9) == []
    finally:
        await store.close()
    if url_fixture == "redis_url":
        keys = {k.decode() for k in redis.Redis.from_url(url).scan_iter(match=f"sr:*{name}*")}
        assert keys and all(k.startswith(f"sr:{{{name}}}:") for k in keys)
        assert {f"sr:{{{name}}}:m:{mode}:lb" for mode in MODES} <= keys
