"""Noticing a worker that holds partitions with records to apply and applies none of them.

Whatever the cause (a future that never resolves, a partition left paused, a guard waiting
forever), a wedged worker looks alive: it answers probes, heartbeats keep its partitions,
and nothing is logged. `StallWatch` makes it loud: a partition assigned here whose log end is
beyond what was acknowledged, with no record of it acknowledged for ``stall_after`` seconds,
is *stalled*: logged once as a warning (with the in-flight dump, `wait_dump`), counted in
``stream_rater_partitions_stalled`` and named by ``/readyz`` (503) until it moves again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from stream_rater.service import metrics
from stream_rater.service.order_watch import Message

log = logging.getLogger(__name__)


class StallWatch:
    """Per assigned partition: the offset after the last record acknowledged here (`acked`)
    and since when nothing moved while records were pending (`check`)."""

    def __init__(self, after: float, clock: Callable[[], float] = time.monotonic) -> None:
        """`after` seconds without progress while records are pending make a stall (0: never)."""
        self.after = after
        self.clock = clock
        self._done: dict[int, int] = {}
        self._since: dict[int, float] = {}
        #: Stalled partition → why (`reasons`).
        self.stalled: dict[int, str] = {}

    def acked(self, messages: Sequence[Message]) -> None:
        """`messages` were acknowledged: their partitions moved."""
        now, done, since = self.clock(), self._done, self._since
        for message in messages:  # `max` inlined: this runs for every record
            partition, offset = message.partition, message.offset
            if offset >= done.get(partition, 0):
                done[partition] = offset + 1
            since[partition] = now

    def acking(self, ack: Callable[[Sequence[Message]], None]) -> Callable[[Sequence[Message]], None]:
        """`ack`, then `acked`: what the pipeline acknowledges its batches with."""

        def ack_and_note(messages: Sequence[Message]) -> None:
            ack(messages)
            self.acked(messages)

        return ack_and_note

    def check(self, assigned: Mapping[int, tuple[int | None, int | None]]) -> list[int]:
        """Update the stalls from `assigned` (partition → the offset the group committed, the
        log end, each None if unknown; partitions held for a known reason left out); returns
        the partitions newly stalled."""
        now = self.clock()
        for gone in set(self._since) - set(assigned):
            self._since.pop(gone, None)
            self._done.pop(gone, None)
        stalled = {}
        for partition, (committed, end) in assigned.items():
            done = max(self._done.get(partition, 0), committed or 0)
            if end is None or end <= done:
                self._since[partition] = now
                continue
            idle = now - self._since.setdefault(partition, now)
            if self.after > 0 and idle >= self.after:
                stalled[partition] = (
                    f"partition {partition} stalled: records {done} to {end - 1} wait, and none was "
                    f"applied for {idle:.0f} s (stall_after {self.after:g} s)"
                )
        newly = sorted(set(stalled) - set(self.stalled))
        self.stalled = stalled
        metrics.PARTITIONS_STALLED.set(len(stalled))
        return newly

    def reasons(self) -> list[str]:
        """Why each stalled partition is (readiness says so)."""
        return [self.stalled[p] for p in sorted(self.stalled)]
