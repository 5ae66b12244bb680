"""`TimedStore`: the worker's round trips are timed by operation, everything else is the inner store's."""

from __future__ import annotations

from prometheus_client import REGISTRY

from stream_rater.service.timed_store import TimedStore
from stream_rater.store import Commit
from stream_rater.store.memory import MemoryStore


def timed(operation: str) -> float:
    """How many round trips of `operation` the metric has counted so far."""
    value = REGISTRY.get_sample_value("stream_rater_store_round_trip_seconds_count", {"operation": operation})
    return value or 0.0


async def test_reads_commits_and_lookups_are_timed_each_under_its_operation():
    store = TimedStore(MemoryStore())
    before = {op: timed(op) for op in ("read", "commit", "lookup")}
    await store.commit(Commit("l", [], {"m1": []}))
    await store.read("l", [], [], ["m1"])
    await store.read_many([])
    await store.lookup("l", ["a"])
    assert {op: timed(op) - before[op] for op in before} == {"read": 2, "commit": 1, "lookup": 1}


async def test_every_other_method_is_the_inner_stores():
    inner = MemoryStore()
    store = TimedStore(inner)
    await store.commit(Commit("l", [], {"m1": []}, positions={0: 7}))
    assert store.round_trips == inner.round_trips == 1
    assert await store.generations("l") == await inner.generations("l")
    assert (await store.generations("l")).positions == {0: 7}
    assert await store.voids("l") == {}
    assert store.namespace == inner.namespace
