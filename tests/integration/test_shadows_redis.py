"""Shadow models (issue #38) on a real Redis and a Redis Cluster: each shadow equals a replay
with its parameters, the live ladder is bit for bit what it is without shadows, a redelivered
batch changes no shadow, and a shadow's keys share nothing with its ladder's (own hash tag)."""

from __future__ import annotations

import uuid

import pytest
import redis

from stream_rater.config.ladders import Ladders
from stream_rater.processor import Processor
from stream_rater.store import open_store
from stream_rater.store.memory import MemoryStore
from tests.unit.shadowing import alone, duels, live, shadowed

pytestmark = pytest.mark.integration


def clock() -> float:
    return 1_700_000_000.0


async def batches(processor: Processor, matches: list, size: int = 50) -> list:
    events = []
    for lo in range(0, len(matches), size):
        events += (await processor.process(matches[lo : lo + size])).events
    return events


@pytest.mark.parametrize("url_fixture", ["redis_url", "redis_cluster_url"])
async def test_shadows_on_redis_equal_their_replays_and_leave_the_live_ladder_unchanged(request, url_fixture):
    url = request.getfixturevalue(url_fixture)
    name = f"t-{uuid.uuid4().hex[:10]}"
    ladders, matches = shadowed(name), duels(400, ladder=name)
    store = open_store(url)
    try:
        events = await batches(Processor(ladders, store, clock=clock), matches)
        plain = Processor(Ladders([live(name)]), MemoryStore(), clock=clock)
        assert events == await batches(plain, matches)
        assert await store.players(name) == await plain.store.players(name)
        for shadow in ladders[name].shadows:
            oracle = Processor(alone(shadow, name), MemoryStore(), clock=clock)
            await batches(oracle, matches)  # the same batches: the states' versions too
            assert await store.players(shadow.name) == await oracle.store.players(name)
        wide = f"{name}~wide"
        before = await store.players(wide)
        again = await Processor(ladders, store, clock=clock).process(matches[100:250])
        assert all(r.duplicate for r in again.results) and await store.players(wide) == before
        assert await store.unproduced(wide, 0, [m.match_id for m in matches]) == {}
    finally:
        await store.close()
    if url_fixture == "redis_url":
        client = redis.Redis.from_url(url)
        keys = {k.decode() for k in client.scan_iter(match=f"sr:{{{name}*")}
        shadow_keys = {k for k in keys if k.startswith(f"sr:{{{wide}}}:")}
        assert shadow_keys and all(k.startswith((f"sr:{{{name}}}:", f"sr:{{{name}~")) for k in keys)

        def histories(ladder: str) -> list[bytes]:
            return [
                f
                for k in keys
                if k.startswith(f"sr:{{{ladder}}}:players:")
                for f in client.hkeys(k)
                if f[:1] == b"\xff"
            ]

        assert not [k for k in shadow_keys if k.endswith(":unproduced")] and not histories(
            wide
        )  # no history, no events
        assert histories(name)
        client.delete(*keys)
