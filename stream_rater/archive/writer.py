"""Writing rating-changed events into the archive: one batch, one transaction, idempotent.

A batch is copied (``COPY``, the fastest way in) into a per-connection temp table and moved
into ``rating_events`` with ``INSERT … SELECT … ON CONFLICT DO NOTHING`` in (partition, offset)
order: a redelivered event, a batch written twice (a crash between the PostgreSQL commit and
the offset commit), or one event twice in a batch changes nothing, and the first copy of an
event stays. The caller commits its Kafka offsets only after `write_batch` returned, i.e. after
PostgreSQL committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from stream_rater.contracts.codecs import decode
from stream_rater.contracts.rating_changed import RatingChanged

if TYPE_CHECKING:
    import psycopg

#: The columns a batch fills (``position`` and ``archived_at`` are the table's).
COLUMNS = (
    "ladder",
    "kind",
    "event_id",
    "match_id",
    "player_id",
    "model",
    "mu_before",
    "sigma_before",
    "mu_after",
    "sigma_after",
    "rating",
    "delta",
    "games",
    "finished_at",
    "processed_at",
    "event",
    "topic",
    "kafka_partition",
    "kafka_offset",
)
_COLS = ", ".join(COLUMNS)
_TEMP = (
    "CREATE TEMP TABLE IF NOT EXISTS incoming ON COMMIT DELETE ROWS AS "
    f"SELECT {_COLS} FROM rating_events WITH NO DATA"
)
_MOVE = (
    f"INSERT INTO rating_events ({_COLS}) SELECT {_COLS} FROM incoming "
    "ORDER BY kafka_partition, kafka_offset ON CONFLICT DO NOTHING"
)


class PoisonRecord(ValueError):
    """A record of the updates topic that is not a rating-changed event (undecodable or invalid)."""


@dataclass(frozen=True, slots=True)
class ArchivedEvent:
    """One rating-changed event and where it was read (topic, partition, offset)."""

    event: RatingChanged
    wire: dict[str, Any]
    topic: str
    partition: int
    offset: int

    def row(self) -> tuple[Any, ...]:
        """The event as a row of `COLUMNS`."""
        e = self.event
        return (
            e.ladder,
            e.kind,
            e.event_id,
            e.match_id,
            e.player_id,
            e.model,
            e.before["mu"],
            e.before["sigma"],
            e.after["mu"],
            e.after["sigma"],
            e.rating,
            e.delta,
            e.games,
            e.finished_at,
            e.processed_at,
            orjson.dumps(self.wire).decode(),
            self.topic,
            self.partition,
            self.offset,
        )


def archived_event(value: bytes | None, topic: str, partition: int, offset: int) -> ArchivedEvent:
    """The record's rating-changed event (JSON or msgpack, validated); `PoisonRecord` saying why
    when it is none."""
    if value is None:
        raise PoisonRecord("empty record (a tombstone)")
    try:
        wire = decode(value)
        event = RatingChanged.from_dict(wire)
    except ValueError as exc:  # DecodeError, ValidationError
        raise PoisonRecord(str(exc)) from exc
    return ArchivedEvent(event, wire, topic, partition, offset)


async def write_batch(conn: psycopg.AsyncConnection[Any], events: Sequence[ArchivedEvent]) -> int:
    """Write `events` in one transaction (committed on return); the count newly archived (the
    rest were there already)."""
    if not events:
        return 0
    async with conn.transaction():
        await conn.execute(_TEMP)
        async with conn.cursor() as cursor:
            async with cursor.copy(f"COPY incoming ({_COLS}) FROM STDIN") as copy:
                for event in events:
                    await copy.write_row(event.row())
            await cursor.execute(_MOVE)
            return max(0, cursor.rowcount)
