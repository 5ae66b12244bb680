"""The archive's schema: versioned SQL migrations shipped in ``migrations/NNNN_name.sql``,
applied in order, each once, recorded in ``schema_version``.

`migrate` runs them in one transaction under an advisory lock, so two archive processes that
start together apply each migration once, and a failed migration leaves nothing behind. A
database whose schema is newer than this code knows is refused (`ArchiveSchemaError`): an
older archive must not write into a layout it does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

MIGRATIONS = Path(__file__).with_name("migrations")
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
#: The advisory lock key of migrations (any constant; ``hashtext`` of a name keeps it readable).
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('stream_rater.archive.migrate'))"


class ArchiveSchemaError(RuntimeError):
    """The archive's schema is newer than this code, or a migration file is misnamed."""


@dataclass(frozen=True)
class Migration:
    """One migration file: its version, name and SQL."""

    version: int
    name: str
    sql: str


def migrations(directory: Path = MIGRATIONS) -> list[Migration]:
    """The migrations in `directory`, by version; a misnamed or duplicate file is an error."""
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise ArchiveSchemaError(f"{path}: a migration is named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise ArchiveSchemaError(f"{path}: version {version} twice")
        found[version] = Migration(version, match.group(2), path.read_text())
    return [found[v] for v in sorted(found)]


async def migrate(conn: psycopg.AsyncConnection[object], directory: Path = MIGRATIONS) -> list[int]:
    """Apply the migrations `conn`'s database lacks, in one transaction; the versions applied
    (empty when it was up to date: applying twice is a no-op)."""
    known = migrations(directory)
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute(_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cursor = await conn.execute("SELECT version FROM schema_version")
        have = {int(row[0]) for row in await cursor.fetchall()}  # type: ignore[index]
        newest = max((m.version for m in known), default=0)
        if have and max(have) > newest:
            raise ArchiveSchemaError(
                f"the archive's schema is at version {max(have)}, newer than this stream-rater knows "
                f"({newest}): upgrade stream-rater"
            )
        for migration in known:
            if migration.version in have:
                continue
            await conn.execute(migration.sql.encode())
            await conn.execute(
                "INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration.version)
    return applied


async def schema_version(conn: psycopg.AsyncConnection[object]) -> int:
    """The newest applied migration's version (0 for a database never migrated)."""
    cursor = await conn.execute("SELECT to_regclass('schema_version') IS NOT NULL")
    row = await cursor.fetchone()
    if not row or not row[0]:  # type: ignore[index]
        return 0
    cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
    row = await cursor.fetchone()
    return int(row[0]) if row else 0  # type: ignore[index]
