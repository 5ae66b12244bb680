"""Noticing match records that break the ladder-is-the-unit-of-order rule (README, Order):
records not keyed by their ladder, and split ladders (one ladder's records on several
partitions)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from stream_rater.contracts import match_key
from stream_rater.service import metrics

log = logging.getLogger(__name__)

#: What the split-ladder warning tells the operator to change.
SPLIT_FIX = (
    "key every match by its ladder and use a partitioner that hashes the key (Java's and "
    "franz-go's default murmur2, librdkafka's default consistent_random or murmur2_random, "
    "sarama's default FNV-1a); not a round-robin one such as kafka-go's default Balancer, "
    "nor a null key"
)


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

    A ladder's partition is the one its records arrive on, whatever the producer's
    partitioner: any partitioner that hashes the key keeps one ladder on one partition (the
    store then records that partition's positions for it, the binding every tool reads). Two
    things break the rule, and each is applied exactly once (the versioned commit) but in an
    order the log does not define:

    - a record not keyed by its ladder: counted in
      ``stream_rater_matches_miskeyed_total{ladder,partition}``;
    - a **split ladder**, whose records this worker took from more than one partition:
      ``stream_rater_split_ladders{ladder}`` is the number of partitions, and
      ``stream_rater_ladder_partition{ladder,partition}`` (1 per partition a ladder was seen
      on) lets the alert rule find a ladder split across workers too.

    Each warning is logged at most once per `warn_every` seconds per ladder and partition.
    """

    def __init__(self, warn_every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.warn_every = warn_every
        self.clock = clock
        self._warned: dict[tuple[str, str, int], float] = {}
        self._partitions: dict[tuple[str, str], set[int]] = {}

    def check(self, message: Message, ladder: str) -> bool:
        """True if `message` (a match of `ladder`) is keyed by its ladder and on the one
        partition the ladder's records have arrived on so far."""
        keyed = message.key == match_key(ladder)
        if not keyed:
            metrics.MATCHES_MISKEYED.labels(ladder, str(message.partition)).inc()
            self._warn(
                "miskeyed",
                ladder,
                message.partition,
                "ladder %r: a match record on %s[%d] has key %r, not its ladder; it is applied "
                "exactly once, but its order relative to the ladder's other matches is not "
                "guaranteed (stream_rater_matches_miskeyed_total)",
                ladder,
                message.topic,
                message.partition,
                message.key,
            )
        seen = self._partitions.get((message.topic, ladder))
        if seen is None or message.partition not in seen:  # no new set per record
            seen = self._partitions.setdefault((message.topic, ladder), set())
            seen.add(message.partition)
            metrics.LADDER_PARTITION.labels(ladder, str(message.partition)).set(1)
        if len(seen) == 1:
            return keyed
        metrics.SPLIT_LADDERS.labels(ladder).set(len(seen))
        self._warn(
            "split",
            ladder,
            message.partition,
            "split ladder %r: its match records arrive on partitions %s of %s; they are applied "
            "exactly once each, in the order the workers take them, which a replay (by broker "
            "timestamp) may not reproduce: `verify` shows what differs. To fix it, %s "
            "(stream_rater_split_ladders)",
            ladder,
            sorted(seen),
            message.topic,
            SPLIT_FIX,
        )
        return False

    def _warn(self, what: str, ladder: str, partition: int, text: str, *args: object) -> None:
        """Log `text` unless this (`what`, `ladder`, `partition`) was logged in the interval."""
        now, pair = self.clock(), (what, ladder, partition)
        if now - self._warned.get(pair, -self.warn_every) >= self.warn_every:
            self._warned[pair] = now
            log.warning(text, *args)
