"""Writing rating-changed events, and the matches' placings, into the archive: one batch, one
transaction, idempotent.

A batch is copied (``COPY``, the fastest way in) into a per-connection temp table and moved
into ``rating_events`` with ``INSERT … SELECT … ON CONFLICT DO NOTHING`` in (partition, offset)
order: a redelivered event, a batch written twice (a crash between the PostgreSQL commit and
the offset commit), or one event twice in a batch changes nothing, and the first copy of an
event stays. The caller commits its Kafka offsets only after `write_batch` returned, i.e. after
PostgreSQL committed. A batch's matches (`ArchivedPlacings`, from topic matches) go into
``match_placings`` in the same transaction, also ``ON CONFLICT DO NOTHING``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from stream_rater.contracts import Limits, ValidationError
from stream_rater.contracts.codecs import DecodeError, decode, decode_match
from stream_rater.contracts.match import LadderTable
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
_PLACINGS = (
    "INSERT INTO match_placings (ladder, match_id, placings, topic, kafka_partition, kafka_offset) "
    "VALUES (%s, %s, %s::jsonb, %s, %s, %s) ON CONFLICT DO NOTHING"
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


@dataclass(frozen=True, slots=True)
class ArchivedPlacings:
    """One rated match's placings (`MatchFinished.placings`) and where it was read."""

    ladder: str
    match_id: str
    placings: list[list[Any]]
    topic: str
    partition: int
    offset: int

    def row(self) -> tuple[Any, ...]:
        """The placings as a row of ``match_placings``."""
        placings = orjson.dumps(self.placings).decode()
        return (self.ladder, self.match_id, placings, self.topic, self.partition, self.offset)


def archived_placings(
    value: bytes | None, ladders: LadderTable, limits: Limits, record: tuple[str, int, int, float | None]
) -> ArchivedPlacings | None:
    """The placings of a match-finished record (`record`: topic, partition, offset, and its
    timestamp in epoch seconds),
    decoded and validated as the worker does; None for a record with none (a season start, a
    match declared unrated); `PoisonRecord` for one the worker dead-letters."""
    topic, partition, offset, timestamp = record
    try:
        match = decode_match(value or b"", ladders, limits, record_time=timestamp)
    except (DecodeError, ValidationError) as exc:
        raise PoisonRecord(str(exc)) from exc
    if match.season is not None or not match.rated:
        return None
    return ArchivedPlacings(match.ladder, match.match_id, match.placings(), topic, partition, offset)


async def write_batch(
    conn: psycopg.AsyncConnection[Any],
    events: Sequence[ArchivedEvent],
    placings: Sequence[ArchivedPlacings] = (),
) -> int:
    """Write `events` and `placings` in one transaction (committed on return); the count of
    events newly archived (the rest were there already)."""
    if not events and not placings:
        return 0
    async with conn.transaction():
        if placings:
            async with conn.cursor() as cursor:
                await cursor.executemany(_PLACINGS, [p.row() for p in placings])
        if not events:
            return 0
        await conn.execute(_TEMP)
        async with conn.cursor() as cursor:
            async with cursor.copy(f"COPY incoming ({_COLS}) FROM STDIN") as copy:
                for event in events:
                    await copy.write_row(event.row())
            await cursor.execute(_MOVE)
            return max(0, cursor.rowcount)
