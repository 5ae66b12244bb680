"""Whether the matches topic still holds a ladder's whole history.

Retention (or ``delete_records``) deletes a partition's head: the broker then answers a read
from the beginning with its earliest retained offset, and a rebuild from there would rate
the ladder from the tail of its history. `deleted_heads` finds the partitions a ladder's
history is read from whose log no longer starts at offset 0. Readers that start from a
checkpoint (`checkpoints`) need the log only from the checkpoint's offsets: voids and
re-rates (`corrections.starting`: `TooOld` when even the checkpoint is past the head),
store-loss rebuilds (`offline.recovery`) and `verify` compare the heads with those offsets;
without a checkpoint, `void`, `rerate`, ``replay --from-topic`` and the workers' correction
requests refuse with `HistoryTruncated` unless a ``--history`` file supplies the deleted part,
and `verify` says it only checked a tail.

The store keeps no ladder's first offset, only how far it goes (partition → next offset), so
a deleted head is assumed to have held the ladder's matches: a ladder that began after the
deleted offsets is refused too, and an empty ``--history`` file says there was nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_rater.config.settings import Settings
from stream_rater.kafka.admin import topic_partitions
from stream_rater.kafka.produce import home_partition
from stream_rater.kafka.security import client_options


@dataclass(frozen=True, slots=True)
class DeletedHead:
    """A partition of `topic` whose first retained offset is `earliest` > 0: offsets
    ``0..earliest-1`` were deleted."""

    topic: str
    partition: int
    earliest: int

    def line(self) -> str:
        """``partition 0 of topic 'matches' starts at offset 1200; offsets 0..1199 were deleted``"""
        return (
            f"partition {self.partition} of topic {self.topic!r} starts at offset {self.earliest}; "
            f"offsets 0..{self.earliest - 1} were deleted"
        )


class HistoryTruncated(RuntimeError):
    """The matches topic no longer holds the head of a ladder's history, and nothing supplied it."""

    def __init__(self, ladder: str, heads: Sequence[DeletedHead]) -> None:
        super().__init__(
            f"ladder {ladder!r}: {'; '.join(h.line() for h in heads)} (retention?); "
            "give the rest with --history FILE"
        )
        self.ladder, self.heads = ladder, list(heads)


async def deleted_heads(
    settings: Settings, ladder: str, *, partitions: Iterable[int] = (), topic: str | None = None
) -> list[DeletedHead]:
    """The partitions `ladder`'s history is read from — its home partition (where its keyed
    records go) and `partitions` (where the store's positions or a read found its records) —
    whose first retained offset in `topic` (default: the matches topic) is > 0, by partition.
    One metadata and one list-offsets request; the workers' automatic rebuild calls it too."""
    topic = topic or settings.topic_matches
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False, group_id=None)
    try:
        await consumer.start()  # a failed start is stopped too (else aiokafka warns at exit)
        existing = await topic_partitions(consumer, topic)
        wanted = {home_partition(ladder, len(existing)), *partitions}
        asked = [tp for tp in existing if tp.partition in wanted]
        earliest: dict[TopicPartition, int] = await consumer.beginning_offsets(asked)
    finally:
        await consumer.stop()
    return [DeletedHead(topic, tp.partition, offset) for tp, offset in sorted(earliest.items()) if offset > 0]


def refuse_truncated(ladder: str, heads: Sequence[DeletedHead], *, supplied: bool) -> None:
    """Raise `HistoryTruncated` when `heads` were deleted and no history file was `supplied`."""
    if heads and not supplied:
        raise HistoryTruncated(ladder, heads)
