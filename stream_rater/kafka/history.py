"""A ladder's history read back from the matches topic: its records decoded and validated as a
worker does, in the order the stream applies them. The matches topic is that history (records
are keyed by ladder, so a ladder's matches share one partition); `verify` and re-rates start
from it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from stream_rater.config.ladders import Ladders
from stream_rater.contracts import Limits, MatchFinished, ValidationError
from stream_rater.contracts.codecs import DecodeError, decode_match
from stream_rater.kafka.log import LogRecord


@dataclass(slots=True)
class LadderHistory:
    """A ladder's valid matches as read from the topic, in the order the stream applies them."""

    ladder: str
    matches: list[MatchFinished] = field(default_factory=list)
    #: (partition, offset) of each match's record; None for a match from a ``--history`` file,
    #: older than anything the topic still holds.
    where: list[tuple[int, int] | None] = field(default_factory=list)
    #: Partition → offset after the last of the ladder's records that was read.
    positions: dict[int, int] = field(default_factory=dict)
    #: Where the records that failed validation were, as ``partition@offset`` (the stream
    #: dead-letters them; their ladder is unknown, so these are all ladders').
    rejected: list[str] = field(default_factory=list)

    @property
    def ordered(self) -> bool:
        """True when all the ladder's records are on one partition: its order is the log's."""
        return len(self.positions) <= 1


def ladder_history(
    records: Iterable[LogRecord], ladders: Ladders, ladder: str, limits: Limits = Limits()
) -> LadderHistory:
    """The matches of `ladder` among `records` (in (partition, offset) order), decoded and
    validated as a worker does. If the ladder's records are spread over several partitions
    (a foreign producer keyed them otherwise), the stream's order among them was not
    defined; they are then taken by broker timestamp, partition, offset."""
    history = LadderHistory(ladder)
    found: list[tuple[LogRecord, MatchFinished]] = []
    for record in records:
        try:
            match = decode_match(record.value, ladders, limits, record_time=record.timestamp / 1000.0)
        except (DecodeError, ValidationError):
            history.rejected.append(f"{record.partition}@{record.offset}")
            continue
        if match.ladder == ladder:
            found.append((record, match))
            history.positions[record.partition] = record.offset + 1
    if not history.ordered:
        found.sort(key=lambda pair: (pair[0].timestamp, pair[0].partition, pair[0].offset))
    history.matches = [match for _, match in found]
    history.where = [(record.partition, record.offset) for record, _ in found]
    return history
