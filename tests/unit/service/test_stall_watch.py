"""The stall watch: a partition with records waiting and none acknowledged for `after` seconds
is stalled (newly once), counted, and clears once it moves; idle and revoked partitions never
stall."""

from __future__ import annotations

from stream_rater.service import metrics
from stream_rater.service.stall_watch import StallWatch
from tests.unit.service.consumed import Record


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_partition_with_records_waiting_and_none_acknowledged_stalls_once_then_clears():
    clock = Clock()
    watch = StallWatch(60.0, clock)
    assert watch.check({0: (None, 100), 1: (None, 50)}) == []
    watch.acked([Record(1, 49)])  # partition 1 caught up; partition 0 applies nothing
    clock.now = 59.0
    assert watch.check({0: (None, 100), 1: (None, 50)}) == []
    clock.now = 60.0
    assert watch.check({0: (None, 100), 1: (None, 50)}) == [0]
    assert "partition 0 stalled: records 0 to 99 wait" in watch.reasons()[0]
    assert metrics.PARTITIONS_STALLED._value.get() == 1
    clock.now = 70.0
    assert watch.check({0: (None, 100), 1: (None, 50)}) == [], "reported once"
    watch.acked([Record(0, 10)])
    assert watch.check({0: (None, 100), 1: (None, 50)}) == []
    assert watch.reasons() == [] and metrics.PARTITIONS_STALLED._value.get() == 0


def test_idle_committed_and_revoked_partitions_never_stall():
    clock = Clock()
    watch = StallWatch(5.0, clock)
    watch.check({0: (None, 0), 1: (40, 40), 2: (None, None), 3: (None, 9)})
    clock.now = 100.0
    # 0: empty; 1: committed to its end; 2: end unknown; 3: revoked meanwhile
    assert watch.check({0: (None, 0), 1: (40, 40), 2: (None, None)}) == []
    assert watch.check({0: (None, 0), 1: (40, 40), 2: (None, None), 3: (None, 9)}) == [], (
        "a partition assigned again starts afresh"
    )


def test_after_zero_never_stalls():
    clock = Clock()
    watch = StallWatch(0.0, clock)
    watch.check({0: (None, 10)})
    clock.now = 1e6
    assert watch.check({0: (None, 10)}) == []
