"""`bench capacity`'s model against Redis itself: costs measured on one load, projected to a
load four times its size, agree with that load's real keyspace memory growth."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from stream_rater.bench import capacity
from stream_rater.config.settings import Settings
from stream_rater.local.runtime import LocalRuntime

pytestmark = pytest.mark.integration


def _fresh_redis_measure(
    players: int, matches: int, settings: Settings, batch_size: int = 100
) -> capacity.Measured:
    """A load on a Redis of its own (no other test's keys move its memory), in batches
    small enough that a player is rarely twice in one, as on a big ladder."""
    with LocalRuntime(broker=False) as runtime:
        return asyncio.run(capacity.measure(runtime.redis_url, players, matches, 20e6, settings, batch_size))


def test_projection_from_a_small_load_matches_a_load_four_times_larger():
    settings = dataclasses.replace(Settings(), redis_prefix="cap")
    small = _fresh_redis_measure(3_000, 15_000, settings)
    large = _fresh_redis_measure(12_000, 60_000, settings)
    markers = sum(k.entries for k in large.sizes.kinds if k.name == "mk")
    projected = sum(small.sizes.project(12_000, markers).values())
    assert projected == pytest.approx(large.load.keyspace_memory, rel=0.15)


def test_markers_of_produced_matches_are_small_and_only_the_last_batch_keeps_its_events():
    """Each batch's events are noted as produced, as the worker notes them: every marker but the
    last batch's is shrunk (at most 150 bytes each, its share of its slot's MEMORY USAGE), and only the
    last batch's events stay in the unproduced hash, for a redelivery to re-emit."""
    settings = dataclasses.replace(Settings(), redis_prefix="cap")
    measured = _fresh_redis_measure(2_000, 3 * capacity.BATCH, settings, capacity.BATCH)
    [markers] = [k for k in measured.sizes.kinds if k.name == "mk"]
    assert markers.usage / markers.entries <= 150
    [unproduced] = [k for k in measured.sizes.kinds if k.name == "unproduced"]
    assert unproduced.entries == capacity.BATCH + 1  # and the field that keeps it a hash table
