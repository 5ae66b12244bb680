"""Noticing match records that break the ladder-is-the-unit-of-order rule (README, Order)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from stream_rater.contracts import match_key
from stream_rater.kafka import home_partition
from stream_rater.service import metrics

log = logging.getLogger(__name__)


class Message(Protocol):
    """What the handler needs of a consumed record (faust's ``Message`` has all of it, plus
    ``headers`` and ``timestamp``, which dead letters keep when a record has them)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class OrderWatch:
    """Notices match records that break the ladder-is-the-unit-of-order rule.

    `stream-rater publish` keys every match by its ladder, so a ladder's matches share one
    partition and are applied in that partition's order. A foreign producer may key them
    otherwise (or use another partitioner): such records are still applied exactly once
    (the versioned commit), but in whatever order the workers take them. Each one is
    counted (``stream_rater_matches_miskeyed_total{ladder,partition}``) and a warning naming
    the ladder and partition is logged at most once per `warn_every` seconds per pair.
    """

    def __init__(
        self,
        partition_count: Callable[[str], int | None],
        warn_every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.partition_count = partition_count
        self.warn_every = warn_every
        self.clock = clock
        self._warned: dict[tuple[str, int], float] = {}
        self._counts: dict[str, tuple[int | None, float]] = {}

    def _partitions(self, topic: str) -> int | None:
        """The topic's partition count, asked of the consumer at most every `warn_every` s."""
        count, asked = self._counts.get(topic, (None, -self.warn_every))
        if count is None or self.clock() - asked >= self.warn_every:
            count = self.partition_count(topic)
            self._counts[topic] = (count, self.clock())
        return count

    def check(self, message: Message, ladder: str) -> bool:
        """True if `message` (a match of `ladder`) is keyed and placed as the rule says."""
        if message.key == match_key(ladder):
            partitions = self._partitions(message.topic)
            if partitions is None or home_partition(ladder, partitions) == message.partition:
                return True
        metrics.MATCHES_MISKEYED.labels(ladder, str(message.partition)).inc()
        now, pair = self.clock(), (ladder, message.partition)
        if now - self._warned.get(pair, -self.warn_every) >= self.warn_every:
            self._warned[pair] = now
            log.warning(
                "ladder %r: a match record on %s[%d] (key %r) is not keyed by its ladder or not on "
                "the ladder's partition; it is applied exactly once, but its order relative to the "
                "ladder's other matches is not guaranteed (stream_rater_matches_miskeyed_total)",
                ladder,
                message.topic,
                message.partition,
                message.key,
            )
        return False
