"""The archive: the past in PostgreSQL (optional). Every rating-changed event of the updates
topic, once, and every rated match's placings (topic matches), written by ``stream-rater
archive`` (`stream_rater.service.archiver`) and read by the read API's history and by
`explain` beyond what Redis keeps.

`schema` (versioned migrations), `writer` (idempotent batches), `reader` (`ArchiveReader`).
psycopg (the ``archive`` extra) is imported only when a connection is made, so the layers
above may import this package on a deployment without it."""

from __future__ import annotations

from stream_rater.archive.reader import ArchiveReader, ArchiveUnavailable, HistoryPage
from stream_rater.archive.schema import ArchiveSchemaError, migrate, migrations, schema_version
from stream_rater.archive.writer import (
    ArchivedEvent,
    ArchivedPlacings,
    PoisonRecord,
    archived_event,
    archived_placings,
    write_batch,
)
from stream_rater.config.settings import Settings


def archive_reader(settings: Settings) -> ArchiveReader | None:
    """The reader of the configured archive (``STREAM_RATER_ARCHIVE_URL``), or None without one."""
    return ArchiveReader(settings.archive_url) if settings.archive_url else None


__all__ = [
    "ArchiveReader",
    "ArchiveSchemaError",
    "ArchiveUnavailable",
    "ArchivedEvent",
    "ArchivedPlacings",
    "HistoryPage",
    "PoisonRecord",
    "archive_reader",
    "archived_event",
    "archived_placings",
    "migrate",
    "migrations",
    "schema_version",
    "write_batch",
]
